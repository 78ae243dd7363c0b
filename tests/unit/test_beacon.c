/*
 * tests/unit/test_beacon.c - discovery beacons (crypto/beacon.h) with real
 * keys and certificates.  Forged beacons are built by hand from the layout in
 * beacon.h with libsodium (seal, Ed25519), independently of crypto/beacon.c.
 */
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
#include "crypto/beacon.h"
#include "crypto/identity.h"

GM_TEST_DEFINE_STATE;

#define HDR 8
#define NONCE 24
#define TAG 16
#define SIG 64
#define NOW_MS 1800000000000LL

static char tmpdir[256];

static void fill(struct gm_beacon *b, const char *cluster, const char *node, const char *host)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->cluster, sizeof(b->cluster), "%s", cluster);
    snprintf(b->node, sizeof(b->node), "%s", node);
    snprintf(b->host, sizeof(b->host), "%s", host);
    b->port = 7411;
    b->flags = GM_BEACON_F_ADMITTER;
    b->ts_ms = NOW_MS;
    b->seq = 0x0102030405060708ULL;
}

static void check_same(const struct gm_beacon *got, const struct gm_beacon *want,
                       enum gm_beacon_kind kind)
{
    GM_CHECK_EQ(got->kind, kind);
    GM_CHECK_STREQ(got->cluster, want->cluster);
    GM_CHECK_STREQ(got->node, want->node);
    GM_CHECK_STREQ(got->host, want->host);
    GM_CHECK_EQ(got->port, want->port);
    GM_CHECK_EQ(got->flags, want->flags);
    GM_CHECK_EQ(got->ts_ms, want->ts_ms);
    GM_CHECK(got->seq == want->seq);
}

/* --- by hand, from the layout in beacon.h ---------------------------------- */

/* msg = header | plaintext; returns its length, 0 when the seal does not open. */
static size_t hand_open(const uint8_t *p, size_t len, const uint8_t key[32], uint8_t *msg)
{
    unsigned long long m = 0;

    if (len < HDR + NONCE + TAG)
        return 0;
    memcpy(msg, p, HDR);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(msg + HDR, &m, NULL, p + HDR + NONCE,
                                                   len - HDR - NONCE, p, HDR, p + HDR, key) != 0)
        return 0;
    return HDR + (size_t)m;
}

/* msg = header | plaintext, sealed with a fresh nonce; returns the datagram's length. */
static size_t hand_seal(const uint8_t *msg, size_t n, const uint8_t key[32], uint8_t *out)
{
    unsigned long long c = 0;

    memcpy(out, msg, HDR);
    randombytes_buf(out + HDR, NONCE);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + HDR + NONCE, &c, msg + HDR, n - HDR, out, HDR,
                                               NULL, out + HDR, key);
    return HDR + NONCE + (size_t)c;
}

/* --- tests ---------------------------------------------------------------- */

