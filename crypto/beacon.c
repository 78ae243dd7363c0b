/*
 * crypto/beacon.c - see beacon.h.  libsodium seals, OpenSSL EVP signs and
 * verifies (the node key is an EVP_PKEY).
 *
 * Wire layout, integers big-endian:
 *   header   "GMB1" | u8 kind | u8 version (1) | u16 0                 8 bytes, clear
 *   MEMBER   header | nonce[24] | seal(bkey, fields | cert | sig[64])
 *   JOIN     header | nonce[24] | seal(jkey, fields)
 *   SOLICIT  header | random[16]                                       exactly 24 bytes
 *   fields   i64 ts_ms | u64 seq | u32 flags | u16 port
 *            | u8 n | host[n] | u8 n | cluster[n] | u8 n | node[n]
 *   cert     u16 n | certificate DER[n]                                MEMBER only
 *   sig      Ed25519 by the node key over header | fields | cert
 *   seal     XChaCha20-Poly1305-IETF, the header as associated data (tag: 16 bytes)
 *
 * Choices:
 * - The encoding is canonical: the decoder accepts exactly what the encoder
 *   writes (one validation for both: names per gm_id_name_valid, host "" or an
 *   IPv4/IPv6 literal, port != 0, no NUL inside a string, no trailing byte),
 *   so whatever opens re-encodes to the same bytes (fuzz_beacon checks it).
 * - gm_beacon_kind already refuses datagrams that cannot be of their kind:
 *   over GM_BEACON_MAX, MEMBER/JOIN shorter than header + nonce + tag,
 *   SOLICIT other than 24 bytes.
 * - Sealing trusts the caller's cert and key (it does not check that they
 *   match or name b's cluster/node); the receiver checks all of it.  The
 *   certificate's dates are not checked on open: a beacon is a hint and TLS
 *   checks them before anything is trusted.
 * - The join-key label is hashed without its NUL (23 bytes).
 * - Key files: written as 64 lower-case hex digits and "\n"; on load the
 *   newline is optional, anything else is GM_ERR_FORMAT.
 * - Replay table: a linear scan (max_nodes is about a cluster's size); the
 *   least recently updated entry goes when a new node needs a slot.
 *
 * Pure functions plus gm_beacon_seen (one owner thread).
 */
#include "crypto/beacon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sodium.h>

#include "common/log.h"
#include "crypto/internal.h"

#define MAGIC "GMB1"
#define VERSION 1
#define HDR_LEN 8
#define NONCE_LEN crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_LEN crypto_aead_xchacha20poly1305_ietf_ABYTES
#define SIG_LEN 64
#define SOLICIT_LEN (HDR_LEN + 16)
#define SEALED_MIN (HDR_LEN + NONCE_LEN + TAG_LEN)
#define PLAIN_MAX (GM_BEACON_MAX - SEALED_MIN)
#define KEY_HEX_LEN (2 * GM_BEACON_KEY_LEN)
#define SEEN_MAX_NODES 65536

_Static_assert(GM_BEACON_KEY_LEN == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "key size");
_Static_assert(NONCE_LEN == 24 && TAG_LEN == 16, "XChaCha20-Poly1305-IETF sizes");

/* --- header --------------------------------------------------------------- */

static void put_header(uint8_t *p, enum gm_beacon_kind kind)
{
    memcpy(p, MAGIC, 4);
    p[4] = (uint8_t)kind;
    p[5] = VERSION;
    p[6] = 0;
    p[7] = 0;
}

int gm_beacon_kind(const uint8_t *p, size_t len)
{
    if (len < HDR_LEN || len > GM_BEACON_MAX || memcmp(p, MAGIC, 4) != 0 || p[5] != VERSION ||
        p[6] != 0 || p[7] != 0)
        return GM_ERR_FORMAT;
    switch (p[4]) {
    case GM_BEACON_MEMBER:
    case GM_BEACON_JOIN:
        return len >= SEALED_MIN ? p[4] : GM_ERR_FORMAT;
    case GM_BEACON_SOLICIT:
        return len == SOLICIT_LEN ? p[4] : GM_ERR_FORMAT;
    default:
        return GM_ERR_FORMAT;
    }
}

