/*
 * agent/cluster/admit.c - see admit.h.
 *
 * Secrets: the token verifier (v) is wiped on every path out of
 * h_join_request; the token text made by token-create is wiped after it is
 * packed into the answer.  a->tokens and a->cakey exist only on a node that
 * holds the CA key (agent/cluster/keyring.h); a join waiting for its token use
 * (struct gm_join_wait) holds a copy of the verifier, wiped when it ends.
 */
#include "agent/cluster/admit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "agent/cluster/chief.h"
#include "agent/cluster/keyring.h"
#include "agent/mesh/members.h"
#include "agent/service/metrics.h"
#include "agent/core/state.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "crypto/join.h"
#include "crypto/tls.h"
#include "crypto/token.h"

#define JOIN_FAIL_WINDOW_S 60
#define RENEW_CHECK_S 3600 /* how often the certificate's expiry is looked at */

static int join_refuse(struct gm_agent *a, struct gm_link *l, const char *id, int err,
                       const char *why)
{
    int64_t now = (int64_t)time(NULL);
    char msg[200];

    a->join_fails[a->join_fail_next] = now;
    a->join_fail_next = (a->join_fail_next + 1) % GM_JOIN_FAILS_MAX;
    a->stats.joins_refused++;
    gm_warn("event=join-refused token=%s peer=%s err=%d reason=\"%s\"", id, gm_link_peer_addr(l),
            err, why);
    snprintf(msg, sizeof(msg), "join refused: %s", why);
    return gm_agent_refuse(l, err, msg);
}

static int join_rate_limited(const struct gm_agent *a)
{
    int64_t now = (int64_t)time(NULL);
    size_t i;

    for (i = 0; i < GM_JOIN_FAILS_MAX; i++)
        if (a->join_fails[i] == 0 || now - a->join_fails[i] >= JOIN_FAIL_WINDOW_S)
            return 0;
    return 1;
}

/* A join whose proof verified, waiting for its token use to commit (gm_chief_use_token).
 * Owned by that request's callback; l is cleared when the link closes first. */
struct gm_join_wait {
    struct gm_agent *a;
    struct gm_link *l; /* borrowed; NULL once closed */
    uint64_t req;
    struct gm_msg_join_request rq;
    uint8_t v[GM_TOKEN_VERIFIER_LEN], binding[GM_JOIN_BINDING_LEN];
    char ctx[512];
    size_t clen;
    char id[2 * GM_TOKEN_ID_LEN + 1];
};

static void wait_free(struct gm_join_wait *w)
{
    sodium_memzero(w, sizeof(*w));
    free(w);
}

/* The token use is committed: issue the certificate and answer. */
static void join_finish(struct gm_agent *a, struct gm_join_wait *w)
{
    struct gm_link *l = w->l;
    struct gm_msg_join_request *rq = &w->rq;
    struct gm_msg_join_accept ac;
    char *actx = NULL, *json = NULL;
    struct gm_cert *cert = NULL;
    struct gm_member *m = NULL;
    struct gm_peer *peer;
    size_t n = 0, len = 0;
    int err, changed;

    memset(&ac, 0, sizeof(ac));
    err = gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, rq->node, rq->pubkey, GM_ID_NODE_DAYS,
                           &cert);
    if (err == 0)
        err = gm_id_cert_to_pem(cert, &ac.cert_pem);
    if (err == 0)
        err = gm_id_cert_to_pem(a->ca, &ac.ca_pem);
    if (err == 0) {
        char filled[GM_ADDR_MAX];
        gm_proto_addr_fill_host(rq->listen, gm_link_peer_addr(l), filled);
        memcpy(rq->listen, filled, sizeof(filled));
        peer = gm_members_upsert(a, rq->node, rq->listen, &changed);
        err = peer == NULL ? -ENOMEM : gm_members_save(a);
    }
    if (err == 0)
        err = gm_members_list(a, &m, &n);
    if (err == 0 && !a->have_bkey)
        err = -ENOKEY;
    if (err == 0) {
        size_t alen;
        memcpy(ac.beacon_key, a->bkey, sizeof(ac.beacon_key));
        alen = gm_join_accept_context(w->ctx, w->clen, ac.cert_pem, ac.beacon_key, &actx);
        if (actx == NULL) {
            err = -ENOMEM;
        } else {
            snprintf(ac.node, sizeof(ac.node), "%s", rq->node);
            ac.members = m;
            ac.n_members = n;
            gm_join_proof(w->v, GM_JOIN_ROLE_ADMITTER, w->binding, actx, alen, ac.proof);
            err = gm_proto_join_accept_encode(&ac, &json, &len);
            ac.members = NULL;
        }
    }
    if (err == 0)
        err = gm_link_send(l, GM_MSG_JOIN_ACCEPT, w->req, json, len);
    free(json);
    free(actx);
    free(m);
    gm_id_cert_free(cert);
    gm_proto_join_accept_free(&ac);
    if (err != 0) {
        gm_err("event=join-failed token=%s err=%d msg=\"%s\"", w->id, err, gm_strerror(err));
        gm_agent_ignore(gm_agent_refuse(l, err, "admitter failed to issue a certificate"));
        return;
    }
    a->stats.joins_accepted++;
    gm_metrics_join_accepted(a->metrics);
    gm_notice("event=join-accepted token=%s node=%s address=%s", w->id, rq->node, rq->listen);
    gm_link_set_state(l, GM_LSTATE_DONE);
    snprintf(((struct gm_lctx *)gm_link_data(l))->reason, 256, "join answered");
    gm_link_close(l, 0);
    peer = gm_agent_peer_find(a, rq->node);
    if (peer != NULL && gm_members_should_dial(a, peer))
        peer->next_dial = 0; /* the joiner starts its agent next: dial from the timer */
}

