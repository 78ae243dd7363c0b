/*
 * agent/cluster/keyring.c - see keyring.h.
 *
 * Secrets: the PEM text and the token lines are wiped on every path out of
 * send_keyring and h_keyring; the key itself lives in a struct gm_key
 * (OpenSSL frees its private half securely).
 */
#include "agent/cluster/keyring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/cluster/chief.h"
#include "agent/net/link.h"
#include "agent/core/state.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "crypto/identity.h"
#include "crypto/tls.h"
#include "crypto/token.h"

#define KEYRING_VERSION 1

/* --- the payload ------------------------------------------------------------------- */

static int dup_field(json_t *o, const char *key, char **out, size_t *len)
{
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);

    if (s == NULL || strlen(s) != json_string_length(v))
        return GM_ERR_PROTO;
    *len = json_string_length(v);
    *out = malloc(*len + 1);
    if (*out == NULL)
        return -ENOMEM;
    memcpy(*out, s, *len + 1);
    return 0;
}

/* Wipes a jansson string's bytes before the object is freed. */
static void wipe_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (json_is_string(v))
        sodium_memzero((char *)json_string_value(v), json_string_length(v));
}

int gm_keyring_decode(const uint8_t *p, size_t len, char **pem, size_t *pem_len, char **tokens,
                      size_t *tokens_len)
{
    json_error_t e;
    json_t *o = NULL, *v;
    int err = GM_ERR_PROTO;

    *pem = *tokens = NULL;
    *pem_len = *tokens_len = 0;
    if (len > GM_KEYRING_MAX)
        return GM_ERR_PROTO;
    o = json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(o) || json_object_size(o) != 3)
        goto out;
    v = json_object_get(o, "v");
    if (!json_is_integer(v) || json_integer_value(v) != KEYRING_VERSION)
        goto out;
    err = dup_field(o, "ca_key", pem, pem_len);
    if (err == 0)
        err = dup_field(o, "tokens", tokens, tokens_len);
out:
    if (o != NULL) {
        wipe_field(o, "ca_key");
        wipe_field(o, "tokens");
    }
    json_decref(o);
    if (err != 0) {
        if (*pem != NULL)
            sodium_memzero(*pem, *pem_len);
        if (*tokens != NULL)
            sodium_memzero(*tokens, *tokens_len);
        free(*pem);
        free(*tokens);
        *pem = *tokens = NULL;
        *pem_len = *tokens_len = 0;
    }
    return err;
}

int gm_keyring_encode(const char *pem, const char *tokens, char **out, size_t *len)
{
    json_t *o = json_pack("{s:i, s:s, s:s}", "v", KEYRING_VERSION, "ca_key", pem, "tokens", tokens);

    *out = NULL;
    *len = 0;
    if (o == NULL)
        return -ENOMEM;
    *out = json_dumps(o, JSON_COMPACT);
    wipe_field(o, "ca_key");
    wipe_field(o, "tokens");
    json_decref(o);
    if (*out == NULL)
        return -ENOMEM;
    *len = strlen(*out);
    return 0;
}

/* --- holding and dropping ------------------------------------------------------------ */

void gm_keyring_changed(struct gm_agent *a)
{
    a->keyring_gen++;
}

/* Whether node may hold the key by the replicated state: a recorded voter, not revoked.
 * A node the state does not record yet (the init node before its first entry) may. */
static int may_hold(struct gm_agent *a, const char *node)
{
    const struct gm_chief_fsm *f = gm_chief_state(a);
    const struct gm_chief_member *m = f != NULL ? gm_chief_fsm_member(f, node) : NULL;

    if (f != NULL && gm_chief_fsm_is_revoked(f, node))
        return 0;
    return m == NULL || m->role == GM_CHIEF_ROLE_VOTER;
}

/* A peer the key goes to: recorded (not just unknown) as a voter. */
static int is_recorded_voter(struct gm_agent *a, const char *node)
{
    const struct gm_chief_fsm *f = gm_chief_state(a);
    const struct gm_chief_member *m = f != NULL ? gm_chief_fsm_member(f, node) : NULL;

    return m != NULL && m->role == GM_CHIEF_ROLE_VOTER && !gm_chief_fsm_is_revoked(f, node);
}

static void remove_state_file(struct gm_agent *a, const char *name)
{
    char path[GM_PATH_MAX];

    if (gm_config_state_path(&a->cfg, name, path, sizeof(path)) == 0 && unlink(path) != 0 &&
        errno != ENOENT)
        gm_err("event=ca-key-delete-failed file=%s err=%d msg=\"%s\"", path, -errno,
               gm_strerror(-errno));
}