/* --- fields --------------------------------------------------------------- */

struct writer {
    uint8_t *p;
    size_t cap, n;
    int full; /* something did not fit */
};

struct reader {
    const uint8_t *p;
    size_t left;
};

static void put_bytes(struct writer *w, const void *src, size_t n)
{
    if (w->full || w->cap - w->n < n) {
        w->full = 1;
        return;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void put_be(struct writer *w, uint64_t v, size_t n)
{
    uint8_t b[8];
    size_t i;

    for (i = n; i > 0; i--) {
        b[i - 1] = (uint8_t)v;
        v >>= 8;
    }
    put_bytes(w, b, n);
}

static void put_str(struct writer *w, const char *s)
{
    size_t n = strlen(s); /* validated: shorter than 256 */

    put_be(w, n, 1);
    put_bytes(w, s, n);
}

static int take(struct reader *r, size_t n, const uint8_t **out)
{
    if (r->left < n)
        return GM_ERR_FORMAT;
    *out = r->p;
    r->p += n;
    r->left -= n;
    return 0;
}

static int get_be(struct reader *r, size_t n, uint64_t *v)
{
    const uint8_t *p;
    size_t i;

    *v = 0;
    if (take(r, n, &p) != 0)
        return GM_ERR_FORMAT;
    for (i = 0; i < n; i++)
        *v = *v << 8 | p[i];
    return 0;
}

/* u8 length | bytes into dst (size bytes with its NUL); no NUL inside. */
static int get_str(struct reader *r, char *dst, size_t size)
{
    const uint8_t *p;
    uint64_t n;

    if (get_be(r, 1, &n) != 0 || n >= size || take(r, (size_t)n, &p) != 0 ||
        memchr(p, '\0', (size_t)n) != NULL)
        return GM_ERR_FORMAT;
    memcpy(dst, p, (size_t)n);
    dst[n] = '\0';
    return 0;
}

static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

static int host_valid(const char *h)
{
    uint8_t addr[16];

    if (h[0] == '\0')
        return 1;
    return inet_pton(AF_INET, h, addr) == 1 || inet_pton(AF_INET6, h, addr) == 1;
}

/* What both the encoder and the decoder require of the fields. */
static int fields_valid(const struct gm_beacon *b)
{
    return terminated(b->cluster, sizeof(b->cluster)) && terminated(b->node, sizeof(b->node)) &&
           terminated(b->host, sizeof(b->host)) && gm_id_name_valid(b->cluster) &&
           gm_id_name_valid(b->node) && host_valid(b->host) && b->port != 0;
}

int gm_beacon_fields_encode(const struct gm_beacon *b, const uint8_t *der, size_t der_len,
                            uint8_t *out, size_t cap, size_t *len)
{
    struct writer w = {.p = out, .cap = cap};

    *len = 0;
    if (!fields_valid(b) || (der != NULL && (der_len == 0 || der_len > UINT16_MAX)))
        return -EINVAL;
    put_be(&w, (uint64_t)b->ts_ms, 8);
    put_be(&w, b->seq, 8);
    put_be(&w, b->flags, 4);
    put_be(&w, b->port, 2);
    put_str(&w, b->host);
    put_str(&w, b->cluster);
    put_str(&w, b->node);
    if (der != NULL) {
        put_be(&w, der_len, 2);
        put_bytes(&w, der, der_len);
    }
    if (w.full)
        return -ENOSPC;
    *len = w.n;
    return 0;
}

int gm_beacon_fields_decode(enum gm_beacon_kind kind, const uint8_t *p, size_t n,
                            struct gm_beacon *b, const uint8_t **der, size_t *der_len)
{
    struct reader r = {.p = p, .left = n};
    struct gm_beacon t;
    uint64_t ts, seq, flags, port, cn = 0;

    memset(b, 0, sizeof(*b));
    memset(&t, 0, sizeof(t));
    *der = NULL;
    *der_len = 0;
    if (kind != GM_BEACON_MEMBER && kind != GM_BEACON_JOIN)
        return -EINVAL;
    if (get_be(&r, 8, &ts) != 0 || get_be(&r, 8, &seq) != 0 || get_be(&r, 4, &flags) != 0 ||
        get_be(&r, 2, &port) != 0 || get_str(&r, t.host, sizeof(t.host)) != 0 ||
        get_str(&r, t.cluster, sizeof(t.cluster)) != 0 || get_str(&r, t.node, sizeof(t.node)) != 0)
        return GM_ERR_FORMAT;
    if (kind == GM_BEACON_MEMBER && (get_be(&r, 2, &cn) != 0 || cn == 0 || take(&r, cn, der) != 0))
        return GM_ERR_FORMAT;
    t.kind = kind;
    t.ts_ms = (int64_t)ts;
    t.seq = seq;
    t.flags = (uint32_t)flags;
    t.port = (uint16_t)port;
    if (r.left != 0 || !fields_valid(&t)) {
        *der = NULL;
        return GM_ERR_FORMAT;
    }
    *der_len = (size_t)cn;
    *b = t;
    return 0;
}

/* --- seal ----------------------------------------------------------------- */

int gm_beacon_seal_raw(enum gm_beacon_kind kind, const uint8_t key[GM_BEACON_KEY_LEN],
                       const uint8_t *plain, size_t n, uint8_t *out, size_t cap, size_t *len)
{
    unsigned long long clen = 0;

    *len = 0;
    if (n > PLAIN_MAX || SEALED_MIN + n > cap)
        return -ENOSPC;
    put_header(out, kind);
    randombytes_buf(out + HDR_LEN, NONCE_LEN);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + HDR_LEN + NONCE_LEN, &clen, plain, n, out,
                                               HDR_LEN, NULL, out + HDR_LEN, key);
    *len = HDR_LEN + NONCE_LEN + (size_t)clen;
    return 0;
}

/* Opens a sealed beacon of kind: buf = header | plaintext (*n bytes of it). */
static int unseal(enum gm_beacon_kind kind, const uint8_t *p, size_t len,
                  const uint8_t key[GM_BEACON_KEY_LEN], uint8_t buf[GM_BEACON_MAX], size_t *n)
{
    unsigned long long m = 0;

    *n = 0;
    if (gm_beacon_kind(p, len) != (int)kind)
        return GM_ERR_FORMAT;
    memcpy(buf, p, HDR_LEN);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(buf + HDR_LEN, &m, NULL, p + HDR_LEN + NONCE_LEN,
                                                   len - HDR_LEN - NONCE_LEN, p, HDR_LEN,
                                                   p + HDR_LEN, key) != 0)
        return GM_ERR_AUTH;
    *n = (size_t)m;
    return 0;
}

