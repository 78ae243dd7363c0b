/* tests/unit/test_crypto.c - identities, tokens, join proofs and the TLS engine in memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "common/err.h"
#include "common/test.h"
#include "tests/unit/world.h"
#include "crypto/identity.h"
#include "crypto/join.h"
#include "crypto/record.h"
#include "crypto/tls.h"
#include "crypto/token.h"

GM_TEST_DEFINE_STATE;

static char tmpdir[256];

static int move(struct gm_tls *from, struct gm_tls *to)
{
    uint8_t buf[65536];
    size_t n;
    int moved = 0, err;

    while ((n = gm_tls_out_take(from, buf, sizeof(buf))) > 0) {
        err = gm_tls_feed(to, buf, n);
        if (err != 0)
            return err;
        moved = 1;
    }
    return moved;
}

/* Runs both handshakes to the end; then lets each side read once (TLS 1.3
 * servers judge the client certificate after the client thinks it is done). */
static void pump(struct gm_tls *c, struct gm_tls *s, int *ec, int *es)
{
    uint8_t buf[256];
    size_t n;
    int i;

    *ec = -EAGAIN;
    *es = -EAGAIN;
    for (i = 0; i < 20; i++) {
        if (*ec == -EAGAIN)
            *ec = gm_tls_handshake(c);
        (void)move(c, s);
        if (*es == -EAGAIN)
            *es = gm_tls_handshake(s);
        (void)move(s, c);
        if (*ec != -EAGAIN && *es != -EAGAIN)
            break;
    }
    if (*ec == 0) {
        int r = gm_tls_read(c, buf, sizeof(buf), &n);
        if (r != -EAGAIN)
            *ec = r;
        (void)move(c, s);
    }
    if (*es == 0) {
        int r = gm_tls_read(s, buf, sizeof(buf), &n);
        if (r != -EAGAIN)
            *es = r;
        (void)move(s, c);
    }
    if (*ec == 0) {
        int r = gm_tls_read(c, buf, sizeof(buf), &n);
        if (r != -EAGAIN)
            *ec = r;
    }
}

static struct gm_tls_ctx *ctx_rec(const struct world *w, const char *cluster, int joins,
                                  int openssl_records)
{
    struct gm_tls_config cfg = {.cluster = cluster,
                                .ca = w->ca,
                                .cert = w->cert,
                                .key = w->key,
                                .accept_joins = joins,
                                .openssl_records = openssl_records};
    struct gm_tls_ctx *c = NULL;

    GM_CHECK_OK(gm_tls_ctx_new(&cfg, &c));
    return c;
}

static struct gm_tls_ctx *ctx_of(const struct world *w, const char *cluster, int joins)
{
    struct gm_tls_config cfg = {
        .cluster = cluster, .ca = w->ca, .cert = w->cert, .key = w->key, .accept_joins = joins};
    struct gm_tls_ctx *c = NULL;

    GM_CHECK_OK(gm_tls_ctx_new(&cfg, &c));
    return c;
}

static void test_names_and_certs(void)
{
    struct world w;
    char cluster[64], node[64], serial[41];
    uint8_t pin1[32], pin2[32];
    char *pem = NULL;
    struct gm_cert *back = NULL;
    int64_t left = 0;

    GM_CHECK(gm_id_name_valid("lab"));
    GM_CHECK(gm_id_name_valid("node-1.a_b"));
    GM_CHECK(!gm_id_name_valid(""));
    GM_CHECK(!gm_id_name_valid("-x"));
    GM_CHECK(!gm_id_name_valid("Lab"));
    GM_CHECK(!gm_id_name_valid("a/b"));
    GM_CHECK(!gm_id_name_valid("0123456789012345678901234567890123456789012345678901234567890123"));
    world_make(&w, "lab", "n1");
    GM_CHECK_OK(gm_id_cert_identity(w.cert, cluster, node));
    GM_CHECK_STREQ(cluster, "lab");
    GM_CHECK_STREQ(node, "n1");
    GM_CHECK_OK(gm_id_cert_identity(w.ca, cluster, node));
    GM_CHECK_STREQ(cluster, "lab");
    GM_CHECK_STREQ(node, "");
    GM_CHECK_OK(gm_id_cert_pin(w.ca, pin1));
    GM_CHECK_OK(gm_id_cert_to_pem(w.ca, &pem));
    GM_CHECK_OK(gm_id_cert_from_pem(pem, strlen(pem), &back));
    GM_CHECK_OK(gm_id_cert_pin(back, pin2));
    GM_CHECK(memcmp(pin1, pin2, 32) == 0);
    gm_id_cert_free(back);
    GM_CHECK_ERR(gm_id_cert_from_pem("garbage", 7, &back), GM_ERR_FORMAT);
    GM_CHECK(back == NULL);
    GM_CHECK_OK(gm_id_cert_serial(w.cert, serial));
    GM_CHECK(strlen(serial) >= 16);
    GM_CHECK_OK(gm_id_cert_seconds_left(w.cert, &left));
    GM_CHECK(left > 9 * 86400 && left <= 10 * 86400);
    GM_CHECK(gm_id_cert_needs_renewal(w.cert)); /* 10 days < 30 days margin */
    GM_CHECK(gm_id_cert_matches_key(w.cert, w.key));
    GM_CHECK(!gm_id_cert_matches_key(w.cert, w.cakey));
    GM_CHECK_ERR(gm_id_cert_issue(w.ca, w.cakey, "lab", "BAD", pin1, 1, &back), -EINVAL);
    free(pem);
    world_free(&w);
}

static void test_key_files(void)
{
    char path[512];
    struct gm_key *k = NULL, *k2 = NULL;
    uint8_t p1[32], p2[32];
    struct stat st;

    snprintf(path, sizeof(path), "%s/node.key", tmpdir);
    GM_CHECK_OK(gm_id_key_generate(&k));
    GM_CHECK_OK(gm_id_key_save(k, path));
    GM_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    GM_CHECK_OK(gm_id_key_load(path, &k2));
    GM_CHECK_OK(gm_id_key_public(k, p1));
    GM_CHECK_OK(gm_id_key_public(k2, p2));
    GM_CHECK(memcmp(p1, p2, 32) == 0);
    gm_id_key_free(k2);
    k2 = NULL;
    GM_CHECK(chmod(path, 0644) == 0);
    GM_CHECK_ERR(gm_id_key_load(path, &k2), -EPERM);
    GM_CHECK(k2 == NULL);
    { /* PEM in memory: the CA key's handover to a voter */
        struct gm_cert *cert = NULL;
        char *pem = NULL;
        size_t len = 0;
        GM_CHECK_OK(gm_id_key_to_pem(k, &pem, &len));
        GM_CHECK(len == strlen(pem) && strstr(pem, "PRIVATE KEY") != NULL);
        GM_CHECK_OK(gm_id_key_from_pem(pem, len, &k2));
        GM_CHECK_OK(gm_id_key_public(k2, p2));
        GM_CHECK(memcmp(p1, p2, 32) == 0);
        GM_CHECK_OK(gm_id_ca_create("lab", k, 1, &cert));
        GM_CHECK(gm_id_cert_matches_key(cert, k2)); /* the receiver's check */
        gm_id_key_free(k2);
        k2 = NULL;
        GM_CHECK_ERR(gm_id_key_from_pem(pem, len / 2, &k2), GM_ERR_FORMAT);
        GM_CHECK(k2 == NULL);
        GM_CHECK_ERR(gm_id_key_from_pem("junk", 4, &k2), GM_ERR_FORMAT);
        GM_CHECK_OK(gm_id_key_generate(&k2));
        GM_CHECK(!gm_id_cert_matches_key(cert, k2)); /* a foreign key */
        gm_id_key_free(k2);
        gm_id_cert_free(cert);
        free(pem);
    }
    gm_id_key_free(k);
    gm_id_key_free(NULL);
}

