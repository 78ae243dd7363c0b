/*
 * agent/cluster/joiner.c - see joiner.h.  The struct join owns the joiner TLS
 * context and lives until its link's on_close, where done runs and it is freed.
 */
#include "agent/cluster/joiner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "agent/net/link.h"
#include "common/log.h"
#include "crypto/join.h"
#include "crypto/tls.h"

struct join {
    struct gm_join_params p;
    struct gm_join_result *r;
    gm_join_done_fn done;
    void *arg;
    struct gm_tls_ctx *tls; /* owned */
    struct gm_msg_join_request rq;
    uint8_t binding[GM_JOIN_BINDING_LEN];
    int sent, answered;
};

static void set_err(struct join *j, int err, const char *why)
{
    if (j->answered)
        return;
    j->answered = 1;
    j->r->err = err;
    snprintf(j->r->reason, sizeof(j->r->reason), "%s", why);
}

static int on_up(struct gm_link *l)
{
    struct join *j = gm_link_data(l);
    uint8_t v[GM_TOKEN_VERIFIER_LEN];
    char ctx[512], *json = NULL;
    size_t clen, len = 0;
    int err;

    memcpy(j->rq.token_id, gm_token_id(j->p.token), GM_TOKEN_ID_LEN);
    snprintf(j->rq.node, sizeof(j->rq.node), "%s", j->p.node);
    snprintf(j->rq.listen, sizeof(j->rq.listen), "%s", j->p.listen);
    err = gm_id_key_public(j->p.key, j->rq.pubkey);
    if (err == 0)
        err = gm_tls_export(gm_link_tls(l), GM_JOIN_EXPORTER_LABEL, j->binding, sizeof(j->binding));
    if (err != 0)
        return err;
    clen = gm_proto_join_context(&j->rq, ctx, sizeof(ctx));
    gm_token_verifier(j->p.token, v);
    gm_join_proof(v, GM_JOIN_ROLE_JOINER, j->binding, ctx, clen, j->rq.proof);
    sodium_memzero(v, sizeof(v));
    if (j->p.replay_request != NULL) {
        err = gm_link_send(l, GM_MSG_JOIN_REQUEST, 1, j->p.replay_request,
                           strlen(j->p.replay_request));
    } else {
        err = gm_proto_join_request_encode(&j->rq, &json, &len);
        if (err == 0)
            err = gm_link_send(l, GM_MSG_JOIN_REQUEST, 1, json, len);
        if (err == 0 && j->p.capture_request != NULL) {
            *j->p.capture_request = json;
            json = NULL;
        }
    }
    free(json);
    j->sent = 1;
    return err;
}

static int check_accept(struct join *j, struct gm_link *l, const uint8_t *p, size_t len)
{
    struct gm_msg_join_accept ac;
    struct gm_cert *cert = NULL, *ca = NULL;
    uint8_t pin[GM_ID_PIN_LEN], v[GM_TOKEN_VERIFIER_LEN];
    char cluster[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1], ctx[512], *actx = NULL;
    size_t clen, alen;
    int err;

    (void)l;
    err = gm_proto_join_accept_decode(p, len, &ac);
    if (err != 0) {
        set_err(j, GM_ERR_PROTO, "malformed join answer");
        return err;
    }
    err = GM_ERR_AUTH;
    if (strcmp(ac.node, j->p.node) != 0) {
        set_err(j, err, "the answer is for another node");
        goto out;
    }
    if (gm_id_cert_from_pem(ac.ca_pem, strlen(ac.ca_pem), &ca) != 0 ||
        gm_id_cert_pin(ca, pin) != 0 ||
        sodium_memcmp(pin, gm_token_pin(j->p.token), GM_ID_PIN_LEN) != 0) {
        set_err(j, err, "the CA in the answer does not match the token's pin");
        goto out;
    }
    if (gm_id_cert_from_pem(ac.cert_pem, strlen(ac.cert_pem), &cert) != 0 ||
        gm_id_cert_check_issued(ca, cert) != 0 || gm_id_cert_identity(cert, cluster, node) != 0 ||
        strcmp(cluster, gm_token_cluster(j->p.token)) != 0 || strcmp(node, j->p.node) != 0 ||
        !gm_id_cert_matches_key(cert, j->p.key)) {
        set_err(j, err, "the issued certificate is not for this node and key");
        goto out;
    }
    clen = gm_proto_join_context(&j->rq, ctx, sizeof(ctx));
    alen = gm_join_accept_context(ctx, clen, ac.cert_pem, ac.beacon_key, &actx);
    if (actx == NULL) {
        err = -ENOMEM;
        set_err(j, err, "out of memory");
        goto out;
    }
    gm_token_verifier(j->p.token, v);
    err = gm_join_proof_check(v, GM_JOIN_ROLE_ADMITTER, j->binding, actx, alen, ac.proof);
    sodium_memzero(v, sizeof(v));
    if (err != 0) {
        set_err(j, err, "the admitter's proof does not verify: it does not know this token");
        goto out;
    }
    set_err(j, 0, "joined");
    j->r->cert = cert;
    j->r->ca = ca;
    j->r->members = ac.members;
    j->r->n_members = ac.n_members;
    memcpy(j->r->beacon_key, ac.beacon_key, sizeof(j->r->beacon_key));
    cert = NULL;
    ca = NULL;
    ac.members = NULL;
out:
    free(actx);
    gm_id_cert_free(cert);
    gm_id_cert_free(ca);
    gm_proto_join_accept_free(&ac);
    return err;
}