/* The replicated state's answer to this join's token use. */
static void join_use_done(void *arg, int code, const char *msg)
{
    struct gm_join_wait *w = arg;
    struct gm_agent *a = w->a;
    struct gm_link *l = w->l;

    if (l == NULL) {
        gm_warn("event=join-abandoned token=%s node=%s code=%d reason=\"the joiner left before "
                "its token use was recorded\"",
                w->id, w->rq.node, code);
        wait_free(w);
        return;
    }
    ((struct gm_lctx *)gm_link_data(l))->jw = NULL;
    if (code == 0 && (a->cakey == NULL || a->tokens == NULL)) {
        code = GM_ERR_AUTH;
        msg = "this node gave up the CA key meanwhile";
    }
    if (code != 0) {
        gm_agent_ignore(join_refuse(
            a, l, w->id, code,
            code == GM_ERR_TOKEN ? "already used (the cluster recorded all its uses)" : msg));
        wait_free(w);
        return;
    }
    if (gm_token_store_use(a->tokens, w->rq.token_id) != 0) /* the local records follow */
        gm_info("event=token-use-local token=%s reason=\"already at zero here\"", w->id);
    gm_keyring_changed(a);
    gm_info("event=token-use-committed token=%s node=%s", w->id, w->rq.node);
    join_finish(a, w);
    wait_free(w);
}

void gm_admit_link_closed(struct gm_agent *a, struct gm_lctx *c)
{
    (void)a;
    if (c->jw != NULL) {
        c->jw->l = NULL;
        c->jw = NULL;
    }
}

/* Uses of a token the replicated state has recorded. */
static uint64_t uses_recorded(struct gm_agent *a, const char *id)
{
    const struct gm_chief_fsm *f = gm_chief_state(a);

    for (size_t i = 0; f != NULL && i < f->ntokens; i++)
        if (strcmp(f->tokens[i].token, id) == 0)
            return f->tokens[i].uses;
    return 0;
}