static void drop(struct gm_agent *a, const char *why)
{
    gm_tls_ctx_set_accept_joins(a->tls, 0);
    remove_state_file(a, "ca.key");
    remove_state_file(a, "tokens");
    gm_id_key_free(a->cakey);
    a->cakey = NULL;
    gm_token_store_free(a->tokens);
    a->tokens = NULL;
    a->admitter[0] = '\0'; /* renewals go to the chief from now on (admit.h) */
    gm_warn("event=ca-key-dropped node=%s reason=\"%s\"", a->cfg.node, why);
}

/* Sends the key and this node's token records on l. */
static int send_keyring(struct gm_agent *a, struct gm_link *l)
{
    char *pem = NULL, *tok = NULL, *json = NULL;
    size_t pem_len = 0, tok_len = 0, len = 0;
    int err = gm_id_key_to_pem(a->cakey, &pem, &pem_len);

    if (err == 0)
        err = gm_token_store_export(a->tokens, &tok, &tok_len);
    if (err == 0)
        err = gm_keyring_encode(pem, tok, &json, &len);
    if (err == 0)
        err = gm_link_send(l, GM_MSG_KEYRING, 0, json, len);
    if (pem != NULL)
        sodium_memzero(pem, pem_len);
    if (tok != NULL)
        sodium_memzero(tok, tok_len);
    if (json != NULL)
        sodium_memzero(json, len);
    free(pem);
    free(tok);
    free(json);
    return err;
}

/* --- the hand-over's decisions (pure: tests/unit/test_keyring.c) -------------------- */

int gm_keyring_push_due(int peer_voter, uint64_t gen, uint64_t *sent)
{
    if (!peer_voter) {
        *sent = 0; /* made a voter (again) later: it gets the key then */
        return 0;
    }
    if (*sent == gen)
        return 0;
    *sent = gen;
    return 1;
}

int gm_keyring_ask_due(int holds, int self_voter, uint64_t now_ns, uint64_t *asked_ns)
{
    if (holds || !self_voter)
        return 0;
    if (*asked_ns != 0 && now_ns - *asked_ns < (uint64_t)GM_KEYRING_ASK_MS * 1000000ull)
        return 0;
    *asked_ns = now_ns;
    return 1;
}

int gm_keyring_answer_due(int holds, int peer_voter, uint64_t now_ns, uint64_t *answered_ns)
{
    if (!holds || !peer_voter)
        return 0;
    if (*answered_ns != 0 && now_ns - *answered_ns < (uint64_t)GM_KEYRING_ASK_MS * 1000000ull)
        return 0;
    *answered_ns = now_ns;
    return 1;
}

/* --- the tick -------------------------------------------------------------------------- */

static int link_usable(const struct gm_lctx *c)
{
    return c->node[0] != '\0' && gm_link_state(c->link) == GM_LSTATE_UP &&
           !gm_link_is_closing(c->link);
}

/* This node lacks the key while the state records it as a voter: it asks every voter it has
 * an up link to (KEYRING_REQ), at most once per GM_KEYRING_ASK_MS, until one answers. */
static void ask(struct gm_agent *a)
{
    int n = 0;

    if (!gm_keyring_ask_due(a->cakey != NULL, is_recorded_voter(a, a->cfg.node), gm_time_mono_ns(),
                            &a->keyring_asked_ns))
        return;
    for (struct gm_lctx *c = a->links; c != NULL; c = c->next) {
        if (!link_usable(c) || !is_recorded_voter(a, c->node))
            continue;
        if (gm_link_send(c->link, GM_MSG_KEYRING_REQ, 0, NULL, 0) == 0)
            n++;
    }
    if (n == 0)
        return;
    /* logged at the first ask, then once a minute or so while no voter answers */
    if (a->keyring_asks++ == 0)
        gm_info("event=ca-key-asked voters=%d reason=\"this node is a voter without the key\"", n);
    else if (a->keyring_asks % 60 == 0)
        gm_warn("event=ca-key-missing asks=%llu voters=%d reason=\"no voter answered with the "
                "CA key: this voter cannot admit\"",
                (unsigned long long)a->keyring_asks, n);
}

void gm_keyring_tick(struct gm_agent *a)
{
    const struct gm_chief_fsm *f = gm_chief_state(a);

    if (f == NULL)
        return;
    if (a->cakey == NULL) {
        ask(a);
        return;
    }
    if (gm_chief_fsm_is_revoked(f, a->cfg.node)) {
        drop(a, "this node is revoked");
        return;
    }
    if (!may_hold(a, a->cfg.node)) {
        char why[64];
        snprintf(why, sizeof(why), "this node's role is now %s: only voters hold the CA key",
                 gm_chief_role_name(gm_chief_fsm_member(f, a->cfg.node)->role));
        drop(a, why);
        return;
    }
    if (a->keyring_gen == 0)
        a->keyring_gen = 1;
    for (struct gm_lctx *c = a->links; c != NULL; c = c->next) {
        if (!link_usable(c) ||
            !gm_keyring_push_due(is_recorded_voter(a, c->node), a->keyring_gen, &c->keyring_sent))
            continue;
        if (send_keyring(a, c->link) != 0)
            gm_warn("event=ca-key-send-failed to=%s", c->node);
        else
            gm_debug("event=ca-key-sent to=%s generation=%llu", c->node,
                     (unsigned long long)a->keyring_gen);
    }
}