static void test_token_codec(void)
{
    uint8_t pin[32], id[8], secret[16], v1[32], v2[32];
    char s[GM_TOKEN_STR_MAX], bad[GM_TOKEN_STR_MAX], hex[17];
    struct gm_token *t = NULL;
    size_t len;

    randombytes_buf(pin, sizeof(pin));
    randombytes_buf(id, sizeof(id));
    randombytes_buf(secret, sizeof(secret));
    GM_CHECK_OK(gm_token_encode("lab", pin, id, secret, s));
    GM_CHECK(strncmp(s, GM_TOKEN_PREFIX, strlen(GM_TOKEN_PREFIX)) == 0);
    len = strlen(s);
    GM_CHECK_OK(gm_token_parse(s, len, &t));
    if (t != NULL) {
        GM_CHECK_STREQ(gm_token_cluster(t), "lab");
        GM_CHECK(memcmp(gm_token_pin(t), pin, 32) == 0);
        GM_CHECK(memcmp(gm_token_id(t), id, 8) == 0);
        gm_token_verifier(t, v1);
    }
    gm_token_free(t);
    /* whitespace around is fine */
    snprintf(bad, sizeof(bad), "  %s\n", s);
    GM_CHECK_OK(gm_token_parse(bad, strlen(bad), &t));
    gm_token_verifier(t, v2);
    GM_CHECK(memcmp(v1, v2, 32) == 0);
    gm_token_free(t);
    /* a typo anywhere is caught by the check bytes */
    for (size_t i = strlen(GM_TOKEN_PREFIX); i < len; i++) {
        memcpy(bad, s, len + 1);
        bad[i] = bad[i] == 'A' ? 'B' : 'A';
        GM_CHECK_ERR(gm_token_parse(bad, len, &t), GM_ERR_TOKEN);
        GM_CHECK(t == NULL);
    }
    GM_CHECK_ERR(gm_token_parse(s, len - 1, &t), GM_ERR_TOKEN);
    GM_CHECK_ERR(gm_token_parse("gmtoken1_", 9, &t), GM_ERR_TOKEN);
    GM_CHECK_ERR(gm_token_parse("", 0, &t), GM_ERR_TOKEN);
    GM_CHECK_ERR(gm_token_parse(s + 1, len - 1, &t), GM_ERR_TOKEN);
    gm_token_id_hex(id, hex);
    GM_CHECK_EQ(strlen(hex), 16);
}

static void test_token_store(void)
{
    char path[512], s[GM_TOKEN_STR_MAX];
    struct gm_token_store *st = NULL, *st2 = NULL;
    struct gm_token_info info, info2;
    struct gm_token *t = NULL;
    uint8_t pin[32] = {1}, v[32], vt[32];
    const char *why = NULL;
    char *text = NULL;
    size_t len = 0;
    struct stat sb;

    snprintf(path, sizeof(path), "%s/tokens", tmpdir);
    GM_CHECK_OK(gm_token_store_open(path, &st));
    GM_CHECK_EQ(gm_token_store_count(st), 0);
    GM_CHECK_OK(gm_token_store_create(st, "lab", pin, 3600, 1, 1000, s, &info));
    GM_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    GM_CHECK_OK(gm_token_parse(s, strlen(s), &t));
    gm_token_verifier(t, vt);
    /* the store file holds neither the token nor its secret */
    GM_CHECK_OK(gm_id_read_file(path, 1 << 20, &text, &len));
    GM_CHECK(strstr(text, s + strlen(GM_TOKEN_PREFIX)) == NULL);
    GM_CHECK(strstr(text, info.id) != NULL);
    free(text);
    GM_CHECK_OK(gm_token_store_check(st, gm_token_id(t), 1001, v, &why));
    GM_CHECK(memcmp(v, vt, 32) == 0);
    GM_CHECK_ERR(gm_token_store_check(st, gm_token_id(t), 1000 + 3600, v, &why), GM_ERR_TOKEN);
    GM_CHECK_STREQ(why, "expired");
    GM_CHECK_OK(gm_token_store_use(st, gm_token_id(t)));
    GM_CHECK_ERR(gm_token_store_check(st, gm_token_id(t), 1001, v, &why), GM_ERR_TOKEN);
    GM_CHECK_STREQ(why, "already used");
    GM_CHECK_ERR(gm_token_store_use(st, gm_token_id(t)), GM_ERR_TOKEN);
    gm_token_free(t);
    /* reload: uses persisted */
    GM_CHECK_OK(gm_token_store_open(path, &st2));
    GM_CHECK_EQ(gm_token_store_count(st2), 1);
    GM_CHECK_OK(gm_token_store_get(st2, 0, &info2));
    GM_CHECK_STREQ(info2.id, info.id);
    GM_CHECK_EQ(info2.uses_left, 0);
    gm_token_store_free(st2);
    /* revoke, multi-use, rate limit */
    GM_CHECK_OK(gm_token_store_create(st, "lab", pin, 3600, 3, 1000, s, &info));
    GM_CHECK_OK(gm_token_parse(s, strlen(s), &t));
    GM_CHECK_OK(gm_token_store_use(st, gm_token_id(t)));
    GM_CHECK_OK(gm_token_store_check(st, gm_token_id(t), 1001, v, &why));
    for (int i = 0; i < GM_TOKEN_MAX_FAILS; i++)
        gm_token_store_fail(st, gm_token_id(t), 1002);
    GM_CHECK_ERR(gm_token_store_check(st, gm_token_id(t), 1003, v, &why), -EBUSY);
    GM_CHECK_OK(gm_token_store_check(st, gm_token_id(t), 1002 + GM_TOKEN_FAIL_WINDOW_S, v, &why));
    GM_CHECK_OK(gm_token_store_revoke(st, info.id));
    GM_CHECK_ERR(gm_token_store_check(st, gm_token_id(t), 1002 + GM_TOKEN_FAIL_WINDOW_S, v, &why),
                 GM_ERR_TOKEN);
    GM_CHECK_STREQ(why, "revoked");
    GM_CHECK_ERR(gm_token_store_revoke(st, "00"), -ENOENT);
    gm_token_free(t);
    /* unknown id */
    memset(vt, 7, 8);
    GM_CHECK_ERR(gm_token_store_check(st, vt, 1001, v, &why), GM_ERR_TOKEN);
    GM_CHECK_STREQ(why, "unknown token");
    GM_CHECK_ERR(gm_token_store_create(st, "lab", pin, 0, 1, 1000, s, &info), -EINVAL);
    gm_token_store_free(st);
    /* a corrupt store is refused */
    GM_CHECK_OK(gm_id_write_file(path, "v1 zz\n", 6, 0600));
    GM_CHECK_ERR(gm_token_store_open(path, &st), GM_ERR_FORMAT);
}