static int h_join_request(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p)
{
    struct gm_join_wait *w;
    struct gm_token_info info;
    uint8_t v[GM_TOKEN_VERIFIER_LEN];
    char id[2 * GM_TOKEN_ID_LEN + 1] = "-";
    const char *why = NULL;
    int64_t now = (int64_t)time(NULL);
    int err;

    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->a = a;
    w->l = l;
    w->req = h->req;
    if (gm_proto_join_request_decode(p, h->len, &w->rq) != 0) {
        wait_free(w);
        return join_refuse(a, l, id, GM_ERR_PROTO, "malformed join request");
    }
    gm_token_id_hex(w->rq.token_id, id);
    snprintf(w->id, sizeof(w->id), "%s", id);
    if (join_rate_limited(a)) {
        wait_free(w);
        return join_refuse(a, l, id, -EBUSY, "too many failed joins, try again later");
    }
    err = gm_token_store_check(a->tokens, w->rq.token_id, now, v, &why);
    if (err == 0 && (gm_token_store_info(a->tokens, w->rq.token_id, &info) != 0 ||
                     uses_recorded(a, id) >= (uint64_t)info.uses_total)) {
        err = GM_ERR_TOKEN;
        why = "already used (the cluster recorded all its uses)";
    }
    if (err != 0) {
        sodium_memzero(v, sizeof(v));
        wait_free(w);
        return join_refuse(a, l, id, err, why);
    }
    memcpy(w->v, v, sizeof(v));
    sodium_memzero(v, sizeof(v));
    err = gm_tls_export(gm_link_tls(l), GM_JOIN_EXPORTER_LABEL, w->binding, sizeof(w->binding));
    w->clen = gm_proto_join_context(&w->rq, w->ctx, sizeof(w->ctx));
    if (err == 0)
        err = gm_join_proof_check(w->v, GM_JOIN_ROLE_JOINER, w->binding, w->ctx, w->clen,
                                  w->rq.proof);
    if (err != 0) {
        gm_token_store_fail(a->tokens, w->rq.token_id, now);
        wait_free(w);
        return join_refuse(a, l, id, GM_ERR_AUTH,
                           "join proof does not verify for this session (wrong secret or replay)");
    }
    if (strcmp(w->rq.node, a->cfg.node) == 0 || gm_agent_peer_find(a, w->rq.node) != NULL) {
        wait_free(w);
        return join_refuse(a, l, id, -EEXIST, "node name already in the cluster");
    }
    /* record the use in the replicated state before anything is returned: one token cannot
     * be spent twice through two voters */
    err = gm_chief_use_token(a, id, info.uses_total, join_use_done, w);
    if (err != 0) {
        wait_free(w);
        return join_refuse(a, l, id, err,
                           err == -EAGAIN || err == -EHOSTUNREACH
                               ? "no chief to record the token use (an election, or no "
                                 "majority): try again"
                               : "this node cannot record the token use");
    }
    ((struct gm_lctx *)gm_link_data(l))->jw = w;
    gm_info("event=join-pending token=%s node=%s reason=\"recording the token use\"", id,
            w->rq.node);
    return 0;
}
/* Saves and starts presenting a renewed certificate. */
static int install_cert(struct gm_agent *a, struct gm_cert *cert)
{
    char path[GM_PATH_MAX];
    int64_t left = 0;
    int err = gm_config_state_path(&a->cfg, "node.crt", path, sizeof(path));

    if (err == 0)
        err = gm_id_cert_save(cert, path);
    if (err == 0)
        err = gm_tls_ctx_set_identity(a->tls, cert, a->key);
    if (err != 0) {
        gm_err("event=cert-renew-failed err=%d msg=\"%s\"", err, gm_strerror(err));
        gm_id_cert_free(cert);
        return err;
    }
    gm_id_cert_free(a->cert);
    a->cert = cert;
    gm_agent_ignore(gm_id_cert_seconds_left(cert, &left));
    gm_notice("event=cert-renewed node=%s seconds_left=%" PRId64, a->cfg.node, left);
    return 0;
}

/* Renews this node's certificate when it nears expiry: itself on the
 * admitter, else by asking the admitter over their link. */
void gm_admit_renew_check(struct gm_agent *a)
{
    struct gm_peer *p;
    struct gm_cert *cert = NULL;
    uint8_t pub[GM_ID_PUB_LEN];

    if (!gm_id_cert_needs_renewal(a->cert))
        return;
    if (a->cakey != NULL) {
        if (gm_id_key_public(a->key, pub) == 0 &&
            gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, a->cfg.node, pub, GM_ID_NODE_DAYS,
                             &cert) == 0)
            gm_agent_ignore(install_cert(a, cert));
        return;
    }
    p = a->admitter[0] ? gm_agent_peer_find(a, a->admitter) : NULL;
    if (p == NULL || p->link == NULL) { /* the chief is a voter: it holds the CA key */
        char chief[GM_CHIEF_NAME_MAX + 1];
        uint64_t term;
        struct gm_peer *cp = gm_chief_leader(a, chief, &term) == 0 && strcmp(chief, a->cfg.node)
                                 ? gm_agent_peer_find(a, chief)
                                 : NULL;
        if (cp != NULL && cp->link != NULL) {
            snprintf(a->admitter, sizeof(a->admitter), "%s", chief);
            p = cp;
        }
    }
    if (p == NULL || p->link == NULL) {
        gm_warn("event=cert-expiring node=%s reason=\"no link to the admitter %s\"", a->cfg.node,
                a->admitter[0] ? a->admitter : "(unknown)");
        a->next_renew_check = gm_time_mono_ns() + 60ull * 1000000000ull; /* retry soon */
        return;
    }
    gm_agent_ignore(gm_link_send(p->link, GM_MSG_RENEW_REQUEST, 0, NULL, 0));
    gm_info("event=cert-renew-requested admitter=%s", a->admitter);
}