static void test_member_round_trip(void)
{
    static const char *hosts[] = {"192.0.2.7", "2001:db8::1", "", "::ffff:192.0.2.1"};
    struct world w;
    struct gm_beacon b, got;
    uint8_t bkey[32], p[GM_BEACON_MAX], p2[GM_BEACON_MAX], msg[GM_BEACON_MAX], pub[32];
    char serial[41], want_serial[41];
    size_t len = 0, len2 = 0, n;

    world_make(&w, "lab", "n1");
    gm_beacon_key_generate(bkey);
    GM_CHECK_OK(gm_id_cert_serial(w.cert, want_serial));
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        fill(&b, "lab", "n1", hosts[i]);
        b.kind = GM_BEACON_SOLICIT; /* ignored */
        b.ts_ms = NOW_MS + (int64_t)i;
        GM_CHECK_OK(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len));
        GM_CHECK(len > 300 && len <= GM_BEACON_MAX);
        GM_CHECK_EQ(gm_beacon_kind(p, len), GM_BEACON_MEMBER);
        GM_CHECK_OK(gm_beacon_open_member(p, len, bkey, w.ca, &got, serial));
        check_same(&got, &b, GM_BEACON_MEMBER);
        GM_CHECK_STREQ(serial, want_serial);
    }
    /* extreme values survive */
    fill(&b, "lab", "n1", "10.0.0.1");
    b.ts_ms = INT64_MIN;
    b.seq = UINT64_MAX;
    b.flags = UINT32_MAX;
    b.port = UINT16_MAX;
    GM_CHECK_OK(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len));
    GM_CHECK_OK(gm_beacon_open_member(p, len, bkey, w.ca, &got, serial));
    check_same(&got, &b, GM_BEACON_MEMBER);

    /* the wire matches beacon.h: clear header, then the seal; inside,
     * header | fields | cert is signed by the node key (checked with libsodium) */
    GM_CHECK(memcmp(p, "GMB1\x01\x01\x00\x00", HDR) == 0);
    n = hand_open(p, len, bkey, msg);
    GM_CHECK(n > HDR + SIG);
    GM_CHECK_OK(gm_id_key_public(w.key, pub));
    GM_CHECK(crypto_sign_verify_detached(msg + n - SIG, msg, n - SIG, pub) == 0);
    GM_CHECK(memcmp(msg + HDR, "\x80\x00\x00\x00\x00\x00\x00\x00", 8) == 0); /* i64 ts BE */
    GM_CHECK(memcmp(msg + HDR + 8, "\xff\xff\xff\xff\xff\xff\xff\xff", 8) == 0);

    /* a fresh nonce every time */
    GM_CHECK_OK(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p2, sizeof(p2), &len2));
    GM_CHECK_EQ(len2, len);
    GM_CHECK(memcmp(p + HDR, p2 + HDR, NONCE) != 0);

    /* room and arguments */
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p2, len - 1, &len2), -ENOSPC);
    GM_CHECK_EQ(len2, 0);
    GM_CHECK_OK(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p2, len, &len2));
    fill(&b, "lab", "N1", "");
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len), -EINVAL);
    fill(&b, "lab", "n1", "example.com");
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len), -EINVAL);
    fill(&b, "lab", "n1", "fe80::1%eth0");
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len), -EINVAL);
    fill(&b, "lab", "n1", "");
    b.port = 0;
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len), -EINVAL);
    fill(&b, "", "n1", "");
    GM_CHECK_ERR(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len), -EINVAL);
    world_free(&w);
}

static void test_join(void)
{
    struct gm_beacon b, got;
    uint8_t v[32], v2[32], jkey[32], jkey2[32], want[32], bkey[32];
    uint8_t p[GM_BEACON_MAX];
    char serial[41];
    size_t len = 0;

    randombytes_buf(v, sizeof(v));
    randombytes_buf(v2, sizeof(v2));
    gm_beacon_join_key(v, jkey);
    gm_beacon_join_key(v2, jkey2);
    crypto_generichash(want, 32, (const unsigned char *)"gradmesh-beacon-join-v1", 23, v, 32);
    GM_CHECK(memcmp(jkey, want, 32) == 0);
    GM_CHECK(memcmp(jkey, jkey2, 32) != 0);

    fill(&b, "lab", "admitter-1", "2001:db8::7");
    GM_CHECK_OK(gm_beacon_seal_join(&b, jkey, p, sizeof(p), &len));
    /* header, nonce, 22 fixed bytes, three strings, tag: no certificate, no signature */
    GM_CHECK_EQ(len, HDR + NONCE + 22 + 3 + strlen(b.host) + 3 + 10 + TAG);
    GM_CHECK_EQ(gm_beacon_kind(p, len), GM_BEACON_JOIN);
    GM_CHECK_OK(gm_beacon_open_join(p, len, jkey, &got));
    check_same(&got, &b, GM_BEACON_JOIN);
    GM_CHECK_ERR(gm_beacon_open_join(p, len, jkey2, &got), GM_ERR_AUTH);
    GM_CHECK(got.node[0] == '\0' && got.port == 0); /* cleared on failure */
    for (size_t i = 0; i < len; i++) {
        int e;
        p[i] ^= 0x01;
        e = gm_beacon_open_join(p, len, jkey, &got);
        GM_CHECK(e == GM_ERR_FORMAT || e == GM_ERR_AUTH);
        p[i] ^= 0x01;
    }
    for (size_t n = 0; n < len; n++) {
        int e = gm_beacon_open_join(p, n, jkey, &got);
        GM_CHECK(e == GM_ERR_FORMAT || e == GM_ERR_AUTH);
    }
    /* the kinds do not mix, whatever the keys */
    memcpy(bkey, jkey, 32);
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, NULL, &got, serial), GM_ERR_FORMAT);
    GM_CHECK_ERR(gm_beacon_seal_join(&b, jkey, p, len - 1, &len), -ENOSPC);
    b.port = 0;
    GM_CHECK_ERR(gm_beacon_seal_join(&b, jkey, p, sizeof(p), &len), -EINVAL);
}