/* Two voters' stores: export and merge (the KEYRING's token records). */
static void test_token_merge(void)
{
    char pa[512], pb[512], s[GM_TOKEN_STR_MAX], bad[300], *text = NULL;
    struct gm_token_store *a = NULL, *b = NULL;
    struct gm_token_info ia, ib, info;
    struct gm_token *t = NULL;
    uint8_t pin[32] = {1}, v[32], vt[32], unknown[8] = {9, 9};
    const char *why = NULL;
    size_t len = 0;
    int changed = -1;

    snprintf(pa, sizeof(pa), "%s/tokens-a", tmpdir);
    snprintf(pb, sizeof(pb), "%s/tokens-b", tmpdir);
    GM_CHECK_OK(gm_token_store_open(pa, &a));
    GM_CHECK_OK(gm_token_store_open(pb, &b));
    GM_CHECK_OK(gm_token_store_create(a, "lab", pin, 3600, 2, 1000, s, &ia));
    GM_CHECK_OK(gm_token_parse(s, strlen(s), &t));
    gm_token_verifier(t, vt);
    GM_CHECK_OK(gm_token_store_create(b, "lab", pin, 3600, 1, 1000, s, &ib));
    /* a's token reaches b, verifier included: b admits with it */
    GM_CHECK_OK(gm_token_store_export(a, &text, &len));
    GM_CHECK(len == strlen(text) && strstr(text, ia.id) != NULL);
    GM_CHECK_OK(gm_token_store_merge(b, text, len, &changed));
    GM_CHECK_EQ(changed, 1);
    GM_CHECK_EQ(gm_token_store_count(b), 2);
    GM_CHECK_OK(gm_token_store_check(b, gm_token_id(t), 1001, v, &why));
    GM_CHECK(memcmp(v, vt, 32) == 0);
    GM_CHECK_OK(gm_token_store_info(b, gm_token_id(t), &info));
    GM_CHECK_STREQ(info.id, ia.id);
    GM_CHECK_EQ(info.uses_total, 2);
    GM_CHECK_EQ(info.uses_left, 2);
    GM_CHECK_ERR(gm_token_store_info(b, unknown, &info), -ENOENT);
    /* the same text again: nothing new */
    GM_CHECK_OK(gm_token_store_merge(b, text, len, &changed));
    GM_CHECK_EQ(changed, 0);
    free(text);
    /* a use on a: b keeps the fewer uses left */
    GM_CHECK_OK(gm_token_store_use(a, gm_token_id(t)));
    GM_CHECK_OK(gm_token_store_export(a, &text, &len));
    GM_CHECK_OK(gm_token_store_merge(b, text, len, &changed));
    GM_CHECK_EQ(changed, 1);
    GM_CHECK_OK(gm_token_store_info(b, gm_token_id(t), &info));
    GM_CHECK_EQ(info.uses_left, 1);
    free(text);
    /* revoked on b: a learns it, and b's own token */
    GM_CHECK_OK(gm_token_store_revoke(b, ia.id));
    GM_CHECK_OK(gm_token_store_export(b, &text, &len));
    GM_CHECK_OK(gm_token_store_merge(a, text, len, &changed));
    GM_CHECK_EQ(changed, 1);
    GM_CHECK_EQ(gm_token_store_count(a), 2);
    GM_CHECK_ERR(gm_token_store_check(a, gm_token_id(t), 1001, v, &why), GM_ERR_TOKEN);
    GM_CHECK_STREQ(why, "revoked");
    /* a bad line anywhere: nothing changes */
    snprintf(bad, sizeof(bad), "%.*sv1 zz\n", (int)strcspn(text, "\n") + 1, text);
    free(text);
    gm_token_store_free(b);
    b = NULL;
    GM_CHECK_OK(gm_token_store_open(pb, &b)); /* merges were saved */
    GM_CHECK_EQ(gm_token_store_count(b), 2);
    gm_token_store_free(b);
    b = NULL;
    GM_CHECK_ERR(gm_token_store_merge(a, bad, strlen(bad), &changed), GM_ERR_FORMAT);
    GM_CHECK_EQ(changed, 0);
    GM_CHECK_EQ(gm_token_store_count(a), 2);
    snprintf(bad, sizeof(bad), "v1 %016x %064x 1000 4600 3 2 0\n", 1, 1);
    GM_CHECK_ERR(gm_token_store_merge(a, bad, strlen(bad), &changed), GM_ERR_FORMAT);
    GM_CHECK_EQ(gm_token_store_count(a), 2);
    gm_token_free(t);
    gm_token_store_free(a);
    gm_token_store_free(b);
}

static void test_join_proof(void)
{
    uint8_t v[32], b1[32], b2[32], p[32];
    const char ctx[] = "id|node|pub";

    randombytes_buf(v, 32);
    randombytes_buf(b1, 32);
    randombytes_buf(b2, 32);
    gm_join_proof(v, GM_JOIN_ROLE_JOINER, b1, ctx, sizeof(ctx), p);
    GM_CHECK_OK(gm_join_proof_check(v, GM_JOIN_ROLE_JOINER, b1, ctx, sizeof(ctx), p));
    GM_CHECK_ERR(gm_join_proof_check(v, GM_JOIN_ROLE_JOINER, b2, ctx, sizeof(ctx), p), GM_ERR_AUTH);
    GM_CHECK_ERR(gm_join_proof_check(v, GM_JOIN_ROLE_ADMITTER, b1, ctx, sizeof(ctx), p),
                 GM_ERR_AUTH);
    GM_CHECK_ERR(gm_join_proof_check(v, GM_JOIN_ROLE_JOINER, b1, ctx, sizeof(ctx) - 1, p),
                 GM_ERR_AUTH);
}