/* The first key this node receives: saved 0600, then joins are admitted here. */
static int take_key(struct gm_agent *a, struct gm_key *key, const char *from)
{
    char path[GM_PATH_MAX];
    struct gm_token_store *ts = NULL;
    int err = gm_config_state_path(&a->cfg, "tokens", path, sizeof(path));

    if (err == 0) {
        remove_state_file(a, "tokens"); /* records of an earlier stint as a voter are stale */
        err = gm_token_store_open(path, &ts);
    }
    if (err == 0)
        err = gm_config_state_path(&a->cfg, "ca.key", path, sizeof(path));
    if (err == 0)
        err = gm_id_key_save(key, path);
    if (err != 0) {
        gm_err("event=ca-key-save-failed file=%s err=%d msg=\"%s\"", path, err, gm_strerror(err));
        gm_token_store_free(ts);
        return err;
    }
    a->cakey = key;
    a->tokens = ts;
    a->keyring_asks = 0;
    snprintf(a->admitter, sizeof(a->admitter), "%s", a->cfg.node);
    gm_tls_ctx_set_accept_joins(a->tls, 1);
    gm_notice("event=ca-key-received from=%s file=%s", from, path);
    return 0;
}

static int h_keyring(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                     const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_key *key = NULL;
    char *pem = NULL, *tok = NULL;
    size_t pem_len = 0, tok_len = 0;
    int err, changed = 0, merged = 0;

    err = gm_keyring_decode(p, h->len, &pem, &pem_len, &tok, &tok_len);
    if (err != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed keyring");
    err = gm_id_key_from_pem(pem, pem_len, &key);
    if (err != 0 || !gm_id_cert_matches_key(a->ca, key)) {
        err = GM_ERR_AUTH;
        gm_warn("event=ca-key-refused from=%s reason=\"not the key of this cluster's CA\"",
                c->node);
        goto out;
    }
    if (!may_hold(a, a->cfg.node)) {
        gm_info("event=ca-key-declined from=%s reason=\"this node is no voter\"", c->node);
        goto out;
    }
    if (a->cakey == NULL) {
        err = take_key(a, key, c->node);
        if (err != 0)
            goto out;
        key = NULL;
        changed = 1;
    }
    err = gm_token_store_merge(a->tokens, tok, tok_len, &merged);
    if (err != 0)
        gm_warn("event=token-merge-failed from=%s err=%d msg=\"%s\"", c->node, err,
                gm_strerror(err));
    err = 0;
    if (changed || merged)
        gm_keyring_changed(a); /* pass what was learnt on */
out:
    gm_id_key_free(key);
    sodium_memzero(pem, pem_len);
    sodium_memzero(tok, tok_len);
    free(pem);
    free(tok);
    return err == GM_ERR_AUTH ? gm_agent_refuse(l, err, "keyring holds a foreign CA key") : 0;
}

/* A voter that lacks the key asks for it (see ask()): answered with KEYRING when this node
 * holds the key and its state records the asker as a voter, else ignored (the asker asks
 * again: a state that lags the asker's catches up). */
static int h_keyring_req(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                         const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);

    (void)p;
    if (h->len != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed keyring request");
    if (!gm_keyring_answer_due(a->cakey != NULL, is_recorded_voter(a, c->node), gm_time_mono_ns(),
                               &c->keyring_answered_ns)) {
        gm_debug("event=ca-key-request-ignored from=%s holds=%d", c->node, a->cakey != NULL);
        return 0;
    }
    if (send_keyring(a, l) != 0) {
        gm_warn("event=ca-key-send-failed to=%s", c->node);
        return 0;
    }
    c->keyring_sent = a->keyring_gen; /* the push has nothing newer for it */
    gm_info("event=ca-key-sent to=%s reason=asked", c->node);
    return 0;
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_KEYRING, GM_LSTATE_UP, h_keyring},
    {GM_MSG_KEYRING_REQ, GM_LSTATE_UP, h_keyring_req},
};

const struct gm_room gm_keyring_room = {
    .name = "keyring",
    .frames = frames,
    .nframes = GM_ARRAY_SIZE(frames),
};