static void test_member_damage(void)
{
    struct world w;
    struct gm_beacon b, got;
    uint8_t bkey[32], p[GM_BEACON_MAX + 1];
    char serial[41];
    size_t len = 0, refused = 0, auth = 0;
    int e;

    world_make(&w, "lab", "n1");
    gm_beacon_key_generate(bkey);
    fill(&b, "lab", "n1", "192.0.2.7");
    GM_CHECK_OK(gm_beacon_seal_member(&b, w.cert, w.key, bkey, p, sizeof(p), &len));
    /* every byte, two different flips each */
    for (size_t i = 0; i < len; i++) {
        for (int m = 0; m < 2; m++) {
            uint8_t mask = m == 0 ? 0x01 : 0xa4;
            p[i] ^= mask;
            e = gm_beacon_open_member(p, len, bkey, w.ca, &got, serial);
            GM_CHECK(e == GM_ERR_FORMAT || e == GM_ERR_AUTH);
            refused += e == GM_ERR_FORMAT || e == GM_ERR_AUTH;
            auth += e == GM_ERR_AUTH;
            p[i] ^= mask;
        }
    }
    GM_CHECK_EQ(refused, 2 * len);
    GM_CHECK_EQ(auth, 2 * (len - HDR)); /* the header is the only clear part */
    GM_CHECK(got.node[0] == '\0' && serial[0] == '\0');
    /* every truncation, and one byte more */
    refused = 0;
    for (size_t n = 0; n < len; n++) {
        e = gm_beacon_open_member(p, n, bkey, w.ca, &got, serial);
        refused += e == GM_ERR_FORMAT || e == GM_ERR_AUTH;
    }
    GM_CHECK_EQ(refused, len);
    p[len] = 0;
    GM_CHECK_ERR(gm_beacon_open_member(p, len + 1, bkey, w.ca, &got, serial), GM_ERR_AUTH);
    GM_CHECK_OK(gm_beacon_open_member(p, len, bkey, w.ca, &got, serial)); /* p intact */
    world_free(&w);
}

/* Decrypts p, lets edit change the plaintext (header | fields | cert | sig),
 * seals it again with the right key and opens it. */
static int reseal_open(const uint8_t *p, size_t len, const uint8_t bkey[32],
                       const struct gm_cert *ca, size_t (*edit)(uint8_t *msg, size_t n))
{
    uint8_t msg[GM_BEACON_MAX + 64], q[GM_BEACON_MAX + 128];
    struct gm_beacon got;
    char serial[41];
    size_t n = hand_open(p, len, bkey, msg), qlen;

    GM_CHECK(n > 0);
    if (n == 0)
        return 0;
    n = edit(msg, n);
    qlen = hand_seal(msg, n, bkey, q);
    return gm_beacon_open_member(q, qlen, bkey, ca, &got, serial);
}

static size_t edit_none(uint8_t *msg, size_t n)
{
    (void)msg;
    return n;
}

/* Signs header | fields | cert with a fresh Ed25519 key that is not the certificate's. */
static size_t edit_resign(uint8_t *msg, size_t n)
{
    uint8_t pk[32], sk[64];

    crypto_sign_keypair(pk, sk);
    crypto_sign_detached(msg + n - SIG, NULL, msg, n - SIG, sk);
    sodium_memzero(sk, sizeof(sk));
    return n;
}

static size_t edit_bad_sig(uint8_t *msg, size_t n)
{
    msg[n - 1] ^= 0x40;
    return n;
}

static size_t edit_trailing(uint8_t *msg, size_t n)
{
    memmove(msg + n - SIG + 1, msg + n - SIG, SIG); /* one byte between cert and sig */
    msg[n - SIG] = 0;
    return n + 1;
}

static size_t edit_short(uint8_t *msg, size_t n)
{
    (void)msg;
    (void)n;
    return HDR + SIG - 1; /* not even a signature */
}

static size_t edit_fields_only(uint8_t *msg, size_t n)
{
    (void)msg;
    (void)n;
    return HDR + 20 + SIG; /* fields cut inside the fixed part */
}

