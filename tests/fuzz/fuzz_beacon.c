/*
 * tests/fuzz/fuzz_beacon.c - discovery beacons (crypto/beacon.h).  A CA and a
 * node "lab"/"n1" are made once (random keys); the beacon key and the token
 * verifier are fixed bytes, so sealed seeds open in every run.  Each input
 *  1. goes as a datagram to gm_beacon_kind, gm_beacon_open_member and
 *     gm_beacon_open_join;
 *  2. goes to the field decoder (crypto/internal.h) in both layouts: what
 *     decodes must encode to the same bytes;
 *  3. is sealed as the plaintext of a MEMBER and of a JOIN beacon with the
 *     right keys, so the parser, the certificate and the signature checks
 *     behind the seal are reached: a JOIN opens exactly when its fields
 *     decode, a MEMBER whose layout does not decode is GM_ERR_FORMAT;
 *  4. when it decodes as JOIN fields, is sealed by the node with
 *     gm_beacon_seal_member: it must open exactly when it names lab/n1, with
 *     the same fields and the node's serial.
 * Whatever opens must seal and open again to the same fields; whatever does
 * not is GM_ERR_FORMAT or GM_ERR_AUTH with the outputs cleared.
 *
 * Seeds: GM_FUZZ_BEACON_SEEDS=<dir> build-fuzz/fuzz_beacon -runs=0 writes a
 * datagram of each kind and field plaintexts of both layouts into dir.
 *
 * The state made once is the harness's only file-scope variable: libFuzzer
 * offers no other place to keep it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/beacon.h"
#include "crypto/identity.h"
#include "crypto/internal.h"

#define SIG_LEN 64
#define PLAIN_MAX (GM_BEACON_MAX - 8 - 24 - 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct {
    struct gm_key *cakey, *key;
    struct gm_cert *ca, *cert;
    char serial[41];
    uint8_t bkey[GM_BEACON_KEY_LEN], jkey[GM_BEACON_KEY_LEN];
} st;

static void need(int ok)
{
    if (!ok)
        abort();
}

static int same(const struct gm_beacon *a, const struct gm_beacon *b)
{
    return strcmp(a->cluster, b->cluster) == 0 && strcmp(a->node, b->node) == 0 &&
           strcmp(a->host, b->host) == 0 && a->port == b->port && a->flags == b->flags &&
           a->ts_ms == b->ts_ms && a->seq == b->seq;
}

static void write_seed(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];

    need(snprintf(path, sizeof(path), "%s/%s", dir, name) < (int)sizeof(path));
    need(gm_id_write_file(path, p, n, 0644) == 0);
}

static void seed_beacon(struct gm_beacon *b, const char *cluster, const char *node,
                        const char *host)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->cluster, sizeof(b->cluster), "%s", cluster);
    snprintf(b->node, sizeof(b->node), "%s", node);
    snprintf(b->host, sizeof(b->host), "%s", host);
    b->port = 7411;
    b->flags = GM_BEACON_F_ADMITTER;
    b->ts_ms = 1800000000000LL;
    b->seq = 42;
}

static void write_seeds(const char *dir)
{
    uint8_t p[GM_BEACON_MAX], der[GM_BEACON_MAX], *q = der;
    struct gm_beacon b;
    size_t n = 0;
    int der_len = i2d_X509(gm_id_cert_x509(st.cert), &q);

    need(der_len > 0);
    seed_beacon(&b, "lab", "n1", "192.0.2.7");
    need(gm_beacon_seal_member(&b, st.cert, st.key, st.bkey, p, sizeof(p), &n) == 0);
    write_seed(dir, "member", p, n);
    need(gm_beacon_fields_encode(&b, NULL, 0, p, sizeof(p), &n) == 0);
    write_seed(dir, "fields-join-lab-n1", p, n);
    need(gm_beacon_fields_encode(&b, der, (size_t)der_len, p, sizeof(p) - SIG_LEN, &n) == 0);
    memset(p + n, 0x5a, SIG_LEN); /* a signature's place */
    write_seed(dir, "fields-member", p, n + SIG_LEN);
    seed_beacon(&b, "lab", "admitter-1", "2001:db8::7");
    need(gm_beacon_seal_join(&b, st.jkey, p, sizeof(p), &n) == 0);
    write_seed(dir, "join", p, n);
    seed_beacon(&b, "zoo", "n2", "");
    need(gm_beacon_fields_encode(&b, NULL, 0, p, sizeof(p), &n) == 0);
    write_seed(dir, "fields-join-zoo-n2", p, n);
    need(gm_beacon_solicit(p, sizeof(p), &n) == 0);
    write_seed(dir, "solicit", p, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    uint8_t pub[GM_ID_PUB_LEN], v[GM_TOKEN_VERIFIER_LEN];
    const char *seeds = getenv("GM_FUZZ_BEACON_SEEDS");

    (void)argc;
    (void)argv;
    need(sodium_init() >= 0);
    need(gm_id_key_generate(&st.cakey) == 0 && gm_id_ca_create("lab", st.cakey, 30, &st.ca) == 0);
    need(gm_id_key_generate(&st.key) == 0 && gm_id_key_public(st.key, pub) == 0);
    need(gm_id_cert_issue(st.ca, st.cakey, "lab", "n1", pub, 10, &st.cert) == 0);
    need(gm_id_cert_serial(st.cert, st.serial) == 0);
    memset(st.bkey, 0x5a, sizeof(st.bkey));
    memset(v, 0x17, sizeof(v));
    gm_beacon_join_key(v, st.jkey);
    if (seeds != NULL)
        write_seeds(seeds);
    return 0;
}