/* --- signature and certificate -------------------------------------------- */

static int sign(const struct gm_key *key, const uint8_t *msg, size_t n, uint8_t sig[SIG_LEN])
{
    EVP_PKEY *pk = gm_id_key_pkey(key);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t slen = SIG_LEN;
    int ok;

    if (ctx == NULL)
        return -ENOMEM;
    ok = EVP_PKEY_get_id(pk) == EVP_PKEY_ED25519 &&
         EVP_DigestSignInit(ctx, NULL, NULL, NULL, pk) == 1 &&
         EVP_DigestSign(ctx, sig, &slen, msg, n) == 1 && slen == SIG_LEN;
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        gm_crypto_log_openssl("beacon-sign");
        return -EINVAL;
    }
    return 0;
}

static int verify(X509 *x, const uint8_t *msg, size_t n, const uint8_t sig[SIG_LEN])
{
    EVP_PKEY *pk = X509_get0_pubkey(x);
    EVP_MD_CTX *ctx;
    int ok;

    if (pk == NULL || EVP_PKEY_get_id(pk) != EVP_PKEY_ED25519) {
        ERR_clear_error();
        return GM_ERR_AUTH;
    }
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return -ENOMEM;
    ok = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pk) == 1 &&
         EVP_DigestVerify(ctx, sig, SIG_LEN, msg, n) == 1;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return ok ? 0 : GM_ERR_AUTH;
}