/* Makes the cert's DER garbage (same length): the certificate does not parse. */
static size_t edit_der(uint8_t *msg, size_t n)
{
    size_t off = HDR + 22;

    for (int i = 0; i < 3; i++)
        off += 1 + msg[off]; /* host, cluster, node */
    memset(msg + off + 2, 0x30, n - SIG - off - 2);
    return n;
}

/* A NUL inside the node name ("n1" -> "n\0"): malformed behind a good seal. */
static size_t edit_node_nul(uint8_t *msg, size_t n)
{
    size_t off = HDR + 22;

    off += 1 + msg[off]; /* host */
    off += 1 + msg[off]; /* cluster */
    msg[off + 2] = '\0'; /* node "n1" -> "n\0" */
    return n;
}

static void test_member_forgeries(void)
{
    struct world a, other, zoo_ca, n2, zoo_node;
    struct gm_beacon b, got;
    uint8_t bkey[32], bkey2[32], p[GM_BEACON_MAX];
    char serial[41];
    size_t len = 0;

    world_make(&a, "lab", "n1");
    world_make(&other, "lab", "n1");        /* same names, another CA */
    world_make(&zoo_ca, "zoo", "z1");       /* another cluster, its own CA */
    world_node(&a, &n2, "lab", "n2");       /* our CA, another node */
    world_node(&a, &zoo_node, "zoo", "n3"); /* our CA, a certificate naming another cluster */
    gm_beacon_key_generate(bkey);
    gm_beacon_key_generate(bkey2);

    /* a different beacon key */
    fill(&b, "lab", "n1", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, a.cert, a.key, bkey2, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);

    /* the right beacon key, a node of another cluster with its own CA */
    fill(&b, "zoo", "z1", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, zoo_ca.cert, zoo_ca.key, bkey, p, sizeof(p), &len));
    GM_CHECK_OK(gm_beacon_open_member(p, len, bkey, zoo_ca.ca, &got, serial)); /* it is valid */
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);
    GM_CHECK(got.node[0] == '\0' && serial[0] == '\0');
    /* ... and one whose CA uses our cluster's name */
    fill(&b, "lab", "n1", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, other.cert, other.key, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);

    /* our CA, a certificate for another node than the beacon's */
    fill(&b, "lab", "n2", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, a.cert, a.key, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);
    /* our CA, a certificate naming cluster zoo: refused as zoo (not our
     * CA's cluster) and as lab (not the certificate's) */
    fill(&b, "zoo", "n3", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, zoo_node.cert, zoo_node.key, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);
    fill(&b, "lab", "n3", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, zoo_node.cert, zoo_node.key, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);
    /* the CA certificate itself as the sender's */
    fill(&b, "lab", "n1", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, a.ca, a.cakey, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);

    /* signed by a key that is not the certificate's: n2's certificate, n1's key */
    fill(&b, "lab", "n2", "");
    GM_CHECK_OK(gm_beacon_seal_member(&b, n2.cert, a.key, bkey, p, sizeof(p), &len));
    GM_CHECK_ERR(gm_beacon_open_member(p, len, bkey, a.ca, &got, serial), GM_ERR_AUTH);

    /* by hand from a valid beacon: re-sealed unchanged it opens; re-signed by
     * another key, or with a damaged signature, it does not */
    fill(&b, "lab", "n1", "192.0.2.7");
    GM_CHECK_OK(gm_beacon_seal_member(&b, a.cert, a.key, bkey, p, sizeof(p), &len));
    GM_CHECK_OK(reseal_open(p, len, bkey, a.ca, edit_none));
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_resign), GM_ERR_AUTH);
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_bad_sig), GM_ERR_AUTH);
    /* malformed behind a good seal */
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_trailing), GM_ERR_FORMAT);
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_short), GM_ERR_FORMAT);
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_fields_only), GM_ERR_FORMAT);
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_der), GM_ERR_FORMAT);
    GM_CHECK_ERR(reseal_open(p, len, bkey, a.ca, edit_node_nul), GM_ERR_FORMAT);

    world_free(&a);
    world_free(&other);
    world_free(&zoo_ca);
    world_free(&n2);
    world_free(&zoo_node);
}