/* The result of an open: a refusal clears the outputs; a beacon that opens
 * seals and opens again to the same fields. */
static void check_open(int e, const struct gm_beacon *b, const char *serial,
                       enum gm_beacon_kind kind)
{
    static const struct gm_beacon zero;
    uint8_t p[GM_BEACON_MAX];
    struct gm_beacon again;
    char serial2[41];
    size_t n = 0;

    if (e != 0) {
        need(e == GM_ERR_FORMAT || e == GM_ERR_AUTH);
        need(memcmp(b, &zero, sizeof(*b)) == 0 && (serial == NULL || serial[0] == '\0'));
        return;
    }
    need(b->kind == kind && gm_id_name_valid(b->cluster) && gm_id_name_valid(b->node));
    if (kind == GM_BEACON_JOIN) {
        need(gm_beacon_seal_join(b, st.jkey, p, sizeof(p), &n) == 0);
        need(gm_beacon_open_join(p, n, st.jkey, &again) == 0 && same(b, &again));
        return;
    }
    /* only our node holds a certificate of our CA */
    need(strcmp(serial, st.serial) == 0);
    need(gm_beacon_seal_member(b, st.cert, st.key, st.bkey, p, sizeof(p), &n) == 0);
    need(gm_beacon_open_member(p, n, st.bkey, st.ca, &again, serial2) == 0 && same(b, &again));
}

static void as_datagram(const uint8_t *data, size_t size)
{
    struct gm_beacon b;
    char serial[41];
    int k = gm_beacon_kind(data, size), e;

    need(k == GM_ERR_FORMAT || k == GM_BEACON_MEMBER || k == GM_BEACON_JOIN ||
         k == GM_BEACON_SOLICIT);
    e = gm_beacon_open_member(data, size, st.bkey, st.ca, &b, serial);
    need(e != 0 || k == GM_BEACON_MEMBER);
    check_open(e, &b, serial, GM_BEACON_MEMBER);
    e = gm_beacon_open_join(data, size, st.jkey, &b);
    need(e != 0 || k == GM_BEACON_JOIN);
    check_open(e, &b, NULL, GM_BEACON_JOIN);
}

/* The decoder accepts exactly what the encoder writes. */
static void as_fields(const uint8_t *data, size_t size, enum gm_beacon_kind kind)
{
    struct gm_beacon b;
    const uint8_t *der = NULL;
    size_t der_len = 0, n = 0;
    uint8_t *buf;
    int e = gm_beacon_fields_decode(kind, data, size, &b, &der, &der_len);

    if (e != 0) {
        need(e == GM_ERR_FORMAT && der == NULL && der_len == 0);
        return;
    }
    need(kind == GM_BEACON_MEMBER ? der != NULL && der_len > 0 : der == NULL);
    buf = malloc(size + 1);
    need(buf != NULL);
    need(gm_beacon_fields_encode(&b, der, der_len, buf, size, &n) == 0);
    need(n == size && memcmp(buf, data, size) == 0);
    free(buf);
}

static void as_plaintext(const uint8_t *data, size_t size)
{
    uint8_t p[GM_BEACON_MAX];
    struct gm_beacon b, t;
    const uint8_t *der;
    size_t n = 0, der_len;
    char serial[41];
    int e, layout;

    e = gm_beacon_seal_raw(GM_BEACON_MEMBER, st.bkey, data, size, p, sizeof(p), &n);
    if (size > PLAIN_MAX) {
        need(e == -ENOSPC && n == 0);
        return;
    }
    need(e == 0);
    layout = size >= SIG_LEN && gm_beacon_fields_decode(GM_BEACON_MEMBER, data, size - SIG_LEN, &t,
                                                        &der, &der_len) == 0;
    e = gm_beacon_open_member(p, n, st.bkey, st.ca, &b, serial);
    need(layout || e == GM_ERR_FORMAT);
    check_open(e, &b, serial, GM_BEACON_MEMBER);

    need(gm_beacon_seal_raw(GM_BEACON_JOIN, st.jkey, data, size, p, sizeof(p), &n) == 0);
    layout = gm_beacon_fields_decode(GM_BEACON_JOIN, data, size, &t, &der, &der_len) == 0;
    e = gm_beacon_open_join(p, n, st.jkey, &b);
    need(layout ? e == 0 && same(&b, &t) : e == GM_ERR_FORMAT);
    check_open(e, &b, NULL, GM_BEACON_JOIN);
}

/* JOIN-layout fields sealed by our node: open exactly when they name lab/n1. */
static void as_member_fields(const uint8_t *data, size_t size)
{
    uint8_t p[GM_BEACON_MAX];
    struct gm_beacon b, got;
    const uint8_t *der;
    size_t n = 0, der_len;
    char serial[41];
    int ours, e;

    if (gm_beacon_fields_decode(GM_BEACON_JOIN, data, size, &b, &der, &der_len) != 0)
        return;
    ours = strcmp(b.cluster, "lab") == 0 && strcmp(b.node, "n1") == 0;
    need(gm_beacon_seal_member(&b, st.cert, st.key, st.bkey, p, sizeof(p), &n) == 0);
    e = gm_beacon_open_member(p, n, st.bkey, st.ca, &got, serial);
    need(e == (ours ? 0 : GM_ERR_AUTH));
    check_open(e, &got, serial, GM_BEACON_MEMBER);
    if (e == 0)
        need(same(&got, &b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    as_datagram(data, size);
    as_fields(data, size, GM_BEACON_MEMBER);
    as_fields(data, size, GM_BEACON_JOIN);
    as_plaintext(data, size);
    as_member_fields(data, size);
    return 0;
}