static void test_tls_mutual(void)
{
    struct world a, b;
    struct gm_tls_ctx *ca = NULL, *cb = NULL;
    struct gm_tls *c = NULL, *s = NULL;
    uint8_t e1[32], e2[32], big[100000], got[100000];
    size_t n, have = 0;
    int ec, es;

    world_make(&a, "lab", "n1");
    world_node(&a, &b, "lab", "n2");
    ca = ctx_of(&a, "lab", 1);
    cb = ctx_of(&b, "lab", 0);
    GM_CHECK_OK(gm_tls_new(cb, GM_TLS_ROLE_CLIENT, &c));
    GM_CHECK_OK(gm_tls_new(ca, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_OK(ec);
    GM_CHECK_OK(es);
    GM_CHECK_STREQ(gm_tls_peer_node(c), "n1");
    GM_CHECK_STREQ(gm_tls_peer_node(s), "n2");
    GM_CHECK(!gm_tls_is_join(s));
    GM_CHECK_OK(gm_tls_export(c, GM_JOIN_EXPORTER_LABEL, e1, 32));
    GM_CHECK_OK(gm_tls_export(s, GM_JOIN_EXPORTER_LABEL, e2, 32));
    GM_CHECK(memcmp(e1, e2, 32) == 0);
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    GM_CHECK_OK(gm_tls_write(c, big, sizeof(big)));
    GM_CHECK(gm_tls_out_pending(c) > sizeof(big));
    {
        /* the pending output as a block (no copy), given back afterwards */
        struct gm_tls_block blk, none;
        size_t pending = gm_tls_out_pending(c);
        GM_CHECK_OK(gm_tls_out_detach(c, &blk));
        GM_CHECK_EQ(blk.len, pending);
        GM_CHECK_EQ(gm_tls_out_pending(c), 0);
        GM_CHECK_ERR(gm_tls_out_detach(c, &none), -ENOENT);
        GM_CHECK_OK(gm_tls_feed(s, blk.data, blk.len));
        gm_tls_out_recycle(c, &blk);
        GM_CHECK(blk.block == NULL);
    }
    while (have < sizeof(got) && gm_tls_read(s, got + have, sizeof(got) - have, &n) == 0)
        have += n;
    GM_CHECK_EQ(have, sizeof(big));
    GM_CHECK(memcmp(big, got, sizeof(big)) == 0);
    gm_tls_shutdown(c);
    (void)move(c, s);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_ABORTED);
    gm_tls_free(c);
    gm_tls_free(s);
    /* a second session exports a different binding */
    GM_CHECK_OK(gm_tls_new(cb, GM_TLS_ROLE_CLIENT, &c));
    GM_CHECK_OK(gm_tls_new(ca, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_OK(gm_tls_export(c, GM_JOIN_EXPORTER_LABEL, e2, 32));
    GM_CHECK(memcmp(e1, e2, 32) != 0);
    GM_CHECK_ERR(gm_tls_export(c, "bad-label", e2, 32), -EINVAL);
    gm_tls_free(c);
    gm_tls_free(s);
    /* the denylist refuses a revoked client, both sides see it */
    {
        char serial[41];
        GM_CHECK_OK(gm_id_cert_serial(b.cert, serial));
        GM_CHECK_OK(gm_tls_ctx_deny(ca, serial));
        GM_CHECK_OK(gm_tls_new(cb, GM_TLS_ROLE_CLIENT, &c));
        GM_CHECK_OK(gm_tls_new(ca, GM_TLS_ROLE_SERVER, &s));
        pump(c, s, &ec, &es);
        GM_CHECK_ERR(es, GM_ERR_AUTH);
        GM_CHECK_ERR(ec, GM_ERR_AUTH);
        GM_CHECK(strstr(gm_tls_reason(s), "revoked") != NULL);
        GM_CHECK(strstr(gm_tls_reason(c), "revoked") != NULL);
        gm_tls_free(c);
        gm_tls_free(s);
    }
    gm_tls_ctx_free(ca);
    gm_tls_ctx_free(cb);
    world_free(&a);
    world_free(&b);
}

/* A client without a certificate (a joiner not offering the join ALPN is
 * impossible by construction; use a joiner context against a server that
 * does not accept joins). */
static void test_tls_refusals(void)
{
    struct world a, other, wrongcl;
    struct gm_tls_ctx *sa = NULL, *sa_nojoin = NULL, *co = NULL, *cw = NULL, *cj = NULL;
    struct gm_tls *c = NULL, *s = NULL;
    struct gm_tls_config jc = {.cluster = "lab"};
    uint8_t pin[32];
    int ec, es;

    world_make(&a, "lab", "n1");
    world_make(&other, "lab", "n9");       /* same names, another CA */
    world_node(&a, &wrongcl, "zoo", "n3"); /* our CA, other cluster */
    sa = ctx_of(&a, "lab", 1);
    sa_nojoin = ctx_of(&a, "lab", 0);
    co = ctx_of(&other, "lab", 0);
    cw = ctx_of(&wrongcl, "lab", 0);

    /* certificate from another CA */
    GM_CHECK_OK(gm_tls_new(co, GM_TLS_ROLE_CLIENT, &c));
    GM_CHECK_OK(gm_tls_new(sa, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_ERR(ec, GM_ERR_AUTH); /* the client refuses the server first */
    GM_CHECK_ERR(es, GM_ERR_AUTH);
    gm_tls_free(c);
    gm_tls_free(s);

    /* certificate of our CA naming another cluster */
    GM_CHECK_OK(gm_tls_new(cw, GM_TLS_ROLE_CLIENT, &c));
    GM_CHECK_OK(gm_tls_new(sa, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_ERR(ec, GM_ERR_AUTH);
    GM_CHECK_ERR(es, GM_ERR_AUTH);
    GM_CHECK(strstr(gm_tls_reason(s), "cluster 'zoo'") != NULL);
    gm_tls_free(c);
    gm_tls_free(s);

    /* joiner: right pin works against a join-accepting server */
    GM_CHECK_OK(gm_id_cert_pin(a.ca, pin));
    jc.pin = pin;
    GM_CHECK_OK(gm_tls_ctx_new(&jc, &cj));
    GM_CHECK_OK(gm_tls_new(cj, GM_TLS_ROLE_JOINER, &c));
    GM_CHECK_OK(gm_tls_new(sa, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_OK(ec);
    GM_CHECK_OK(es);
    GM_CHECK(gm_tls_is_join(s));
    {
        struct gm_cert *pinned = NULL;
        uint8_t p2[32];
        GM_CHECK_OK(gm_tls_pinned_ca(c, &pinned));
        GM_CHECK_OK(gm_id_cert_pin(pinned, p2));
        GM_CHECK(memcmp(pin, p2, 32) == 0);
        gm_id_cert_free(pinned);
    }
    gm_tls_free(c);
    gm_tls_free(s);

    /* the same cert-less client against a server that accepts no joins: the
     * join protocol is not offered (cert-less member clients: see
     * tests/integration/tls_refusals.sh, openssl s_client) */
    GM_CHECK_OK(gm_tls_new(cj, GM_TLS_ROLE_JOINER, &c));
    GM_CHECK_OK(gm_tls_new(sa_nojoin, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_ERR(es, GM_ERR_PROTO);
    GM_CHECK_ERR(ec, GM_ERR_PROTO);
    GM_CHECK(strstr(gm_tls_reason(c), "no application protocol") != NULL);
    gm_tls_free(c);
    gm_tls_free(s);
    gm_tls_ctx_free(cj);

    /* wrong pin: the joiner refuses before sending anything */
    pin[0] ^= 1;
    GM_CHECK_OK(gm_tls_ctx_new(&jc, &cj));
    GM_CHECK_OK(gm_tls_new(cj, GM_TLS_ROLE_JOINER, &c));
    GM_CHECK_OK(gm_tls_new(sa, GM_TLS_ROLE_SERVER, &s));
    pump(c, s, &ec, &es);
    GM_CHECK_ERR(ec, GM_ERR_AUTH);
    GM_CHECK_ERR(es, GM_ERR_AUTH);
    GM_CHECK(strstr(gm_tls_reason(c), "pin") != NULL);
    gm_tls_free(c);
    gm_tls_free(s);
    gm_tls_ctx_free(cj);

    /* garbage bytes */
    GM_CHECK_OK(gm_tls_new(sa, GM_TLS_ROLE_SERVER, &s));
    GM_CHECK_OK(gm_tls_feed(s, "GET / HTTP/1.1\r\n\r\n", 18));
    GM_CHECK_ERR(gm_tls_handshake(s), GM_ERR_PROTO);
    gm_tls_free(s);

    /* misuse */
    GM_CHECK_ERR(gm_tls_new(sa, GM_TLS_ROLE_JOINER, &s), -EINVAL);
    GM_CHECK(s == NULL);
    jc.pin = NULL;
    GM_CHECK_OK(gm_tls_ctx_new(&jc, &cj));
    GM_CHECK_ERR(gm_tls_new(cj, GM_TLS_ROLE_CLIENT, &c), -EINVAL);
    gm_tls_ctx_free(cj);
    gm_tls_ctx_free(NULL);
    gm_tls_free(NULL);

    gm_tls_ctx_free(sa);
    gm_tls_ctx_free(sa_nojoin);
    gm_tls_ctx_free(co);
    gm_tls_ctx_free(cw);
    world_free(&a);
    world_free(&other);
    world_free(&wrongcl);
}

/* Ends the sessions *c and *s (if any) and runs a new handshake between cc
 * (client) and cs (server), both ends expected to succeed. */
static void new_session(struct gm_tls_ctx *cc, struct gm_tls_ctx *cs, struct gm_tls **c,
                        struct gm_tls **s)
{
    int ec, es;

    gm_tls_free(*c);
    gm_tls_free(*s);
    *c = *s = NULL;
    GM_CHECK_OK(gm_tls_new(cc, GM_TLS_ROLE_CLIENT, c));
    GM_CHECK_OK(gm_tls_new(cs, GM_TLS_ROLE_SERVER, s));
    pump(*c, *s, &ec, &es);
    GM_CHECK_OK(ec);
    GM_CHECK_OK(es);
}

/* Reads everything s has for up to want bytes, cap bytes a call. */
static size_t read_all(struct gm_tls *s, uint8_t *got, size_t want, size_t cap)
{
    size_t have = 0, n;

    while (have < want &&
           gm_tls_read(s, got + have, cap < want - have ? cap : want - have, &n) == 0)
        have += n;
    return have;
}

/* The engine's record layer (crypto/record.h) against OpenSSL's, both ways,
 * and against itself: the same bytes arrive, through reads large enough to
 * take a record in place and through small ones that take it in pieces; a
 * close_notify ends each direction. */
static void test_tls_records_interop(void)
{
    struct world a, b;
    struct gm_tls_ctx *own_a, *own_b, *ossl_a, *ossl_b;
    static uint8_t big[200000], got[200000];

    world_make(&a, "lab", "n1");
    world_node(&a, &b, "lab", "n2");
    own_a = ctx_rec(&a, "lab", 0, 0);
    own_b = ctx_rec(&b, "lab", 0, 0);
    ossl_a = ctx_rec(&a, "lab", 0, 1);
    ossl_b = ctx_rec(&b, "lab", 0, 1);
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13 + (i >> 9));
    for (int mode = 0; mode < 3; mode++) {
        /* 0: own <-> own, 1: own client <-> OpenSSL server, 2: the reverse */
        struct gm_tls *c = NULL, *s = NULL;
        new_session(mode == 2 ? ossl_b : own_b, mode == 1 ? ossl_a : own_a, &c, &s);
        GM_CHECK_EQ(gm_tls_own_records(c), mode != 2);
        GM_CHECK_EQ(gm_tls_own_records(s), mode != 1);
        for (int dir = 0; dir < 2; dir++) {
            struct gm_tls *w = dir ? s : c, *r = dir ? c : s;
            size_t cap = dir ? 100 : sizeof(got); /* small reads: the staged path */
            GM_CHECK_OK(gm_tls_write(w, big, 5));
            GM_CHECK_OK(gm_tls_write(w, big + 5, sizeof(big) - 5));
            GM_CHECK(move(w, r) == 1);
            memset(got, 0, sizeof(got));
            GM_CHECK_EQ(read_all(r, got, sizeof(got), cap), sizeof(big));
            GM_CHECK(memcmp(big, got, sizeof(big)) == 0);
        }
        {
            size_t n;
            gm_tls_shutdown(c);
            (void)move(c, s);
            GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_ABORTED);
            gm_tls_shutdown(s);
            (void)move(s, c);
            GM_CHECK_ERR(gm_tls_read(c, got, sizeof(got), &n), GM_ERR_ABORTED);
        }
        gm_tls_free(c);
        gm_tls_free(s);
    }
    gm_tls_ctx_free(own_a);
    gm_tls_ctx_free(own_b);
    gm_tls_ctx_free(ossl_a);
    gm_tls_ctx_free(ossl_b);
    world_free(&a);
    world_free(&b);
}

/* A record changed in transit, or split at every byte, over a live session. */
static void test_tls_records_tamper(void)
{
    struct world a, b;
    struct gm_tls_ctx *ca, *cb;
    struct gm_tls *c = NULL, *s = NULL;
    uint8_t msg[3000], got[3000], wire[4096];
    size_t n, len;

    world_make(&a, "lab", "n1");
    world_node(&a, &b, "lab", "n2");
    ca = ctx_of(&a, "lab", 0);
    cb = ctx_of(&b, "lab", 0);
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i ^ 0x5a);
    new_session(cb, ca, &c, &s);
    /* one byte at a time: the record waits whole in the engine's buffer */
    GM_CHECK_OK(gm_tls_write(c, msg, sizeof(msg)));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    GM_CHECK_EQ(len, sizeof(msg) + GM_REC_OVERHEAD);
    for (size_t i = 0; i + 1 < len; i++) {
        GM_CHECK_OK(gm_tls_feed(s, wire + i, 1));
        GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    }
    GM_CHECK_OK(gm_tls_feed(s, wire + len - 1, 1));
    GM_CHECK_OK(gm_tls_read(s, got, sizeof(got), &n));
    GM_CHECK_EQ(n, sizeof(msg));
    GM_CHECK(memcmp(msg, got, n) == 0);
    /* one bit flipped in the body: refused, and the session stays refused */
    GM_CHECK_OK(gm_tls_write(c, msg, 100));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    wire[GM_REC_HDR + 40] ^= 4;
    GM_CHECK_OK(gm_tls_feed(s, wire, len));
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_PROTO);
    GM_CHECK(strstr(gm_tls_reason(s), "authenticate") != NULL);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_PROTO);
    /* a header no protected record has */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_feed(s, "\x16\x03\x03\x00\x20", 5));
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_PROTO);
    GM_CHECK(strstr(gm_tls_reason(s), "header") != NULL);
    gm_tls_free(c);
    gm_tls_free(s);
    gm_tls_ctx_free(ca);
    gm_tls_ctx_free(cb);
    world_free(&a);
    world_free(&b);
}

static struct gm_tls_ctx *ctx_rekey(const struct world *w, int openssl_records,
                                    uint64_t rekey_after)
{
    struct gm_tls_config cfg = {.cluster = "lab",
                                .ca = w->ca,
                                .cert = w->cert,
                                .key = w->key,
                                .openssl_records = openssl_records,
                                .rekey_after = rekey_after};
    struct gm_tls_ctx *c = NULL;

    GM_CHECK_OK(gm_tls_ctx_new(&cfg, &c));
    return c;
}

/* Key updates across a lowered limit (8 records per key), both directions, the
 * engine against itself and against OpenSSL's record layer (which updates only
 * when its limit is set, and otherwise only when asked): every byte arrives,
 * the engine never seals more than 8 records under one key, and opens at most
 * one round's records past 8 from an OpenSSL peer it had to ask. */
static void test_tls_rekey(void)
{
    enum { LIMIT = 8, ROUNDS = 30, CHUNK = 3 * GM_REC_MAX_PLAIN + 999 }; /* 4 records a round */
    struct world a, b;
    struct gm_tls_ctx *own_a, *own_b, *ossl_a, *ossl_b, *osslk_a;
    static uint8_t msg[CHUNK], got[CHUNK];
    struct gm_tls_stats st, pst;
    size_t n;

    world_make(&a, "lab", "n1");
    world_node(&a, &b, "lab", "n2");
    own_a = ctx_rekey(&a, 0, LIMIT);
    own_b = ctx_rekey(&b, 0, LIMIT);
    ossl_a = ctx_rekey(&a, 1, 0); /* OpenSSL's layer, default limit: updates only when asked */
    ossl_b = ctx_rekey(&b, 1, 0);
    osslk_a = ctx_rekey(&a, 1, LIMIT); /* OpenSSL's layer, SSL_key_update at the limit */
    for (int mode = 0; mode < 4; mode++) {
        /* 0: own <-> own, 1: own client <-> OpenSSL server, 2: the reverse,
         * 3: own client <-> OpenSSL server that updates on its own */
        struct gm_tls *c = NULL, *s = NULL;
        new_session(mode == 2 ? ossl_b : own_b,
                    mode == 1   ? ossl_a
                    : mode == 3 ? osslk_a
                                : own_a,
                    &c, &s);
        for (int dir = 0; dir < 2; dir++) {
            struct gm_tls *w = dir ? s : c, *r = dir ? c : s;
            int w_own = gm_tls_own_records(w), r_own = gm_tls_own_records(r);
            for (int round = 0; round < ROUNDS; round++) {
                for (size_t i = 0; i < sizeof(msg); i++)
                    msg[i] = (uint8_t)(i * 7 + (size_t)round * 31 + (size_t)dir);
                GM_CHECK_OK(gm_tls_write(w, msg, sizeof(msg)));
                (void)move(w, r);
                memset(got, 0, sizeof(got));
                GM_CHECK_EQ(read_all(r, got, sizeof(got), round % 2 ? 1000 : sizeof(got)),
                            sizeof(msg));
                GM_CHECK(memcmp(msg, got, sizeof(msg)) == 0);
                GM_CHECK_ERR(gm_tls_read(r, got, sizeof(got), &n), -EAGAIN);
                /* the reader's update (asked for, or an answer) reaches the writer */
                (void)move(r, w);
                GM_CHECK_ERR(gm_tls_read(w, got, sizeof(got), &n), -EAGAIN);
            }
            gm_tls_get_stats(w, &st);
            gm_tls_get_stats(r, &pst);
            if (w_own) { /* 4 records a round, an update every 7 */
                GM_CHECK(st.tx_seq_max <= LIMIT);
                GM_CHECK(st.key_updates_sent >= (uint64_t)(ROUNDS * 4 / (LIMIT - 1)));
            }
            if (r_own && (w_own || mode == 3))
                GM_CHECK(pst.rx_seq_max <= LIMIT);
            if (r_own && !w_own && mode != 3) { /* asked OpenSSL: a round late at most */
                GM_CHECK(pst.rx_seq_max <= LIMIT + 4);
                GM_CHECK(pst.key_updates_received >= (uint64_t)(ROUNDS * 4 / (LIMIT + 4)));
            }
            if (!w_own && mode == 3)
                GM_CHECK(st.key_updates_sent >= (uint64_t)(ROUNDS * 4 / LIMIT));
            GM_CHECK(pst.key_updates_received >= 3);
            if (gm_test_state.failures > 0)
                fprintf(
                    stderr, "mode %d dir %d: sent %llu max tx %llu; peer got %llu max rx %llu\n",
                    mode, dir, (unsigned long long)st.key_updates_sent,
                    (unsigned long long)st.tx_seq_max, (unsigned long long)pst.key_updates_received,
                    (unsigned long long)pst.rx_seq_max);
        }
        gm_tls_shutdown(c);
        (void)move(c, s);
        GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_ABORTED);
        GM_CHECK_ERR(gm_tls_write(c, msg, 10), -EPIPE); /* nothing after our close_notify */
        GM_CHECK_OK(gm_tls_write(s, msg, 10));          /* the other direction stays open */
        (void)move(s, c);
        GM_CHECK_OK(gm_tls_read(c, got, sizeof(got), &n));
        GM_CHECK_EQ(n, 10);
        gm_tls_free(c);
        gm_tls_free(s);
    }
    /* GM_TLS_REKEY_AFTER lowers the limit of contexts made after it is set */
    {
        struct gm_tls_ctx *ea, *eb;
        struct gm_tls *c = NULL, *s = NULL;
        GM_CHECK(setenv("GM_TLS_REKEY_AFTER", "3", 1) == 0);
        ea = ctx_rekey(&a, 0, 0);
        eb = ctx_rekey(&b, 0, 0);
        GM_CHECK(unsetenv("GM_TLS_REKEY_AFTER") == 0);
        new_session(eb, ea, &c, &s);
        for (int i = 0; i < 10; i++)
            GM_CHECK_OK(gm_tls_write(c, msg, 100));
        (void)move(c, s);
        GM_CHECK_EQ(read_all(s, got, 1000, sizeof(got)), 1000);
        gm_tls_get_stats(c, &st);
        gm_tls_get_stats(s, &pst);
        GM_CHECK_EQ(st.key_updates_sent, 4); /* 2 records, an update, 2, ... */
        GM_CHECK_EQ(pst.key_updates_received, 4);
        GM_CHECK(st.tx_seq_max <= 3);
        gm_tls_free(c);
        gm_tls_free(s);
        gm_tls_ctx_free(ea);
        gm_tls_ctx_free(eb);
    }
    gm_tls_ctx_free(own_a);
    gm_tls_ctx_free(own_b);
    gm_tls_ctx_free(ossl_a);
    gm_tls_ctx_free(ossl_b);
    gm_tls_ctx_free(osslk_a);
    world_free(&a);
    world_free(&b);
}

/* Alert descriptions as on the wire (RFC 8446 6). */
enum {
    AL_NONE = -1,
    AL_UNEXPECTED = 10,
    AL_BAD_MAC = 20,
    AL_OVERFLOW = 22,
    AL_ILLEGAL = 47,
    AL_DECODE = 50,
};

/* s reads wire[len] (after what it was already fed): the read fails with err,
 * again on the next read, s sent the alert `alert` (AL_NONE: none) and writes
 * nothing more, and c reads that alert. */
static void expect_refusal(struct gm_tls *c, struct gm_tls *s, const uint8_t *wire, size_t len,
                           int err, int alert, const char *what)
{
    static uint8_t got[GM_REC_MAX_BODY];
    struct gm_tls_stats st;
    size_t n;
    int failed = gm_test_state.failures;

    GM_CHECK_OK(gm_tls_feed(s, wire, len));
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), err);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), err);
    gm_tls_get_stats(s, &st);
    GM_CHECK_EQ(st.last_alert_sent, alert);
    if (alert != AL_NONE) {
        GM_CHECK(move(s, c) == 1);
        GM_CHECK_ERR(gm_tls_read(c, got, sizeof(got), &n), GM_ERR_PROTO);
        gm_tls_get_stats(c, &st);
        GM_CHECK_EQ(st.last_alert_received, alert);
        GM_CHECK(strstr(gm_tls_reason(c), "peer sent alert") != NULL);
    }
    GM_CHECK_ERR(gm_tls_write(s, "x", 1), -EPIPE);
    gm_tls_shutdown(s); /* no close_notify after a fatal alert */
    GM_CHECK_EQ(gm_tls_out_pending(s), 0);
    if (gm_test_state.failures > failed)
        fprintf(stderr, "  case: %s (reason: %s)\n", what, gm_tls_reason(s));
}