static int cert_der(const struct gm_cert *cert, uint8_t *out, size_t cap, size_t *len)
{
    X509 *x = gm_id_cert_x509(cert);
    unsigned char *q = out;
    int n = i2d_X509(x, NULL);

    *len = 0;
    if (n <= 0) {
        gm_crypto_log_openssl("beacon-cert-encode");
        return -EINVAL;
    }
    if ((size_t)n > cap)
        return -ENOSPC;
    if (i2d_X509(x, &q) != n) {
        gm_crypto_log_openssl("beacon-cert-encode");
        return -EINVAL;
    }
    *len = (size_t)n;
    return 0;
}

/* The certificate was issued by ca and names b's cluster and node; ca names b's cluster. */
static int check_names(const struct gm_cert *ca, const struct gm_cert *c, const struct gm_beacon *b)
{
    char cl[GM_ID_NAME_MAX + 1], nd[GM_ID_NAME_MAX + 1];
    char ca_cl[GM_ID_NAME_MAX + 1], ca_nd[GM_ID_NAME_MAX + 1];

    if (gm_id_cert_check_issued(ca, c) != 0 || gm_id_cert_identity(c, cl, nd) != 0 ||
        gm_id_cert_identity(ca, ca_cl, ca_nd) != 0)
        return GM_ERR_AUTH;
    if (strcmp(cl, b->cluster) != 0 || strcmp(nd, b->node) != 0 || strcmp(ca_cl, b->cluster) != 0)
        return GM_ERR_AUTH;
    return 0;
}

/* msg = header | fields | cert, signed by the certificate in der. */
static int check_sender(const struct gm_cert *ca, const struct gm_beacon *b, const uint8_t *der,
                        size_t der_len, const uint8_t *msg, size_t msg_len,
                        const uint8_t sig[SIG_LEN], char serial[41])
{
    const unsigned char *q = der;
    X509 *x = d2i_X509(NULL, &q, (long)der_len);
    struct gm_cert *c = NULL;
    int err;

    if (x == NULL || q != der + der_len) {
        ERR_clear_error();
        X509_free(x);
        return GM_ERR_FORMAT;
    }
    err = gm_id_cert_wrap(x, &c);
    X509_free(x); /* c holds its own reference */
    if (err == 0)
        err = check_names(ca, c, b);
    if (err == 0)
        err = verify(gm_id_cert_x509(c), msg, msg_len, sig);
    if (err == 0)
        err = gm_id_cert_serial(c, serial);
    gm_id_cert_free(c);
    return err;
}

/* --- MEMBER and JOIN ------------------------------------------------------ */

int gm_beacon_seal_member(const struct gm_beacon *b, const struct gm_cert *cert,
                          const struct gm_key *key, const uint8_t bkey[GM_BEACON_KEY_LEN],
                          uint8_t *out, size_t cap, size_t *len)
{
    uint8_t der[PLAIN_MAX], buf[HDR_LEN + PLAIN_MAX]; /* buf: header | fields | sig */
    size_t der_len = 0, n = 0;
    int err;

    *len = 0;
    err = cert_der(cert, der, sizeof(der), &der_len);
    put_header(buf, GM_BEACON_MEMBER);
    if (err == 0)
        err = gm_beacon_fields_encode(b, der, der_len, buf + HDR_LEN, PLAIN_MAX - SIG_LEN, &n);
    if (err == 0)
        err = sign(key, buf, HDR_LEN + n, buf + HDR_LEN + n);
    if (err == 0)
        err = gm_beacon_seal_raw(GM_BEACON_MEMBER, bkey, buf + HDR_LEN, n + SIG_LEN, out, cap, len);
    sodium_memzero(buf, sizeof(buf));
    return err;
}