static int h_renew_request(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                           const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_cert *cert = NULL;
    uint8_t pub[GM_ID_PUB_LEN];
    char *pem = NULL, *json = NULL;
    size_t len = 0;
    int err;

    (void)p;
    if (a->cakey == NULL || h->len != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO,
                               "renewal asked of a node that issues no certificates");
    err = gm_tls_peer_pubkey(gm_link_tls(l), pub);
    if (err == 0)
        err =
            gm_id_cert_issue(a->ca, a->cakey, a->cfg.cluster, c->node, pub, GM_ID_NODE_DAYS, &cert);
    if (err == 0)
        err = gm_id_cert_to_pem(cert, &pem);
    if (err == 0)
        err = gm_proto_renew_encode(pem, &json, &len);
    if (err == 0)
        err = gm_link_send(l, GM_MSG_RENEW_ACCEPT, h->req, json, len);
    if (err == 0)
        gm_notice("event=cert-issued node=%s reason=renewal", c->node);
    free(json);
    free(pem);
    gm_id_cert_free(cert);
    return err;
}

static int h_renew_accept(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                          const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_cert *cert = NULL;
    char *pem = NULL, cl[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
    int64_t old_left = 0, new_left = 0;
    int err;

    if (strcmp(c->node, a->admitter) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO,
                               "certificate offered by a node that is not the admitter");
    err = gm_proto_renew_decode(p, h->len, &pem);
    if (err == 0)
        err = gm_id_cert_from_pem(pem, strlen(pem), &cert);
    free(pem);
    if (err == 0 &&
        (gm_id_cert_check_issued(a->ca, cert) != 0 || gm_id_cert_identity(cert, cl, node) != 0 ||
         strcmp(cl, a->cfg.cluster) != 0 || strcmp(node, a->cfg.node) != 0 ||
         !gm_id_cert_matches_key(cert, a->key) || gm_id_cert_seconds_left(cert, &new_left) != 0 ||
         gm_id_cert_seconds_left(a->cert, &old_left) != 0 || new_left <= old_left))
        err = GM_ERR_AUTH;
    if (err != 0) {
        gm_id_cert_free(cert);
        return gm_agent_refuse(l, err, "renewed certificate is not valid for this node");
    }
    gm_agent_ignore(install_cert(a, cert)); /* logged there; the link stays either way */
    return 0;
}

void gm_admit_tick(struct gm_agent *a, uint64_t now)
{
    if (now >= a->next_renew_check) {
        a->next_renew_check = now + (uint64_t)RENEW_CHECK_S * 1000000000ull;
        gm_admit_renew_check(a); /* may shorten the wait */
    }
}

int gm_admit_load_denylist(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL, *line, *save = NULL;
    int err = gm_agent_state_read(a, "denylist", path, &text);

    if (err != 0 || text == NULL)
        return err;
    for (line = strtok_r(text, " \t\n", &save); line != NULL && err == 0;
         line = strtok_r(NULL, " \t\n", &save))
        err = gm_tls_ctx_deny(a->tls, line);
    free(text);
    return err;
}

void gm_admit_load_admitter(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL;
    size_t len = 0;

    if (gm_config_state_path(&a->cfg, "admitter", path, sizeof(path)) == 0 &&
        gm_id_read_file(path, 256, &text, &len) == 0) {
        text[strcspn(text, " \n")] = '\0';
        if (gm_id_name_valid(text))
            snprintf(a->admitter, sizeof(a->admitter), "%s", text);
        free(text);
    }
    if (a->cakey != NULL)
        snprintf(a->admitter, sizeof(a->admitter), "%s", a->cfg.node);
}

/* --- control commands --------------------------------------------------------- */

static json_t *token_create(struct gm_agent *a, json_t *req)
{
    char tok[GM_TOKEN_STR_MAX];
    struct gm_token_info info;
    uint8_t pin[GM_ID_PIN_LEN];
    json_int_t ttl = GM_TOKEN_DEFAULT_TTL_S, uses = 1;
    json_t *r;
    int err;

    if (a->tokens == NULL)
        return gm_agent_ctl_error(GM_ERR_CONFIG, "this node holds no CA key: create tokens on "
                                                 "a voter (gradmesh members lists them)");
    if (json_is_integer(json_object_get(req, "ttl")))
        ttl = json_integer_value(json_object_get(req, "ttl"));
    if (json_is_integer(json_object_get(req, "uses")))
        uses = json_integer_value(json_object_get(req, "uses"));
    if (ttl <= 0 || uses <= 0 || uses > 10000)
        return gm_agent_ctl_error(-EINVAL, "bad ttl or uses");
    err = gm_id_cert_pin(a->ca, pin);
    if (err == 0)
        err = gm_token_store_create(a->tokens, a->cfg.cluster, pin, (int64_t)ttl, (int)uses,
                                    (int64_t)time(NULL), tok, &info);
    if (err != 0)
        return gm_agent_ctl_error(err, gm_strerror(err));
    gm_keyring_changed(a); /* the other voters learn it at the next tick */
    gm_notice("event=token-created token=%s expires=%" PRId64 " uses=%d", info.id, info.expires,
              info.uses_total);
    r = json_pack("{s:s, s:s, s:I, s:i}", "token", tok, "id", info.id, "expires",
                  (json_int_t)info.expires, "uses", info.uses_total);
    sodium_memzero(tok, sizeof(tok));
    return r;
}

static json_t *token_list(struct gm_agent *a, json_t *req)
{
    json_t *arr = json_array();
    struct gm_token_info info;
    size_t i;

    (void)req;
    if (a->tokens == NULL)
        return gm_agent_ctl_error(GM_ERR_CONFIG, "this node holds no CA key: list tokens on "
                                                 "a voter (gradmesh members lists them)");
    for (i = 0; i < gm_token_store_count(a->tokens); i++) {
        uint64_t used;
        if (gm_token_store_get(a->tokens, i, &info) != 0)
            continue;
        used = uses_recorded(a, info.id); /* the replicated count is the authority */
        if (used >= (uint64_t)info.uses_total)
            info.uses_left = 0;
        else if ((uint64_t)info.uses_left > (uint64_t)info.uses_total - used)
            info.uses_left = (int)((uint64_t)info.uses_total - used);
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:i, s:i, s:b}", "id", info.id,
                                             "created", (json_int_t)info.created, "expires",
                                             (json_int_t)info.expires, "uses_left", info.uses_left,
                                             "uses", info.uses_total, "revoked", info.revoked));
    }
    return json_pack("{s:o}", "tokens", arr);
}