/* Seals one record of any inner type with c's real write key (to s). */
static size_t forge(struct gm_tls *c, uint8_t type, const void *content, size_t len, size_t pad,
                    uint8_t *wire, size_t cap)
{
    GM_CHECK_OK(gm_tls_seal_raw(c, type, content, len, pad));
    return gm_tls_out_take(c, wire, cap);
}

/* An attacker who holds the session's real keys (the peer, or anyone in the
 * middle of a broken one) and a network that drops, repeats, reorders and
 * changes bytes: every record the engine must refuse is refused with the
 * alert that fits, the session stays refused, and what a failed record
 * decrypted in place is wiped from the caller's buffer. */
static void test_tls_records_adversarial(void)
{
    struct world a, b;
    struct gm_tls_ctx *ca, *cb;
    struct gm_tls *c = NULL, *s = NULL;
    static uint8_t msg[2000], got[GM_REC_MAX_BODY], wire[4 * GM_REC_MAX_BODY];
    struct gm_tls_stats st;
    size_t n, len, len2;

    world_make(&a, "lab", "n1");
    world_node(&a, &b, "lab", "n2");
    ca = ctx_of(&a, "lab", 0);
    cb = ctx_of(&b, "lab", 0);
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i * 3 + 1);

    /* bit flips: header (the length, still a valid header: the record is cut
     * one byte short), ciphertext, tag */
    for (int where = 0; where < 3; where++) {
        size_t at;
        new_session(cb, ca, &c, &s);
        GM_CHECK_OK(gm_tls_write(c, msg, 100));
        len = gm_tls_out_take(c, wire, sizeof(wire));
        at = where == 0 ? 4 : where == 1 ? GM_REC_HDR + 50 : len - 3;
        wire[at] ^= where == 0 ? 1 : 0x40;
        if (where == 1) {
            /* the ciphertext is decrypted into the caller's buffer before the
             * tag is checked: that buffer must hold nothing of it after */
            memset(got, 0xaa, sizeof(got));
            GM_CHECK_OK(gm_tls_feed(s, wire, len));
            GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_PROTO);
            for (size_t i = 0; i < 101; i++)
                GM_CHECK_EQ(got[i], 0);
            GM_CHECK_EQ(got[101], 0xaa);
            gm_tls_get_stats(s, &st);
            GM_CHECK_EQ(st.last_alert_sent, AL_BAD_MAC);
            GM_CHECK(strstr(gm_tls_reason(s), "authenticate") != NULL);
            continue;
        }
        expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_BAD_MAC, "bit flip");
    }
    /* the same with a short read: the part in the caller's buffer is wiped too */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_write(c, msg, 1000));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    wire[GM_REC_HDR + 900] ^= 1;
    memset(got, 0xaa, sizeof(got));
    GM_CHECK_OK(gm_tls_feed(s, wire, len));
    GM_CHECK_ERR(gm_tls_read(s, got, 300, &n), GM_ERR_PROTO);
    for (size_t i = 0; i < 300; i++)
        GM_CHECK_EQ(got[i], 0);
    GM_CHECK_EQ(got[300], 0xaa);

    /* truncation: a record cut short waits; with its length patched to fit, it fails */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_write(c, msg, 100));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    GM_CHECK_OK(gm_tls_feed(s, wire, len - 1));
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    gm_tls_free(s);
    s = NULL;
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_write(c, msg, 100));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    wire[4]--;
    expect_refusal(c, s, wire, len - 1, GM_ERR_PROTO, AL_BAD_MAC, "truncated");

    /* replay: the first record again */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_write(c, msg, 100));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    GM_CHECK_OK(gm_tls_feed(s, wire, len));
    GM_CHECK_OK(gm_tls_read(s, got, sizeof(got), &n));
    GM_CHECK_EQ(n, 100);
    expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_BAD_MAC, "replay");

    /* reordering: the second record first */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_write(c, msg, 100));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    GM_CHECK_OK(gm_tls_write(c, msg, 200));
    len2 = gm_tls_out_take(c, wire + len, sizeof(wire) - len);
    expect_refusal(c, s, wire + len, len2, GM_ERR_PROTO, AL_BAD_MAC, "reordered");

    /* headers: huge length, too short for a tag, wrong version, plaintext
     * handshake and change_cipher_spec records after the handshake */
    {
        static const struct {
            const char *hdr;
            int alert;
        } hdrs[] = {
            {"\x17\x03\x03\xff\xff", AL_OVERFLOW},   {"\x17\x03\x03\x41\x01", AL_OVERFLOW},
            {"\x17\x03\x03\x00\x10", AL_DECODE},     {"\x17\x03\x01\x00\x20", AL_DECODE},
            {"\x16\x03\x03\x00\x20", AL_UNEXPECTED}, {"\x14\x03\x03\x00\x01", AL_UNEXPECTED},
        };
        for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
            new_session(cb, ca, &c, &s);
            expect_refusal(c, s, (const uint8_t *)hdrs[i].hdr, 5, GM_ERR_PROTO, hdrs[i].alert,
                           "header");
        }
    }

    /* forged inner types with the real key */
    {
        static const struct {
            uint8_t type;
            const char *content;
            size_t len, pad;
            int err, alert;
            const char *what;
        } f[] = {
            {20, "\x01", 1, 0, GM_ERR_PROTO, AL_UNEXPECTED, "protected change_cipher_spec"},
            {99, "abc", 3, 0, GM_ERR_PROTO, AL_UNEXPECTED, "unknown type"},
            {0, "", 0, 12, GM_ERR_PROTO, AL_UNEXPECTED, "zeros only: no type"},
            {22, "\x04\x00\x00\x00", 4, 0, GM_ERR_PROTO, AL_UNEXPECTED, "session ticket"},
            {22, "\x0d\x00\x00\x00", 4, 0, GM_ERR_PROTO, AL_UNEXPECTED, "certificate request"},
            {22, "", 0, 0, GM_ERR_PROTO, AL_UNEXPECTED, "empty handshake record"},
            {22, "\x18\x00\x00\x02\x00\x00", 6, 0, GM_ERR_PROTO, AL_DECODE, "KeyUpdate length 2"},
            {22, "\x18\x00\x00\x01\x00\x00", 6, 0, GM_ERR_PROTO, AL_DECODE,
             "KeyUpdate and a byte more"},
            {22, "\x18\x00\x00", 3, 0, GM_ERR_PROTO, AL_DECODE, "KeyUpdate fragment"},
            {22, "\x18\x00\x00\x01\x02", 5, 0, GM_ERR_PROTO, AL_ILLEGAL, "request_update 2"},
            {21, "\x02", 1, 0, GM_ERR_PROTO, AL_DECODE, "alert of one byte"},
            {21, "\x02\x14\x00", 3, 0, GM_ERR_PROTO, AL_DECODE, "alert of three bytes"},
            {21, "", 0, 0, GM_ERR_PROTO, AL_DECODE, "empty alert"},
            {21, "\x03\x5a", 2, 0, GM_ERR_PROTO, AL_ILLEGAL, "alert level 3"},
            {21, "\x02\x28", 2, 0, GM_ERR_AUTH, AL_NONE, "peer's handshake_failure"},
            {21, "\x02\x14", 2, 0, GM_ERR_PROTO, AL_NONE, "peer's bad_record_mac"},
            {21, "\x02\x5a", 2, 0, GM_ERR_PROTO, AL_NONE, "fatal user_canceled"},
        };
        for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
            new_session(cb, ca, &c, &s);
            len = forge(c, f[i].type, f[i].content, f[i].len, f[i].pad, wire, sizeof(wire));
            expect_refusal(c, s, wire, len, f[i].err, f[i].alert, f[i].what);
        }
    }

    /* empty records: 32 in a row pass, the 33rd is refused; data resets the run */
    new_session(cb, ca, &c, &s);
    for (int i = 0; i < 32; i++) {
        len = forge(c, 23, "", 0, (size_t)i % 3, wire, sizeof(wire));
        GM_CHECK_OK(gm_tls_feed(s, wire, len));
    }
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    GM_CHECK_OK(gm_tls_write(c, msg, 1));
    for (int i = 0; i < 32; i++)
        GM_CHECK_OK(gm_tls_seal_raw(c, 23, NULL, 0, 0));
    (void)move(c, s);
    GM_CHECK_OK(gm_tls_read(s, got, sizeof(got), &n));
    GM_CHECK_EQ(n, 1);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    len = forge(c, 23, "", 0, 0, wire, sizeof(wire));
    expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_UNEXPECTED, "33 empty records");

    /* user_canceled warnings: 5 pass, the 6th is refused */
    new_session(cb, ca, &c, &s);
    for (int i = 0; i < 5; i++)
        GM_CHECK_OK(gm_tls_seal_raw(c, 21, (const uint8_t *)"\x01\x5a", 2, 0));
    (void)move(c, s);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    len = forge(c, 21, "\x01\x5a", 2, 0, wire, sizeof(wire));
    expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_UNEXPECTED, "6 user_canceled");

    /* a real KeyUpdate (update_not_requested): the data after it, under the
     * next key, opens; a peer that announces an update and keeps its old key
     * is refused */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_seal_raw(c, 22, (const uint8_t *)"\x18\x00\x00\x01\x00", 5, 0));
    GM_CHECK_OK(gm_tls_update_tx_raw(c));
    GM_CHECK_OK(gm_tls_write(c, msg, 500));
    (void)move(c, s);
    GM_CHECK_OK(gm_tls_read(s, got, sizeof(got), &n));
    GM_CHECK_EQ(n, 500);
    GM_CHECK(memcmp(got, msg, 500) == 0);
    gm_tls_get_stats(s, &st);
    GM_CHECK_EQ(st.key_updates_received, 1);
    GM_CHECK_EQ(st.key_updates_sent, 0); /* not requested: no answer */
    GM_CHECK_EQ(st.rx_seq, 1);
    GM_CHECK_OK(gm_tls_seal_raw(c, 22, (const uint8_t *)"\x18\x00\x00\x01\x00", 5, 0));
    len = gm_tls_out_take(c, wire, sizeof(wire));
    GM_CHECK_OK(gm_tls_write(c, msg, 10)); /* still the old key */
    len += gm_tls_out_take(c, wire + len, sizeof(wire) - len);
    expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_BAD_MAC, "KeyUpdate without a new key");

    /* update_requested: s answers with its own update before its next data,
     * once however many requests came; c reads both */
    new_session(cb, ca, &c, &s);
    for (int i = 0; i < 3; i++) {
        GM_CHECK_OK(gm_tls_seal_raw(c, 22, (const uint8_t *)"\x18\x00\x00\x01\x01", 5, 0));
        GM_CHECK_OK(gm_tls_update_tx_raw(c));
    }
    (void)move(c, s);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    GM_CHECK_EQ(gm_tls_out_pending(s), 0); /* the answer waits for data */
    GM_CHECK_OK(gm_tls_write(s, msg, 300));
    GM_CHECK_OK(gm_tls_write(s, msg, 300));
    (void)move(s, c);
    GM_CHECK_EQ(read_all(c, got, 600, sizeof(got)), 600);
    gm_tls_get_stats(s, &st);
    GM_CHECK_EQ(st.key_updates_received, 3);
    GM_CHECK_EQ(st.key_updates_sent, 1);
    gm_tls_get_stats(c, &st);
    GM_CHECK_EQ(st.key_updates_received, 1);
    GM_CHECK_EQ(st.rx_seq, 2);

    /* 32 KeyUpdates in a row pass, the 33rd is refused */
    new_session(cb, ca, &c, &s);
    for (int i = 0; i < 32; i++) {
        GM_CHECK_OK(gm_tls_seal_raw(c, 22, (const uint8_t *)"\x18\x00\x00\x01\x00", 5, 0));
        GM_CHECK_OK(gm_tls_update_tx_raw(c));
    }
    (void)move(c, s);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), -EAGAIN);
    len = forge(c, 22, "\x18\x00\x00\x01\x00", 5, 0, wire, sizeof(wire));
    expect_refusal(c, s, wire, len, GM_ERR_PROTO, AL_UNEXPECTED, "33 KeyUpdates");

    /* close_notify: data after it is ignored; s may still write (RFC 8446
     * 6.1), until its own close_notify */
    new_session(cb, ca, &c, &s);
    GM_CHECK_OK(gm_tls_seal_raw(c, 21, (const uint8_t *)"\x01\x00", 2, 0));
    GM_CHECK_OK(gm_tls_seal_raw(c, 23, msg, 10, 0));
    (void)move(c, s);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_ABORTED);
    GM_CHECK_ERR(gm_tls_read(s, got, sizeof(got), &n), GM_ERR_ABORTED);
    GM_CHECK_OK(gm_tls_write(s, msg, 10));
    gm_tls_shutdown(s);
    gm_tls_shutdown(s); /* once */
    GM_CHECK_ERR(gm_tls_write(s, msg, 10), -EPIPE);
    len = gm_tls_out_take(s, wire, sizeof(wire));
    GM_CHECK_EQ(len, 2 * GM_REC_OVERHEAD + 10 + 2);
    GM_CHECK_OK(gm_tls_feed(c, wire, len));
    GM_CHECK_OK(gm_tls_read(c, got, sizeof(got), &n));
    GM_CHECK_EQ(n, 10);
    GM_CHECK_ERR(gm_tls_read(c, got, sizeof(got), &n), GM_ERR_ABORTED);

    gm_tls_free(c);
    gm_tls_free(s);
    gm_tls_ctx_free(ca);
    gm_tls_ctx_free(cb);
    world_free(&a);
    world_free(&b);
}