int gm_beacon_open_member(const uint8_t *p, size_t len, const uint8_t bkey[GM_BEACON_KEY_LEN],
                          const struct gm_cert *ca, struct gm_beacon *b, char serial[41])
{
    uint8_t buf[GM_BEACON_MAX];
    struct gm_beacon t;
    const uint8_t *der = NULL;
    size_t n = 0, der_len = 0, signed_len = 0;
    int err;

    memset(b, 0, sizeof(*b));
    serial[0] = '\0';
    err = unseal(GM_BEACON_MEMBER, p, len, bkey, buf, &n);
    if (err == 0 && n < SIG_LEN)
        err = GM_ERR_FORMAT;
    if (err == 0) {
        signed_len = HDR_LEN + n - SIG_LEN; /* header | fields | cert */
        err = gm_beacon_fields_decode(GM_BEACON_MEMBER, buf + HDR_LEN, n - SIG_LEN, &t, &der,
                                      &der_len);
    }
    if (err == 0)
        err = check_sender(ca, &t, der, der_len, buf, signed_len, buf + signed_len, serial);
    if (err == 0)
        *b = t;
    else
        serial[0] = '\0';
    sodium_memzero(buf, sizeof(buf));
    return err;
}

void gm_beacon_join_key(const uint8_t v[GM_TOKEN_VERIFIER_LEN], uint8_t jkey[GM_BEACON_KEY_LEN])
{
    static const char label[] = "gradmesh-beacon-join-v1";

    crypto_generichash(jkey, GM_BEACON_KEY_LEN, (const unsigned char *)label, sizeof(label) - 1, v,
                       GM_TOKEN_VERIFIER_LEN);
}

int gm_beacon_seal_join(const struct gm_beacon *b, const uint8_t jkey[GM_BEACON_KEY_LEN],
                        uint8_t *out, size_t cap, size_t *len)
{
    uint8_t plain[PLAIN_MAX];
    size_t n = 0;
    int err;

    *len = 0;
    err = gm_beacon_fields_encode(b, NULL, 0, plain, sizeof(plain), &n);
    if (err == 0)
        err = gm_beacon_seal_raw(GM_BEACON_JOIN, jkey, plain, n, out, cap, len);
    sodium_memzero(plain, n);
    return err;
}

int gm_beacon_open_join(const uint8_t *p, size_t len, const uint8_t jkey[GM_BEACON_KEY_LEN],
                        struct gm_beacon *b)
{
    uint8_t buf[GM_BEACON_MAX];
    const uint8_t *der = NULL;
    size_t n = 0, der_len = 0;
    int err;

    memset(b, 0, sizeof(*b));
    err = unseal(GM_BEACON_JOIN, p, len, jkey, buf, &n);
    if (err == 0)
        err = gm_beacon_fields_decode(GM_BEACON_JOIN, buf + HDR_LEN, n, b, &der, &der_len);
    sodium_memzero(buf, sizeof(buf));
    return err;
}

int gm_beacon_solicit(uint8_t *out, size_t cap, size_t *len)
{
    *len = 0;
    if (cap < SOLICIT_LEN)
        return -ENOSPC;
    put_header(out, GM_BEACON_SOLICIT);
    randombytes_buf(out + HDR_LEN, SOLICIT_LEN - HDR_LEN);
    *len = SOLICIT_LEN;
    return 0;
}

/* --- key files ------------------------------------------------------------ */

void gm_beacon_key_generate(uint8_t k[GM_BEACON_KEY_LEN])
{
    randombytes_buf(k, GM_BEACON_KEY_LEN);
}

int gm_beacon_key_save(const char *path, const uint8_t k[GM_BEACON_KEY_LEN])
{
    char hex[KEY_HEX_LEN + 1];
    int err;

    sodium_bin2hex(hex, sizeof(hex), k, GM_BEACON_KEY_LEN);
    hex[KEY_HEX_LEN] = '\n'; /* in place of the NUL: the file is hex + "\n" */
    err = gm_id_write_file(path, hex, sizeof(hex), 0600);
    sodium_memzero(hex, sizeof(hex));
    return err;
}