static json_t *token_revoke(struct gm_agent *a, json_t *req)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    int err = a->tokens == NULL ? GM_ERR_CONFIG
              : id == NULL      ? -EINVAL
                                : gm_token_store_revoke(a->tokens, id);

    if (err != 0)
        return gm_agent_ctl_error(err, err == -ENOENT ? "no such token" : gm_strerror(err));
    gm_keyring_changed(a);
    gm_notice("event=token-revoked token=%s", id);
    return json_pack("{s:b}", "ok", 1);
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_JOIN_REQUEST, GM_LSTATE_JOIN, h_join_request},
    {GM_MSG_RENEW_REQUEST, GM_LSTATE_UP, h_renew_request},
    {GM_MSG_RENEW_ACCEPT, GM_LSTATE_UP, h_renew_accept},
};

static const struct gm_room_command commands[] = {
    {"token-create", token_create},
    {"token-list", token_list},
    {"token-revoke", token_revoke},
};

/* The admitter is reachable again: ask for a renewal now, not at the next check. */
static void link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    (void)c;
    if (strcmp(p->node, a->admitter) == 0 && a->cakey == NULL && gm_id_cert_needs_renewal(a->cert))
        gm_admit_renew_check(a);
}

const struct gm_room gm_admit_room = {
    .name = "admit",
    .frames = frames,
    .nframes = GM_ARRAY_SIZE(frames),
    .commands = commands,
    .ncommands = GM_ARRAY_SIZE(commands),
    .link_up = link_up,
};