/* Ends the join with err: the reason for the CLI, and ERROR {err, why} to the admitter.
 * Returns 0: the link is closing (a non-zero return from on_frame would make the link report
 * its own, unrelated reason to the admitter). */
static int fail(struct join *j, struct gm_link *l, int err, const char *why)
{
    set_err(j, err, why);
    gm_link_fail(l, err, why);
    return 0;
}

static int on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct join *j = gm_link_data(l);
    char msg[200], why[256];
    int code = 0;

    if (!j->sent || j->answered) {
        snprintf(why, sizeof(why), "unexpected message %s from the admitter",
                 gm_proto_type_name(h->type));
        return fail(j, l, GM_ERR_PROTO, why);
    }
    if (h->type == GM_MSG_PING) {
        /* The admitter's link keepalive (every link pings at its first tick, then every 5 s)
         * while the join waits for its token use to commit through the chief: answered, so
         * its idle timeout sees a live joiner however long the commit takes. */
        gm_link_pong(l, payload, h->len);
        return 0;
    }
    if (h->type == GM_MSG_ERROR) {
        if (gm_proto_error_decode(payload, h->len, &code, msg, sizeof(msg)) != 0)
            return fail(j, l, GM_ERR_PROTO, "malformed error from the admitter");
        snprintf(why, sizeof(why), "admitter: %s", msg);
        set_err(j, code, why);
        gm_link_close(l, code);
        return 0;
    }
    if (h->type != GM_MSG_JOIN_ACCEPT) {
        snprintf(why, sizeof(why), "unexpected message %s from the admitter",
                 gm_proto_type_name(h->type));
        return fail(j, l, GM_ERR_PROTO, why);
    }
    code = check_accept(j, l, payload, h->len);
    if (code != 0) {
        gm_link_fail(l, code, j->r->reason); /* check_accept said why */
        return 0;
    }
    gm_link_close(l, 0);
    return 0;
}

static void on_close(struct gm_link *l, int err)
{
    struct join *j = gm_link_data(l);
    char why[300];

    if (!j->answered) {
        snprintf(why, sizeof(why), "%s (%s)", gm_strerror(err ? err : GM_ERR_PROTO),
                 gm_tls_reason(gm_link_tls(l)));
        set_err(j, err ? err : GM_ERR_PROTO, why);
    }
    j->done(j->arg, j->r);
    gm_tls_ctx_free(j->tls);
    sodium_memzero(j, sizeof(*j));
    free(j);
}

static const struct gm_link_ops join_ops = {
    .on_up = on_up,
    .on_frame = on_frame,
    .on_close = on_close,
};

int gm_join_start(uv_loop_t *loop, const struct gm_join_params *p, struct gm_join_result *r,
                  gm_join_done_fn done, void *arg)
{
    struct gm_tls_config tc = {0};
    struct gm_link_opts o = {.role = GM_TLS_ROLE_JOINER};
    struct gm_link *l = NULL;
    struct join *j;
    int err;

    memset(r, 0, sizeof(*r));
    if (!gm_id_name_valid(p->node))
        return -EINVAL;
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->p = *p;
    j->r = r;
    j->done = done;
    j->arg = arg;
    tc.cluster = gm_token_cluster(p->token);
    tc.pin = gm_token_pin(p->token);
    err = gm_tls_ctx_new(&tc, &j->tls);
    if (err == 0)
        err = gm_link_new(loop, j->tls, &o, &join_ops, j, &l);
    if (err == 0) {
        err = gm_link_connect(l, p->peer);
        if (err != 0)
            gm_link_free_unstarted(l);
    }
    if (err != 0) {
        gm_tls_ctx_free(j->tls);
        free(j);
    }
    return err;
}

static void run_done(void *arg, struct gm_join_result *r)
{
    (void)r;
    *(int *)arg = 1;
}

int gm_join_run(const struct gm_join_params *p, struct gm_join_result *r)
{
    uv_loop_t loop;
    int done = 0, err;

    err = uv_loop_init(&loop);
    if (err != 0)
        return err;
    err = gm_join_start(&loop, p, r, run_done, &done);
    if (err == 0) {
        while (uv_run(&loop, UV_RUN_DEFAULT) != 0)
            ;
        err = done ? r->err : GM_ERR_ABORTED;
    }
    if (uv_loop_close(&loop) != 0)
        gm_warn("event=loop-close-busy where=join");
    return err;
}

void gm_join_result_free(struct gm_join_result *r)
{
    if (r == NULL)
        return;
    gm_id_cert_free(r->cert);
    gm_id_cert_free(r->ca);
    free(r->members);
    sodium_memzero(r, sizeof(*r));
}