static void test_replay(void)
{
    struct gm_beacon_seen *s = NULL, *none = NULL;
    struct gm_beacon b, n2, n3;

    GM_CHECK_ERR(gm_beacon_seen_new(0, GM_BEACON_WINDOW_MS, &none), -EINVAL);
    GM_CHECK(none == NULL);
    GM_CHECK_ERR(gm_beacon_seen_new(4, -1, &none), -EINVAL);
    GM_CHECK_OK(gm_beacon_seen_new(2, GM_BEACON_WINDOW_MS, &s));
    if (s == NULL)
        return;
    fill(&b, "lab", "n1", "");
    b.seq = 10;
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS));
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -EEXIST); /* the same again */
    b.seq = 9;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -EALREADY); /* lower seq */
    b.seq = 11;
    b.ts_ms = NOW_MS - 1;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -EALREADY); /* earlier ts */
    b.ts_ms = NOW_MS;
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS)); /* same ts, higher seq */
    b.seq = 0;
    b.ts_ms = NOW_MS + 1;
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS)); /* later ts, any seq (a restart) */

    /* the window, both sides, edges included; checked before the replay */
    b.seq = 100;
    b.ts_ms = NOW_MS + GM_BEACON_WINDOW_MS + 1;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -ESTALE);
    b.ts_ms = NOW_MS + GM_BEACON_WINDOW_MS;
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS));
    b.ts_ms = NOW_MS - GM_BEACON_WINDOW_MS - 1;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -ESTALE);
    b.ts_ms = INT64_MIN;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, INT64_MAX), -ESTALE);
    b.ts_ms = INT64_MAX;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, INT64_MIN), -ESTALE);
    b.ts_ms = NOW_MS + GM_BEACON_WINDOW_MS;
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -EEXIST);
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS - 1), -ESTALE);

    /* at most 2 nodes; the least recently updated goes */
    fill(&n2, "lab", "n2", "");
    fill(&n3, "lab", "n3", "");
    GM_CHECK_OK(gm_beacon_seen_check(s, &n2, NOW_MS)); /* table: n1, n2 */
    b.seq++;
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS));           /* n1 updated after n2 */
    GM_CHECK_OK(gm_beacon_seen_check(s, &n3, NOW_MS));          /* n2 evicted */
    GM_CHECK_ERR(gm_beacon_seen_check(s, &b, NOW_MS), -EEXIST); /* n1 kept */
    GM_CHECK_ERR(gm_beacon_seen_check(s, &n3, NOW_MS), -EEXIST);
    GM_CHECK_OK(gm_beacon_seen_check(s, &n2, NOW_MS)); /* forgotten: fresh again; n1 goes */
    GM_CHECK_OK(gm_beacon_seen_check(s, &b, NOW_MS));  /* forgotten too; n3 goes */
    GM_CHECK_ERR(gm_beacon_seen_check(s, &n2, NOW_MS), -EEXIST);
    GM_CHECK_OK(gm_beacon_seen_check(s, &n3, NOW_MS));
    gm_beacon_seen_free(s);
    gm_beacon_seen_free(NULL);
}

static void write_raw(const char *path, const char *text, int mode)
{
    GM_CHECK_OK(gm_id_write_file(path, text, strlen(text), mode));
}