/* crypto/record.c alone: every suite round-trips; padding, empty content and
 * the inner type survive; what the opener must refuse, it refuses. */
static void test_records(void)
{
    const EVP_CIPHER *ciphers[3] = {EVP_aes_128_gcm(), EVP_aes_256_gcm(), EVP_chacha20_poly1305()};
    const EVP_MD *mds[3] = {EVP_sha256(), EVP_sha384(), EVP_sha256()};
    uint8_t secret[48], content[GM_REC_MAX_PLAIN + 1], rec[GM_REC_MAX_BODY + GM_REC_HDR + 1];
    uint8_t dst[GM_REC_MAX_BODY], type;
    struct gm_rec_dir tx, rx;
    size_t len;
    long r;

    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < sizeof(content); i++)
        content[i] = (uint8_t)(i * 5 + 1);
    for (int k = 0; k < 3; k++) {
        size_t sl = (size_t)EVP_MD_get_size(mds[k]);
        GM_CHECK_OK(gm_rec_init(&tx, ciphers[k], mds[k], secret, sl, 1));
        GM_CHECK_OK(gm_rec_init(&rx, ciphers[k], mds[k], secret, sl, 0));
        {
            const size_t lens[] = {0, 1, 100, GM_REC_MAX_PLAIN};
            const size_t pads[] = {0, 7, 0, 0};
            for (int j = 0; j < 4; j++) {
                r = gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, lens[j], pads[j], rec);
                GM_CHECK_EQ(r, (long)(GM_REC_OVERHEAD + lens[j] + pads[j]));
                GM_CHECK_EQ(gm_rec_size(rec, (size_t)r), r);
                GM_CHECK_EQ(gm_rec_size(rec, GM_REC_HDR - 1), 0);
                GM_CHECK_OK(gm_rec_open(&rx, rec, (size_t)r, dst, sizeof(dst), NULL, &len, &type));
                GM_CHECK_EQ(len, lens[j]);
                GM_CHECK_EQ(type, GM_REC_TYPE_DATA);
                GM_CHECK(len == 0 || memcmp(dst, content, len) == 0);
            }
        }
        /* too long a content, a wrong direction */
        GM_CHECK_ERR(gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, GM_REC_MAX_PLAIN + 1, 0, rec),
                     -EINVAL);
        GM_CHECK_ERR(gm_rec_seal(&rx, GM_REC_TYPE_DATA, content, 1, 0, rec), -EINVAL);
        /* a record opened out of order (sequence 5 read as 4) */
        r = gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, 10, 0, rec);
        GM_CHECK(r > 0);
        r = gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, 10, 0, rec);
        GM_CHECK_ERR(gm_rec_open(&rx, rec, (size_t)r, dst, sizeof(dst), NULL, &len, &type),
                     GM_ERR_PROTO);
        gm_rec_free(&tx);
        gm_rec_free(&rx);
        /* an inner plaintext of zeros only: no content type */
        GM_CHECK_OK(gm_rec_init(&tx, ciphers[k], mds[k], secret, sl, 1));
        GM_CHECK_OK(gm_rec_init(&rx, ciphers[k], mds[k], secret, sl, 0));
        r = gm_rec_seal(&tx, 0, content, 0, 9, rec);
        GM_CHECK(r > 0);
        GM_CHECK_ERR(gm_rec_open(&rx, rec, (size_t)r, dst, sizeof(dst), NULL, &len, &type),
                     GM_ERR_PROTO);
        gm_rec_free(&tx);
        gm_rec_free(&rx);
    }
    /* the inner plaintext split between the caller's room and the spill: the room ends
     * inside the content, right after it (the type spills), inside the padding (the type
     * stays, zeros spill), and at 0 (all spills) */
    {
        uint8_t spill[GM_REC_MAX_BODY];
        const size_t caps[] = {3, 100, 104, 0, 7};
        const size_t pads[] = {0, 0, 9, 0, 0};
        GM_CHECK_OK(gm_rec_init(&tx, ciphers[0], mds[0], secret, 32, 1));
        GM_CHECK_OK(gm_rec_init(&rx, ciphers[0], mds[0], secret, 32, 0));
        for (int j = 0; j < 5; j++) {
            uint8_t joined[200];
            r = gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, 100, pads[j], rec);
            GM_CHECK(r > 0);
            memset(dst, 0xee, 200);
            memset(spill, 0xee, 200);
            GM_CHECK_OK(gm_rec_open(&rx, rec, (size_t)r, dst, caps[j], spill, &len, &type));
            GM_CHECK_EQ(len, 100);
            GM_CHECK_EQ(type, GM_REC_TYPE_DATA);
            memcpy(joined, dst, caps[j] < len ? caps[j] : len);
            if (caps[j] < len)
                memcpy(joined + caps[j], spill, len - caps[j]);
            GM_CHECK(memcmp(joined, content, len) == 0);
            GM_CHECK(caps[j] >= len || dst[caps[j]] == 0xee); /* nothing past the room */
        }
        r = gm_rec_seal(&tx, GM_REC_TYPE_DATA, content, 100, 0, rec);
        GM_CHECK_ERR(gm_rec_open(&rx, rec, (size_t)r, dst, 50, NULL, &len, &type), -EINVAL);
        gm_rec_free(&tx);
        gm_rec_free(&rx);
    }
    /* headers: outer type, version, and the length limits */
    memcpy(rec, "\x17\x03\x03\x00\x11", 5);
    GM_CHECK_EQ(gm_rec_size(rec, 5), 5 + 17);
    rec[4] = 0x10; /* 16: no room for the type and the tag */
    GM_CHECK_ERR(gm_rec_size(rec, 5), GM_ERR_PROTO);
    rec[3] = (uint8_t)((GM_REC_MAX_BODY + 1) >> 8);
    rec[4] = (uint8_t)(GM_REC_MAX_BODY + 1);
    GM_CHECK_ERR(gm_rec_size(rec, 5), GM_ERR_PROTO);
    memcpy(rec, "\x15\x03\x03\x00\x20", 5);
    GM_CHECK_ERR(gm_rec_size(rec, 5), GM_ERR_PROTO);
    memcpy(rec, "\x17\x03\x01\x00\x20", 5);
    GM_CHECK_ERR(gm_rec_size(rec, 5), GM_ERR_PROTO);
}

int main(void)
{
    char cmd[300];
    int rc;

    if (sodium_init() < 0)
        return 1;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gm-test-crypto-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return 1;
    GM_TEST_RUN(test_names_and_certs);
    GM_TEST_RUN(test_key_files);
    GM_TEST_RUN(test_token_codec);
    GM_TEST_RUN(test_token_store);
    GM_TEST_RUN(test_token_merge);
    GM_TEST_RUN(test_join_proof);
    GM_TEST_RUN(test_tls_mutual);
    GM_TEST_RUN(test_tls_refusals);
    GM_TEST_RUN(test_tls_records_interop);
    GM_TEST_RUN(test_tls_records_tamper);
    GM_TEST_RUN(test_tls_rekey);
    GM_TEST_RUN(test_tls_records_adversarial);
    GM_TEST_RUN(test_records);
    rc = gm_test_finish("test_crypto");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