/* 64 lower-case hex digits, then an optional "\n"; no branch on the digits. */
static int key_parse(const char *s, size_t n, uint8_t k[GM_BEACON_KEY_LEN])
{
    unsigned bad = 0;
    size_t i, got = 0;

    if (n == KEY_HEX_LEN + 1 && s[KEY_HEX_LEN] == '\n')
        n--;
    if (n != KEY_HEX_LEN)
        return GM_ERR_FORMAT;
    for (i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        bad |= (unsigned)(c - '0' > 9) & (unsigned)(c - 'a' > 5);
    }
    if (bad != 0 || sodium_hex2bin(k, GM_BEACON_KEY_LEN, s, n, NULL, &got, NULL) != 0 ||
        got != GM_BEACON_KEY_LEN)
        return GM_ERR_FORMAT;
    return 0;
}

int gm_beacon_key_load(const char *path, uint8_t k[GM_BEACON_KEY_LEN])
{
    char *text = NULL;
    size_t len = 0;
    int err;

    sodium_memzero(k, GM_BEACON_KEY_LEN);
    err = gm_id_read_private_file(path, KEY_HEX_LEN + 1, &text, &len);
    if (err == -EFBIG)
        err = GM_ERR_FORMAT;
    if (err == 0)
        err = key_parse(text, len, k);
    if (err != 0)
        sodium_memzero(k, GM_BEACON_KEY_LEN);
    if (text != NULL)
        sodium_memzero(text, len);
    free(text);
    return err;
}

/* --- replay filter -------------------------------------------------------- */

struct seen_entry {
    char node[GM_ID_NAME_MAX + 1];
    int64_t ts_ms;    /* last accepted (ts_ms, seq) */
    uint64_t seq;     /* ... from this node */
    uint64_t updated; /* s->clock when last accepted */
};

struct gm_beacon_seen {
    struct seen_entry *e; /* owned, n used of max */
    size_t n, max;
    int64_t window_ms;
    uint64_t clock; /* counts accepted beacons */
};

int gm_beacon_seen_new(size_t max_nodes, int64_t window_ms, struct gm_beacon_seen **out)
{
    struct gm_beacon_seen *s;

    *out = NULL;
    if (max_nodes == 0 || max_nodes > SEEN_MAX_NODES || window_ms < 0)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->e = calloc(max_nodes, sizeof(*s->e));
    if (s->e == NULL) {
        free(s);
        return -ENOMEM;
    }
    s->max = max_nodes;
    s->window_ms = window_ms;
    *out = s;
    return 0;
}

void gm_beacon_seen_free(struct gm_beacon_seen *s)
{
    if (s == NULL)
        return;
    free(s->e);
    free(s);
}

/* |a - b| without overflow. */
static uint64_t distance(int64_t a, int64_t b)
{
    return a >= b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a;
}

/* The entry for node: its own, a free one, or the least recently updated. */
static struct seen_entry *seen_slot(struct gm_beacon_seen *s, const char *node, int *known)
{
    struct seen_entry *old = &s->e[0];
    size_t i;

    *known = 0;
    for (i = 0; i < s->n; i++) {
        if (strcmp(s->e[i].node, node) == 0) {
            *known = 1;
            return &s->e[i];
        }
        if (s->e[i].updated < old->updated)
            old = &s->e[i];
    }
    if (s->n < s->max)
        old = &s->e[s->n++];
    return old;
}

int gm_beacon_seen_check(struct gm_beacon_seen *s, const struct gm_beacon *b, int64_t now_ms)
{
    struct seen_entry *e;
    int known;

    if (!terminated(b->node, sizeof(b->node)))
        return -EINVAL;
    if (distance(b->ts_ms, now_ms) > (uint64_t)s->window_ms)
        return -ESTALE;
    e = seen_slot(s, b->node, &known);
    if (known && b->ts_ms == e->ts_ms && b->seq == e->seq)
        return -EEXIST; /* the very beacon again: a second path, or a replay of the last */
    if (known && (b->ts_ms < e->ts_ms || (b->ts_ms == e->ts_ms && b->seq < e->seq)))
        return -EALREADY;
    if (!known)
        memcpy(e->node, b->node, sizeof(e->node));
    e->ts_ms = b->ts_ms;
    e->seq = b->seq;
    e->updated = ++s->clock;
    return 0;
}