static void test_key_files(void)
{
    char path[512], missing[512], *text = NULL;
    uint8_t k[32], k2[32];
    size_t len = 0;
    struct stat st;

    snprintf(path, sizeof(path), "%s/beacon.key", tmpdir);
    snprintf(missing, sizeof(missing), "%s/none.key", tmpdir);
    gm_beacon_key_generate(k);
    GM_CHECK_OK(gm_beacon_key_save(path, k));
    GM_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    GM_CHECK_OK(gm_id_read_file(path, 1024, &text, &len));
    GM_CHECK_EQ(len, 65);
    if (text != NULL) {
        GM_CHECK(strspn(text, "0123456789abcdef") == 64 && text[64] == '\n');
        sodium_memzero(text, len);
    }
    free(text);
    GM_CHECK_OK(gm_beacon_key_load(path, k2));
    GM_CHECK(memcmp(k, k2, 32) == 0);

    GM_CHECK(chmod(path, 0644) == 0);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), -EPERM);
    GM_CHECK(chmod(path, 0640) == 0);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), -EPERM);
    GM_CHECK_ERR(gm_beacon_key_load(missing, k2), -ENOENT);

    /* the newline is optional; nothing else is */
    write_raw(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 0600);
    GM_CHECK_OK(gm_beacon_key_load(path, k2));
    GM_CHECK(k2[0] == 0 && k2[15] == 15 && k2[31] == 31);
    write_raw(path, "garbage\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT);
    GM_CHECK(k2[31] == 0); /* cleared */
    write_raw(path, "", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT);
    write_raw(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT); /* 63 digits */
    write_raw(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f0\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT); /* 65 digits */
    write_raw(path, "000102030405060708090A0B0C0D0E0F101112131415161718191a1b1c1d1e1f\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT); /* upper case */
    write_raw(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT);
    write_raw(path, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\r\n", 0600);
    GM_CHECK_ERR(gm_beacon_key_load(path, k2), GM_ERR_FORMAT);
}

static void test_solicit_and_kind(void)
{
    uint8_t p[64], q[64], big[GM_BEACON_MAX + 1], junk[256];
    struct gm_beacon got;
    uint8_t key[32] = {0};
    char serial[41];
    size_t len = 0, len2 = 0;

    GM_CHECK_OK(gm_beacon_solicit(p, sizeof(p), &len));
    GM_CHECK_EQ(len, 24);
    GM_CHECK(memcmp(p, "GMB1\x03\x01\x00\x00", HDR) == 0);
    GM_CHECK_EQ(gm_beacon_kind(p, len), GM_BEACON_SOLICIT);
    GM_CHECK_OK(gm_beacon_solicit(q, 24, &len2));
    GM_CHECK(memcmp(p + HDR, q + HDR, 16) != 0);
    GM_CHECK_ERR(gm_beacon_solicit(q, 23, &len2), -ENOSPC);
    GM_CHECK_EQ(len2, 0);
    GM_CHECK_EQ(gm_beacon_kind(p, 23), GM_ERR_FORMAT);
    GM_CHECK_EQ(gm_beacon_kind(p, 25), GM_ERR_FORMAT);
    GM_CHECK_EQ(gm_beacon_kind(p, 8), GM_ERR_FORMAT);
    GM_CHECK_ERR(gm_beacon_open_member(p, len, key, NULL, &got, serial), GM_ERR_FORMAT);
    GM_CHECK_ERR(gm_beacon_open_join(p, len, key, &got), GM_ERR_FORMAT);

    /* garbage and near misses of the header */
    GM_CHECK_EQ(gm_beacon_kind(NULL, 0), GM_ERR_FORMAT);
    GM_CHECK_EQ(gm_beacon_kind((const uint8_t *)"GMB1", 4), GM_ERR_FORMAT);
    memset(q, 0, sizeof(q));
    memcpy(q, "GMB1\x01\x01\x00\x00", HDR);
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_BEACON_MEMBER);
    GM_CHECK_EQ(gm_beacon_kind(q, 47), GM_ERR_FORMAT); /* shorter than header + nonce + tag */
    q[4] = 2;
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_BEACON_JOIN);
    q[4] = 0;
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_ERR_FORMAT);
    q[4] = 4;
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_ERR_FORMAT);
    q[4] = 1;
    q[5] = 2; /* version */
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_ERR_FORMAT);
    q[5] = 1;
    q[7] = 1; /* reserved */
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_ERR_FORMAT);
    q[7] = 0;
    q[0] = 'g';
    GM_CHECK_EQ(gm_beacon_kind(q, 48), GM_ERR_FORMAT);
    memset(big, 0, sizeof(big));
    memcpy(big, "GMB1\x01\x01\x00\x00", HDR);
    GM_CHECK_EQ(gm_beacon_kind(big, GM_BEACON_MAX), GM_BEACON_MEMBER);
    GM_CHECK_EQ(gm_beacon_kind(big, GM_BEACON_MAX + 1), GM_ERR_FORMAT);
    for (int i = 0; i < 1000; i++) {
        randombytes_buf(junk, sizeof(junk));
        GM_CHECK_EQ(gm_beacon_kind(junk, 1 + (size_t)i % sizeof(junk)), GM_ERR_FORMAT);
    }
}

int main(void)
{
    char cmd[300];
    int rc;

    if (sodium_init() < 0)
        return 1;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gm-test-beacon-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return 1;
    GM_TEST_RUN(test_member_round_trip);
    GM_TEST_RUN(test_join);
    GM_TEST_RUN(test_member_damage);
    GM_TEST_RUN(test_member_forgeries);
    GM_TEST_RUN(test_replay);
    GM_TEST_RUN(test_key_files);
    GM_TEST_RUN(test_solicit_and_kind);
    rc = gm_test_finish("test_beacon");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
