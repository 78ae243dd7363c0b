/*
 * crypto/tls.c - see tls.h.
 *
 * Verification happens in one place, verify_chain() (SSL_CTX cert verify
 * callback), for every role: members run X509_verify_cert against the
 * CA-only store, then the cluster and denylist checks; joiners run the pin
 * check and then X509_verify_cert against a store holding the pinned CA.
 * Joins are told apart in the ClientHello callback (ALPN), before the server
 * decides whether to send a CertificateRequest.
 *
 * After the handshake the application records are sealed and opened by
 * crypto/record.c, not by OpenSSL (the reason is in record.h).  OpenSSL
 * hands over the two application traffic secrets through its key-log
 * callback, the only way OpenSSL 3.0 gives them out; they are kept in this
 * struct until the handshake ends, turned into keys and wiped.  Both
 * directions start at sequence number 0: the engine writes no application
 * data before its handshake is done, sends no session tickets, and reads
 * without read-ahead, so OpenSSL has neither sealed nor opened an application
 * record when it hands over.  If the secrets are missing (a build whose
 * OpenSSL does not log them) the engine keeps OpenSSL's record layer: the
 * wire is the same either way.
 *
 * Key updates (RFC 8446 4.6.3): each side moves its write key to the next
 * generation before it seals more than rekey_after records under one key
 * (2^24 by default, under the 2^24.5 of RFC 8446 5.5 for AES-GCM; tests lower
 * it), and answers a peer's update_requested with its own update before its
 * next data.  A peer that never updates on its own (OpenSSL's record layer
 * does not) is asked to once this side has opened rekey_after of its records
 * under one key.  A KeyUpdate must arrive whole in one record (OpenSSL sends
 * it so): a fragment is refused.  On OpenSSL's record layer (the fallback)
 * OpenSSL reads and answers updates; the engine calls SSL_key_update at the
 * same limit.
 *
 * Failures after the handshake send a fatal alert that says what was wrong
 * (bad_record_mac, decode_error, unexpected_message, record_overflow,
 * illegal_parameter), so the peer logs tampering as tampering; after a fatal
 * alert or close_notify this side writes nothing more.  Runs of records that
 * carry no data are bounded as OpenSSL bounds them: 32 empty records, 5
 * user_canceled warnings, 32 KeyUpdates in a row.
 */
#include "crypto/tls.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "crypto/internal.h"
#include "crypto/record.h"

#define DENY_MAX 4096
/* RFC 8446 5.5: at most 2^24.5 full-size records under one AES-GCM key. */
#define REKEY_AFTER (UINT64_C(1) << 24)
/* OpenSSL's bounds on runs of records that carry no data (ssl/record). */
#define MAX_EMPTY_RECORDS 32
#define MAX_WARN_ALERTS 5
#define MAX_KEY_UPDATES 32

/* Alert descriptions (RFC 8446 6). */
#define AD_CLOSE_NOTIFY 0
#define AD_UNEXPECTED_MESSAGE 10
#define AD_BAD_RECORD_MAC 20
#define AD_RECORD_OVERFLOW 22
#define AD_ILLEGAL_PARAMETER 47
#define AD_DECODE_ERROR 50
#define AD_INTERNAL_ERROR 80
#define AD_USER_CANCELED 90
#define HS_KEY_UPDATE 24

struct gm_tls_ctx {
    SSL_CTX *ssl_ctx;     /* owned */
    BIO_METHOD *bio_meth; /* owned: the engine's in-memory transport (see below) */
    char cluster[GM_ID_NAME_MAX + 1];
    uint8_t pin[GM_ID_PIN_LEN];
    int has_pin, has_cert, accept_joins;
    char (*deny)[41]; /* owned, n_deny entries */
    size_t n_deny, cap_deny;
    int openssl_records;
    uint64_t rekey_after; /* records under one write key, >= 2 */
};

struct secret {
    uint8_t b[EVP_MAX_MD_SIZE];
    size_t len;
};

struct gm_tls {
    struct gm_tls_ctx *ctx; /* borrowed */
    SSL *ssl;               /* owned; owns bio */
    BIO *bio;               /* borrowed from ssl: both directions */
    /* ciphertext in: owned leftovers first, then the borrowed feed */
    uint8_t *in; /* owned */
    size_t in_off, in_len, in_cap;
    const uint8_t *bin; /* borrowed (gm_tls_feed_borrow until gm_tls_feed_end) */
    size_t bin_len;
    /* ciphertext out, records appended until the caller takes them */
    uint8_t *out; /* owned */
    size_t out_off, out_len, out_cap;
    uint8_t *spare; /* owned: a detached block given back, for the next detach */
    size_t spare_cap;
    enum gm_tls_role role;
    int done, join;
    X509 *pinned_ca; /* owned (joiner) */
    char peer_node[GM_ID_NAME_MAX + 1];
    char peer_serial[41];
    char reason[256];
    /* the record layer after the handshake (own = 1), see the top comment */
    struct secret sec_client, sec_server; /* from the key log, wiped once used */
    int own;
    int write_closed; /* close_notify or a fatal alert sent (or received): no more writes */
    int peer_closed;  /* 0, or what every read returns from now on */
    struct gm_rec_dir tx, rx;
    uint8_t *rec; /* owned: a record whose plaintext the caller had no room for */
    size_t rec_off, rec_len;
    /* key updates (see the top comment) */
    int answer_owed;                      /* the peer asked: our update goes before our next data */
    int asked;                            /* we asked the peer and no update has come since */
    unsigned run_empty, run_warn, run_ku; /* since the last record with data */
    uint64_t fb_records; /* OpenSSL's record layer: records written under its key */
    struct gm_tls_stats st;
};

static const unsigned char alpn_member[] = "\x0agradmesh/1";
static const unsigned char alpn_join[] = "\x0fgradmesh-join/1";

__attribute__((format(printf, 2, 3))) static void set_reason(struct gm_tls *t, const char *fmt, ...)
{
    va_list ap;

    if (t->reason[0] != '\0')
        return; /* keep the first, most specific reason */
    va_start(ap, fmt);
    vsnprintf(t->reason, sizeof(t->reason), fmt, ap);
    va_end(ap);
}

static int is_denied(const struct gm_tls_ctx *c, const char *serial)
{
    size_t i;

    for (i = 0; i < c->n_deny; i++)
        if (strcmp(c->deny[i], serial) == 0)
            return 1;
    return 0;
}

/* Identity and denylist checks on a verified leaf. */
static int check_leaf(struct gm_tls *t, X509 *leaf, X509_STORE_CTX *xctx)
{
    char cluster[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1], serial[41];

    if (gm_id_x509_identity(leaf, cluster, node) != 0 || node[0] == '\0') {
        set_reason(t, "peer certificate has no gradmesh node name");
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    if (strcmp(cluster, t->ctx->cluster) != 0) {
        set_reason(t, "peer certificate is for cluster '%s', not '%s'", cluster, t->ctx->cluster);
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    if (gm_id_x509_serial(leaf, serial) != 0) {
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    if (is_denied(t->ctx, serial)) {
        set_reason(t, "peer certificate %s (node %s) is revoked", serial, node);
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_CERT_REVOKED);
        return 0;
    }
    memcpy(t->peer_node, node, sizeof(node));
    memcpy(t->peer_serial, serial, sizeof(serial));
    return 1;
}

static int verify_joiner(struct gm_tls *t, X509_STORE_CTX *xctx)
{
    STACK_OF(X509) *chain = X509_STORE_CTX_get0_untrusted(xctx);
    X509 *leaf = X509_STORE_CTX_get0_cert(xctx), *ca = NULL;
    X509_STORE *store = NULL;
    X509_STORE_CTX *vctx = NULL;
    uint8_t pin[GM_ID_PIN_LEN];
    char cluster[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
    int i, ok = 0;

    for (i = 0; chain != NULL && i < sk_X509_num(chain); i++) {
        X509 *x = sk_X509_value(chain, i);
        if (gm_id_x509_pin(x, pin) == 0 && CRYPTO_memcmp(pin, t->ctx->pin, sizeof(pin)) == 0) {
            ca = x;
            break;
        }
    }
    if (ca == NULL) {
        set_reason(t, "no certificate in the server's chain matches the token's CA pin");
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    if (X509_self_signed(ca, 1) != 1 || X509_check_ca(ca) < 1 ||
        gm_id_x509_identity(ca, cluster, node) != 0 || strcmp(cluster, t->ctx->cluster) != 0) {
        ERR_clear_error();
        set_reason(t, "the pinned certificate is not this cluster's CA");
        X509_STORE_CTX_set_error(xctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    store = X509_STORE_new();
    vctx = X509_STORE_CTX_new();
    if (store == NULL || vctx == NULL || X509_STORE_add_cert(store, ca) != 1 ||
        X509_STORE_CTX_init(vctx, store, leaf, chain) != 1)
        goto out;
    X509_STORE_CTX_set_purpose(vctx, X509_PURPOSE_SSL_SERVER);
    if (X509_verify_cert(vctx) != 1) {
        set_reason(t, "server certificate does not verify against the pinned CA: %s",
                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(vctx)));
        X509_STORE_CTX_set_error(xctx, X509_STORE_CTX_get_error(vctx));
        goto out;
    }
    if (!check_leaf(t, leaf, xctx))
        goto out;
    if (X509_up_ref(ca) != 1)
        goto out;
    X509_free(t->pinned_ca);
    t->pinned_ca = ca;
    ok = 1;
out:
    X509_STORE_CTX_free(vctx);
    X509_STORE_free(store);
    if (!ok)
        ERR_clear_error();
    return ok;
}

static int verify_chain(X509_STORE_CTX *xctx, void *arg)
{
    SSL *ssl = X509_STORE_CTX_get_ex_data(xctx, SSL_get_ex_data_X509_STORE_CTX_idx());
    struct gm_tls *t = SSL_get_app_data(ssl);

    (void)arg;
    if (t->role == GM_TLS_ROLE_JOINER)
        return verify_joiner(t, xctx);
    if (X509_verify_cert(xctx) != 1) {
        set_reason(t, "peer certificate refused: %s",
                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(xctx)));
        return 0;
    }
    return check_leaf(t, X509_STORE_CTX_get0_cert(xctx), xctx);
}

/* Does the ClientHello's ALPN list offer the join protocol? */
static int offers_join(SSL *ssl)
{
    const unsigned char *p;
    size_t len, i;

    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &p,
                                  &len) != 1 ||
        len < 2)
        return 0;
    if ((size_t)((p[0] << 8) | p[1]) != len - 2)
        return 0;
    for (i = 2; i < len;) {
        size_t n = p[i];
        if (i + 1 + n > len)
            return 0;
        if (n == sizeof(alpn_join) - 2 && memcmp(p + i + 1, alpn_join + 1, n) == 0)
            return 1;
        i += 1 + n;
    }
    return 0;
}

static int client_hello(SSL *ssl, int *al, void *arg)
{
    struct gm_tls *t = SSL_get_app_data(ssl);

    (void)al;
    (void)arg;
    if (t->ctx->accept_joins && offers_join(ssl)) {
        t->join = 1;
        SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    struct gm_tls *t = SSL_get_app_data(ssl);
    const unsigned char *want = t->join ? alpn_join : alpn_member;
    unsigned int want_len = (unsigned int)(t->join ? sizeof(alpn_join) : sizeof(alpn_member)) - 1;
    unsigned char *sel = NULL;

    (void)arg;
    if (SSL_select_next_proto(&sel, outlen, want, want_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL; /* offered ALPN, but none of ours */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static int unhex(const char *h, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = h[2 * i + (size_t)k];
            v <<= 4;
            if (ch >= '0' && ch <= '9')
                v |= ch - '0';
            else if (ch >= 'a' && ch <= 'f')
                v |= ch - 'a' + 10;
            else if (ch >= 'A' && ch <= 'F')
                v |= ch - 'A' + 10;
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

/* "LABEL <client random hex> <secret hex>": keeps the two application
 * traffic secrets of this session (see the top comment). */
static void keylog_cb(const SSL *ssl, const char *line)
{
    struct gm_tls *t = SSL_get_app_data(ssl);
    struct secret *s = NULL;
    const char *h;
    size_t n;

    if (t == NULL)
        return;
    if (strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24) == 0)
        s = &t->sec_client;
    else if (strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24) == 0)
        s = &t->sec_server;
    else
        return;
    h = strchr(line + 24, ' ');
    if (h == NULL)
        return;
    h++;
    n = strlen(h) / 2;
    if (n == 0 || n > sizeof(s->b) || strlen(h) != 2 * n || unhex(h, n, s->b) != 0) {
        OPENSSL_cleanse(s, sizeof(*s));
        return;
    }
    s->len = n;
}

static void info_cb(const SSL *ssl, int where, int ret)
{
    struct gm_tls *t = SSL_get_app_data(ssl);

    if (t == NULL || !(where & SSL_CB_ALERT))
        return;
    if ((ret & 0xff) == SSL_AD_CLOSE_NOTIFY)
        return;
    if (where & SSL_CB_READ)
        set_reason(t, "peer sent alert: %s", SSL_alert_desc_string_long(ret));
    else
        set_reason(t, "sent alert: %s", SSL_alert_desc_string_long(ret));
}

/* Counts KeyUpdates while OpenSSL's record layer is in use (gm_tls_stats). */
static void msg_cb(int write_p, int version, int content_type, const void *buf, size_t len,
                   SSL *ssl, void *arg)
{
    struct gm_tls *t = SSL_get_app_data(ssl);

    (void)version;
    (void)arg;
    if (t == NULL || content_type != SSL3_RT_HANDSHAKE || len < 1 ||
        ((const uint8_t *)buf)[0] != HS_KEY_UPDATE)
        return;
    if (write_p)
        t->st.key_updates_sent++;
    else
        t->st.key_updates_received++;
}

/*
 * The engine's memory BIO.  Like BIO_s_mem, but input can be borrowed from
 * the caller's read buffer (no copy unless bytes are left over), and output
 * accumulates in one flat buffer the caller can write from in place
 * (gm_tls_out_peek/consume): one copy per record, and one write(2) for many
 * records instead of one per 16 KiB record.
 */
static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    uint8_t *n;
    size_t c = *cap ? *cap : (256u << 10); /* one bulk chunk's records: no realloc chain */

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    n = realloc(*buf, c);
    if (n == NULL)
        return -ENOMEM;
    *buf = n;
    *cap = c;
    return 0;
}

static int bio_write(BIO *b, const char *data, size_t len, size_t *written)
{
    struct gm_tls *t = BIO_get_data(b);
    const size_t done = 0;

    BIO_clear_retry_flags(b);
    *written = 0;
    {
        if (t->out_off > 0 && t->out_len == 0)
            t->out_off = 0;
        if (grow(&t->out, &t->out_cap, t->out_off + t->out_len + (len - done)) != 0)
            return 0;
        memcpy(t->out + t->out_off + t->out_len, data + done, len - done);
        t->out_len += len - done;
    }
    *written = len;
    return 1;
}

static int bio_read(BIO *b, char *buf, size_t len, size_t *readbytes)
{
    struct gm_tls *t = BIO_get_data(b);
    size_t n = 0, k;

    BIO_clear_retry_flags(b);
    if (t->in_len > 0) {
        k = t->in_len < len ? t->in_len : len;
        memcpy(buf, t->in + t->in_off, k);
        t->in_off += k;
        t->in_len -= k;
        n += k;
    }
    if (n < len && t->bin_len > 0) {
        k = t->bin_len < len - n ? t->bin_len : len - n;
        memcpy(buf + n, t->bin, k);
        t->bin += k;
        t->bin_len -= k;
        n += k;
    }
    *readbytes = n;
    if (n == 0) {
        BIO_set_retry_read(b);
        return 0;
    }
    return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct gm_tls *t = BIO_get_data(b);

    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return t != NULL ? (long)(t->in_len + t->bin_len) : 0;
    case BIO_CTRL_WPENDING:
        return t != NULL ? (long)t->out_len : 0;
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method_new(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "gradmesh-mem");

    if (m == NULL)
        return NULL;
    if (BIO_meth_set_write_ex(m, bio_write) != 1 || BIO_meth_set_read_ex(m, bio_read) != 1 ||
        BIO_meth_set_ctrl(m, bio_ctrl) != 1 || BIO_meth_set_create(m, bio_create) != 1) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}

int gm_tls_ctx_new(const struct gm_tls_config *cfg, struct gm_tls_ctx **out)
{
    struct gm_tls_ctx *c;
    int err = -EINVAL;

    *out = NULL;
    if (cfg == NULL || !gm_id_name_valid(cfg->cluster))
        return -EINVAL;
    if ((cfg->cert == NULL) != (cfg->key == NULL) || (cfg->cert != NULL && cfg->ca == NULL))
        return -EINVAL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    snprintf(c->cluster, sizeof(c->cluster), "%s", cfg->cluster);
    c->accept_joins = cfg->accept_joins;
    if (cfg->pin != NULL) {
        memcpy(c->pin, cfg->pin, GM_ID_PIN_LEN);
        c->has_pin = 1;
    }
    c->ssl_ctx = SSL_CTX_new(TLS_method());
    c->bio_meth = bio_method_new();
    if (c->ssl_ctx == NULL || c->bio_meth == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    if (SSL_CTX_set_min_proto_version(c->ssl_ctx, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(c->ssl_ctx, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_ciphersuites(c->ssl_ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                             "TLS_CHACHA20_POLY1305_SHA256") != 1 ||
        SSL_CTX_set_num_tickets(c->ssl_ctx, 0) != 1)
        goto fail_ssl;
    SSL_CTX_set_options(c->ssl_ctx,
                        SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_session_cache_mode(c->ssl_ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_cert_verify_callback(c->ssl_ctx, verify_chain, NULL);
    SSL_CTX_set_client_hello_cb(c->ssl_ctx, client_hello, NULL);
    SSL_CTX_set_alpn_select_cb(c->ssl_ctx, alpn_select, NULL);
    SSL_CTX_set_info_callback(c->ssl_ctx, info_cb);
    c->openssl_records = cfg->openssl_records;
    c->rekey_after =
        cfg->rekey_after != 0 && cfg->rekey_after < REKEY_AFTER ? cfg->rekey_after : REKEY_AFTER;
    {
        const char *env = getenv("GM_TLS_REKEY_AFTER"); /* tests: only ever lower */
        char *end = NULL;
        unsigned long long v = env != NULL ? strtoull(env, &end, 10) : 0;
        if (env != NULL && end != env && *end == '\0' && v > 0 && v < c->rekey_after)
            c->rekey_after = v;
    }
    if (c->rekey_after < 2)
        c->rekey_after = 2; /* an update and one record */
    SSL_CTX_set_msg_callback(c->ssl_ctx, msg_cb);
    if (!c->openssl_records)
        SSL_CTX_set_keylog_callback(c->ssl_ctx, keylog_cb);
    if (cfg->ca != NULL) {
        /* The store starts empty: only the cluster CA is ever trusted. */
        if (X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ssl_ctx), gm_id_cert_x509(cfg->ca)) != 1)
            goto fail_ssl;
    }
    if (cfg->cert != NULL) {
        if (SSL_CTX_use_certificate(c->ssl_ctx, gm_id_cert_x509(cfg->cert)) != 1 ||
            SSL_CTX_use_PrivateKey(c->ssl_ctx, gm_id_key_pkey(cfg->key)) != 1 ||
            SSL_CTX_check_private_key(c->ssl_ctx) != 1 ||
            /* joiners pin the CA: send it along */
            SSL_CTX_add1_chain_cert(c->ssl_ctx, gm_id_cert_x509(cfg->ca)) != 1)
            goto fail_ssl;
        c->has_cert = 1;
    }
    *out = c;
    return 0;
fail_ssl:
    gm_crypto_log_openssl("tls-context");
fail:
    gm_tls_ctx_free(c);
    return err;
}

void gm_tls_ctx_free(struct gm_tls_ctx *c)
{
    if (c == NULL)
        return;
    SSL_CTX_free(c->ssl_ctx);
    BIO_meth_free(c->bio_meth);
    free(c->deny);
    OPENSSL_cleanse(c, sizeof(*c));
    free(c);
}

int gm_tls_ctx_set_identity(struct gm_tls_ctx *c, const struct gm_cert *cert,
                            const struct gm_key *key)
{
    if (SSL_CTX_use_certificate(c->ssl_ctx, gm_id_cert_x509(cert)) != 1 ||
        SSL_CTX_use_PrivateKey(c->ssl_ctx, gm_id_key_pkey(key)) != 1 ||
        SSL_CTX_check_private_key(c->ssl_ctx) != 1) {
        gm_crypto_log_openssl("tls-set-identity");
        return -EINVAL;
    }
    c->has_cert = 1;
    return 0;
}

int gm_tls_ctx_denied(const struct gm_tls_ctx *c, const char *serial)
{
    char low[41];
    size_t i, n = strlen(serial);

    if (n >= sizeof(low))
        return 0;
    for (i = 0; i <= n; i++)
        low[i] = (serial[i] >= 'A' && serial[i] <= 'F') ? (char)(serial[i] - 'A' + 'a') : serial[i];
    return is_denied(c, low);
}

void gm_tls_ctx_set_accept_joins(struct gm_tls_ctx *c, int on)
{
    c->accept_joins = on != 0;
}

int gm_tls_ctx_deny(struct gm_tls_ctx *c, const char *serial)
{
    size_t n = strlen(serial);

    if (n == 0 || n > 40 || strspn(serial, "0123456789abcdefABCDEF") != n)
        return -EINVAL;
    if (c->n_deny == c->cap_deny) {
        size_t cap = c->cap_deny ? 2 * c->cap_deny : 16;
        char(*d)[41];
        if (cap > DENY_MAX)
            return -ENOSPC;
        d = realloc(c->deny, cap * sizeof(*d));
        if (d == NULL)
            return -ENOMEM;
        c->deny = d;
        c->cap_deny = cap;
    }
    memcpy(c->deny[c->n_deny], serial, n + 1);
    for (size_t i = 0; i < n; i++) /* as gm_id_cert_serial writes it: lower case */
        if (c->deny[c->n_deny][i] >= 'A' && c->deny[c->n_deny][i] <= 'F')
            c->deny[c->n_deny][i] = (char)(c->deny[c->n_deny][i] - 'A' + 'a');
    c->n_deny++;
    return 0;
}

int gm_tls_new(struct gm_tls_ctx *c, enum gm_tls_role role, struct gm_tls **out)
{
    struct gm_tls *t;

    *out = NULL;
    if (role == GM_TLS_ROLE_JOINER ? !c->has_pin : !c->has_cert)
        return -EINVAL;
    if (role != GM_TLS_ROLE_CLIENT && role != GM_TLS_ROLE_SERVER && role != GM_TLS_ROLE_JOINER)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->ctx = c;
    t->role = role;
    t->st.last_alert_sent = -1;
    t->st.last_alert_received = -1;
    t->ssl = SSL_new(c->ssl_ctx);
    t->bio = BIO_new(c->bio_meth);
    if (t->ssl == NULL || t->bio == NULL) {
        BIO_free(t->bio);
        SSL_free(t->ssl);
        free(t);
        return -ENOMEM;
    }
    BIO_set_data(t->bio, t);
    SSL_set_bio(t->ssl, t->bio, t->bio); /* one reference, both directions */
    SSL_set_app_data(t->ssl, t);
    if (role == GM_TLS_ROLE_SERVER) {
        SSL_set_verify(t->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        SSL_set_accept_state(t->ssl);
    } else {
        int bad = SSL_set_alpn_protos(
            t->ssl, role == GM_TLS_ROLE_JOINER ? alpn_join : alpn_member,
            (unsigned int)(role == GM_TLS_ROLE_JOINER ? sizeof(alpn_join) : sizeof(alpn_member)) -
                1);
        SSL_set_verify(t->ssl, SSL_VERIFY_PEER, NULL);
        SSL_set_connect_state(t->ssl);
        if (bad != 0) {
            gm_tls_free(t);
            return -ENOMEM;
        }
    }
    *out = t;
    return 0;
}

void gm_tls_free(struct gm_tls *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl); /* frees the BIO, wipes keys */
    X509_free(t->pinned_ca);
    if (t->in != NULL)
        OPENSSL_cleanse(t->in, t->in_cap);
    free(t->in);
    free(t->out);
    free(t->spare);
    if (t->rec != NULL)
        OPENSSL_cleanse(t->rec, GM_REC_MAX_BODY);
    free(t->rec);
    if (t->own) {
        gm_rec_free(&t->tx);
        gm_rec_free(&t->rx);
    }
    OPENSSL_cleanse(t, sizeof(*t));
    free(t);
}

/* Keeps what is left of the borrowed input in the engine's own buffer. */
int gm_tls_feed_end(struct gm_tls *t)
{
    if (t->bin_len == 0) {
        t->bin = NULL;
        return 0;
    }
    if (t->in_len == 0)
        t->in_off = 0;
    if (t->in_off > 0) {
        memmove(t->in, t->in + t->in_off, t->in_len);
        t->in_off = 0;
    }
    if (grow(&t->in, &t->in_cap, t->in_len + t->bin_len) != 0)
        return -ENOMEM;
    memcpy(t->in + t->in_len, t->bin, t->bin_len);
    t->in_len += t->bin_len;
    t->bin = NULL;
    t->bin_len = 0;
    return 0;
}

int gm_tls_feed_borrow(struct gm_tls *t, const void *buf, size_t len)
{
    int err = gm_tls_feed_end(t); /* an earlier borrow the caller did not end */

    if (err != 0)
        return err;
    t->bin = buf;
    t->bin_len = len;
    return 0;
}

int gm_tls_feed(struct gm_tls *t, const void *buf, size_t len)
{
    int err = gm_tls_feed_borrow(t, buf, len);

    if (err == 0)
        err = gm_tls_feed_end(t);
    return err;
}

/* Maps a failed SSL call to an error code and a reason. */
static int ssl_fail(struct gm_tls *t, int ret)
{
    int e = SSL_get_error(t->ssl, ret);
    unsigned long q;

    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return GM_ERR_ABORTED;
    default:
        break;
    }
    q = ERR_peek_last_error();
    if (q != 0) {
        char buf[120];
        ERR_error_string_n(q, buf, sizeof(buf));
        set_reason(t, "%s", ERR_reason_error_string(q) ? ERR_reason_error_string(q) : buf);
    } else {
        set_reason(t, "TLS failure");
    }
    ERR_clear_error();
    if (SSL_get_verify_result(t->ssl) != X509_V_OK)
        return GM_ERR_AUTH;
    if (q != 0) {
        int r = ERR_GET_REASON(q);
        switch (r) {
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
        case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
        case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
            return GM_ERR_AUTH;
        default:
            break;
        }
    }
    return GM_ERR_PROTO;
}

/* Takes over the record layer from OpenSSL (see the top comment). */
static void start_own_records(struct gm_tls *t)
{
    const SSL_CIPHER *sc = SSL_get_current_cipher(t->ssl);
    const EVP_CIPHER *cipher =
        sc != NULL ? EVP_get_cipherbynid(SSL_CIPHER_get_cipher_nid(sc)) : NULL;
    const EVP_MD *md = sc != NULL ? SSL_CIPHER_get_handshake_digest(sc) : NULL;
    int client = t->role != GM_TLS_ROLE_SERVER;
    const struct secret *w = client ? &t->sec_client : &t->sec_server;
    const struct secret *r = client ? &t->sec_server : &t->sec_client;

    if (!t->ctx->openssl_records && cipher != NULL && md != NULL &&
        w->len == (size_t)EVP_MD_get_size(md) && r->len == w->len &&
        gm_rec_init(&t->tx, cipher, md, w->b, w->len, 1) == 0) {
        if (gm_rec_init(&t->rx, cipher, md, r->b, r->len, 0) == 0)
            t->own = 1;
        else
            gm_rec_free(&t->tx);
    }
    if (!t->own && !t->ctx->openssl_records)
        gm_debug("event=tls-records impl=openssl why=\"no traffic secrets from OpenSSL\"");
    OPENSSL_cleanse(&t->sec_client, sizeof(t->sec_client));
    OPENSSL_cleanse(&t->sec_server, sizeof(t->sec_server));
    ERR_clear_error();
}

int gm_tls_handshake(struct gm_tls *t)
{
    int r;

    if (t->done)
        return 0;
    ERR_clear_error();
    r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->done = 1;
        start_own_records(t);
        return 0;
    }
    return ssl_fail(t, r);
}

/* Seals one record of inner type `type` onto the output. */
static int seal_one(struct gm_tls *t, uint8_t type, const uint8_t *buf, size_t k, size_t pad)
{
    long r;

    if (t->out_off > 0 && t->out_len == 0)
        t->out_off = 0;
    if (grow(&t->out, &t->out_cap, t->out_off + t->out_len + k + pad + GM_REC_OVERHEAD) != 0)
        return -ENOMEM;
    r = gm_rec_seal(&t->tx, type, buf, k, pad, t->out + t->out_off + t->out_len);
    if (r < 0) {
        set_reason(t, "sealing a TLS record failed");
        return r == -EINVAL ? -EINVAL : GM_ERR_PROTO;
    }
    t->out_len += (size_t)r;
    if (t->tx.seq > t->st.tx_seq_max)
        t->st.tx_seq_max = t->tx.seq;
    return 0;
}

/* Sends KeyUpdate(request) and moves the write key on (RFC 8446 4.6.3). */
static int send_key_update(struct gm_tls *t, int request)
{
    const uint8_t ku[5] = {HS_KEY_UPDATE, 0, 0, 1, request ? 1 : 0};
    int err = seal_one(t, GM_REC_TYPE_HANDSHAKE, ku, sizeof(ku), 0);

    if (err == 0 && (err = gm_rec_update(&t->tx)) != 0)
        set_reason(t, "deriving the next write key failed");
    if (err != 0) {
        t->write_closed = 1; /* tx may be gone: nothing more can be sealed */
        return err;
    }
    t->st.key_updates_sent++;
    t->answer_owed = 0; /* any update of ours answers a request */
    if (request)
        t->asked = 1;
    return 0;
}

/* Seals len bytes of application data as records onto the output, updating
 * the write key first where it is due or the peer asked for it. */
static int own_write(struct gm_tls *t, const uint8_t *buf, size_t len)
{
    do {
        size_t k = len < GM_REC_MAX_PLAIN ? len : GM_REC_MAX_PLAIN;
        int err;
        if (t->answer_owed || t->tx.seq >= t->ctx->rekey_after - 1) {
            err = send_key_update(t, 0);
            if (err != 0)
                return err;
        }
        err = seal_one(t, GM_REC_TYPE_DATA, buf, k, 0);
        if (err != 0)
            return err;
        buf += k;
        len -= k;
    } while (len > 0);
    return 0;
}

/* A fatal alert after the handshake, unless this side has closed its writing. */
static void send_alert(struct gm_tls *t, uint8_t desc)
{
    const uint8_t a[2] = {2, desc}; /* level fatal */

    if (!t->write_closed && seal_one(t, GM_REC_TYPE_ALERT, a, sizeof(a), 0) == 0)
        t->st.last_alert_sent = desc;
    t->write_closed = 1;
}

/* Ends reading with a fatal alert: every read returns err from now on. */
__attribute__((format(printf, 4, 5))) static int read_fail(struct gm_tls *t, uint8_t desc, int err,
                                                           const char *fmt, ...)
{
    char why[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    set_reason(t, "%s (sent alert: %s)", why, SSL_alert_desc_string_long(desc));
    send_alert(t, desc);
    return t->peer_closed = err;
}

/* The next whole record as one contiguous span: from the owned leftovers,
 * topped up from the borrowed feed (at most one record's bytes are copied),
 * or in place in the borrowed feed.  *from_in says which. */
static int next_record(struct gm_tls *t, const uint8_t **p, size_t *len, int *from_in)
{
    long sz;

    if (t->in_len > 0) {
        size_t need = GM_REC_HDR;
        for (;;) {
            if (t->in_len < need) {
                size_t k = need - t->in_len < t->bin_len ? need - t->in_len : t->bin_len;
                if (t->in_off > 0) {
                    memmove(t->in, t->in + t->in_off, t->in_len);
                    t->in_off = 0;
                }
                if (grow(&t->in, &t->in_cap, t->in_len + k) != 0)
                    return -ENOMEM;
                if (k > 0) { /* the feed may be empty (bin NULL) */
                    memcpy(t->in + t->in_len, t->bin, k);
                    t->in_len += k;
                    t->bin += k;
                    t->bin_len -= k;
                }
                if (t->in_len < need)
                    return -EAGAIN;
            }
            sz = gm_rec_size(t->in + t->in_off, t->in_len);
            if (sz < 0)
                return (int)sz;
            if ((size_t)sz <= t->in_len)
                break;
            need = (size_t)sz;
        }
        *p = t->in + t->in_off;
        *from_in = 1;
    } else {
        sz = gm_rec_size(t->bin, t->bin_len);
        if (sz < 0)
            return (int)sz;
        if (sz == 0 || (size_t)sz > t->bin_len)
            return -EAGAIN;
        *p = t->bin;
        *from_in = 0;
    }
    *len = (size_t)sz;
    return 0;
}

static int alert_err(uint8_t desc)
{
    switch (desc) {
    case SSL_AD_HANDSHAKE_FAILURE:
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_ACCESS_DENIED:
    case SSL_AD_DECRYPT_ERROR:
    case SSL_AD_CERTIFICATE_REQUIRED:
        return GM_ERR_AUTH;
    default:
        return GM_ERR_PROTO;
    }
}

/* Byte i of a record's content, split over the caller's buffer and t->rec. */
static uint8_t content_at(const struct gm_tls *t, const uint8_t *buf, size_t cap, size_t i)
{
    return i < cap ? buf[i] : t->rec[i - cap];
}

/* A post-handshake handshake record: one whole KeyUpdate, or refused. */
static int on_handshake(struct gm_tls *t, const uint8_t *buf, size_t cap, size_t clen)
{
    uint8_t m[5];
    size_t body;

    if (clen == 0)
        return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO, "empty TLS handshake record");
    for (size_t i = 0; i < clen && i < sizeof(m); i++)
        m[i] = content_at(t, buf, cap, i);
    if (m[0] != HS_KEY_UPDATE)
        return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                         "peer sent post-handshake message type %u (only KeyUpdate is taken)",
                         m[0]);
    if (clen < 4)
        return read_fail(t, AD_DECODE_ERROR, GM_ERR_PROTO,
                         "KeyUpdate split across records (not taken)");
    body = (size_t)m[1] << 16 | (size_t)m[2] << 8 | m[3];
    if (body != 1 || clen != 5)
        return read_fail(t, AD_DECODE_ERROR, GM_ERR_PROTO,
                         "malformed KeyUpdate (body %zu bytes, record %zu)", body, clen);
    if (m[4] > 1)
        return read_fail(t, AD_ILLEGAL_PARAMETER, GM_ERR_PROTO, "KeyUpdate request_update %u",
                         m[4]);
    if (++t->run_ku > MAX_KEY_UPDATES)
        return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                         "more than %d KeyUpdates without data", MAX_KEY_UPDATES);
    if (gm_rec_update(&t->rx) != 0)
        return read_fail(t, AD_INTERNAL_ERROR, GM_ERR_PROTO, "deriving the next read key failed");
    t->st.key_updates_received++;
    t->asked = 0;
    if (m[4] == 1 && !t->write_closed)
        t->answer_owed = 1; /* before our next data (RFC 8446 4.6.3) */
    return 0;
}

/* An alert record: 0 to go on (user_canceled), else what reads return. */
static int on_alert(struct gm_tls *t, const uint8_t *buf, size_t cap, size_t clen)
{
    uint8_t level, desc;

    if (clen != 2)
        return read_fail(t, AD_DECODE_ERROR, GM_ERR_PROTO, "malformed TLS alert (%zu bytes)", clen);
    level = content_at(t, buf, cap, 0);
    desc = content_at(t, buf, cap, 1);
    if (level != 1 && level != 2)
        return read_fail(t, AD_ILLEGAL_PARAMETER, GM_ERR_PROTO, "TLS alert of level %u", level);
    t->st.last_alert_received = desc;
    if (desc == AD_CLOSE_NOTIFY)
        return t->peer_closed = GM_ERR_ABORTED; /* we may still write (RFC 8446 6.1) */
    if (desc == AD_USER_CANCELED && level == 1) {
        if (++t->run_warn > MAX_WARN_ALERTS)
            return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                             "more than %d user_canceled alerts", MAX_WARN_ALERTS);
        return 0; /* a close_notify follows */
    }
    /* every other alert is fatal in TLS 1.3 (RFC 8446 6.2): the session is over */
    set_reason(t, "peer sent alert: %s", SSL_alert_desc_string_long(desc));
    t->write_closed = 1;
    return t->peer_closed = alert_err(desc);
}

static int own_read(struct gm_tls *t, uint8_t *buf, size_t cap, size_t *n)
{
    for (;;) {
        const uint8_t *p = NULL;
        uint8_t type;
        size_t len = 0, clen, k;
        uint64_t seq;
        int from_in = 0, err;

        if (t->rec_len > 0) {
            k = t->rec_len < cap ? t->rec_len : cap;
            memcpy(buf, t->rec + t->rec_off, k);
            t->rec_off += k;
            t->rec_len -= k;
            *n = k;
            return 0;
        }
        if (t->peer_closed)
            return t->peer_closed;
        err = next_record(t, &p, &len, &from_in);
        if (err == GM_ERR_PROTO) {
            const uint8_t *h = t->in_len > 0 ? t->in + t->in_off : t->bin;
            return read_fail(t, gm_rec_header_alert(h), err,
                             "malformed TLS record header %02x %02x%02x length %u", h[0], h[1],
                             h[2], (unsigned)h[3] << 8 | h[4]);
        }
        if (err != 0)
            return err;
        /* straight into the caller's buffer, as much as it has room for; the rest
         * (often just the inner type byte) spills to t->rec */
        if (cap < len - GM_REC_HDR - GM_REC_TAG && t->rec == NULL &&
            (t->rec = malloc(GM_REC_MAX_BODY)) == NULL)
            return -ENOMEM;
        seq = t->rx.seq;
        err = gm_rec_open(&t->rx, p, len, buf, cap, t->rec, &clen, &type);
        if (from_in) {
            t->in_off += len;
            t->in_len -= len;
            if (t->in_len == 0)
                t->in_off = 0;
        } else {
            t->bin += len;
            t->bin_len -= len;
        }
        if (err != 0 && t->rx.seq == seq)
            return read_fail(t, AD_BAD_RECORD_MAC, GM_ERR_PROTO,
                             "TLS record %llu failed to authenticate (bad record MAC)",
                             (unsigned long long)seq);
        if (err != 0 && clen > GM_REC_MAX_PLAIN)
            return read_fail(t, AD_RECORD_OVERFLOW, GM_ERR_PROTO,
                             "TLS record of %zu bytes of content", clen);
        if (err != 0)
            return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                             "TLS record with no content type (all zeros)");
        if (t->rx.seq > t->st.rx_seq_max)
            t->st.rx_seq_max = t->rx.seq;
        if (clen == 0 && type != GM_REC_TYPE_HANDSHAKE && ++t->run_empty > MAX_EMPTY_RECORDS)
            return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                             "more than %d empty TLS records in a row", MAX_EMPTY_RECORDS);
        switch (type) {
        case GM_REC_TYPE_DATA:
            if (clen == 0)
                continue;
            t->run_empty = t->run_warn = t->run_ku = 0;
            /* a peer that never updates its key on its own (OpenSSL): ask it to */
            if (!t->asked && !t->write_closed && t->rx.seq >= t->ctx->rekey_after) {
                err = send_key_update(t, 1);
                if (err != 0)
                    return t->peer_closed = err;
            }
            if (clen > cap) { /* the part past cap waits at the start of t->rec */
                t->rec_off = 0;
                t->rec_len = clen - cap;
                clen = cap;
            }
            *n = clen;
            return 0;
        case GM_REC_TYPE_ALERT:
            err = on_alert(t, buf, cap, clen);
            if (err != 0)
                return err;
            continue;
        case GM_REC_TYPE_HANDSHAKE:
            err = on_handshake(t, buf, cap, clen);
            if (err != 0)
                return err;
            continue;
        default:
            return read_fail(t, AD_UNEXPECTED_MESSAGE, GM_ERR_PROTO,
                             "TLS record of unknown content type %u", type);
        }
    }
}

int gm_tls_read(struct gm_tls *t, void *buf, size_t cap, size_t *n)
{
    size_t got = 0;
    int r;

    *n = 0;
    if (t->own)
        return cap > 0 ? own_read(t, buf, cap, n) : -EINVAL;
    ERR_clear_error();
    r = SSL_read_ex(t->ssl, buf, cap, &got);
    if (r == 1) {
        *n = got;
        return 0;
    }
    return ssl_fail(t, 0);
}

int gm_tls_write(struct gm_tls *t, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    if (len == 0)
        return 0;
    if (t->write_closed) {
        set_reason(t, "write after close_notify or a fatal alert");
        return -EPIPE;
    }
    if (t->own)
        return own_write(t, p, len);
    if (SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN) { /* OpenSSL's layer: close_notify sent */
        set_reason(t, "write after close_notify");
        return -EPIPE;
    }
    /* OpenSSL's record layer updates no key on its own: at most rekey_after
     * records (the update included) under one key, as the engine's own */
    while (len > 0) {
        uint64_t room = t->ctx->rekey_after - 1 - t->fb_records;
        size_t k, done = 0;
        if (room == 0) {
            ERR_clear_error();
            if (SSL_key_update(t->ssl, SSL_KEY_UPDATE_NOT_REQUESTED) != 1)
                return ssl_fail(t, 0);
            t->fb_records = 0;
            room = t->ctx->rekey_after - 1;
        }
        k = room < len / GM_REC_MAX_PLAIN + 1 ? (size_t)room * GM_REC_MAX_PLAIN : len;
        if (k > len)
            k = len;
        ERR_clear_error();
        if (SSL_write_ex(t->ssl, p, k, &done) != 1 || done != k)
            return ssl_fail(t, 0);
        t->fb_records += (k + GM_REC_MAX_PLAIN - 1) / GM_REC_MAX_PLAIN;
        p += k;
        len -= k;
    }
    return 0;
}

size_t gm_tls_out_pending(const struct gm_tls *t)
{
    return t->out_len;
}

size_t gm_tls_out_peek(const struct gm_tls *t, const uint8_t **p)
{
    *p = t->out != NULL ? t->out + t->out_off : NULL; /* NULL + 0 is undefined */
    return t->out_len;
}

void gm_tls_out_consume(struct gm_tls *t, size_t n)
{
    if (n > t->out_len)
        n = t->out_len;
    t->out_off += n;
    t->out_len -= n;
    if (t->out_len == 0)
        t->out_off = 0;
}

int gm_tls_out_detach(struct gm_tls *t, struct gm_tls_block *b)
{
    memset(b, 0, sizeof(*b));
    if (t->out_len == 0)
        return -ENOENT;
    b->block = t->out;
    b->cap = t->out_cap;
    b->data = t->out + t->out_off;
    b->len = t->out_len;
    t->out = t->spare; /* NULL is fine: grow() allocates */
    t->out_cap = t->spare_cap;
    t->spare = NULL;
    t->spare_cap = 0;
    t->out_off = 0;
    t->out_len = 0;
    return 0;
}

void gm_tls_out_recycle(struct gm_tls *t, struct gm_tls_block *b)
{
    if (t != NULL && t->spare == NULL && b->cap <= (4u << 20)) {
        t->spare = b->block;
        t->spare_cap = b->cap;
    } else {
        free(b->block);
    }
    memset(b, 0, sizeof(*b));
}

size_t gm_tls_out_take(struct gm_tls *t, void *buf, size_t cap)
{
    size_t n = t->out_len < cap ? t->out_len : cap;

    if (n == 0)
        return 0; /* t->out may still be NULL */
    memcpy(buf, t->out + t->out_off, n);
    t->out_off += n;
    t->out_len -= n;
    if (t->out_len == 0)
        t->out_off = 0;
    return n;
}

void gm_tls_shutdown(struct gm_tls *t)
{
    static const uint8_t close_notify[2] = {1, AD_CLOSE_NOTIFY}; /* level warning */

    if (t->own) {
        if (!t->write_closed &&
            seal_one(t, GM_REC_TYPE_ALERT, close_notify, sizeof(close_notify), 0) == 0)
            t->st.last_alert_sent = AD_CLOSE_NOTIFY;
        t->write_closed = 1;
        return;
    }
    t->write_closed = t->done;
    ERR_clear_error();
    if (t->done)
        (void)SSL_shutdown(t->ssl);
    ERR_clear_error();
}

int gm_tls_handshake_done(const struct gm_tls *t)
{
    return t->done;
}

int gm_tls_own_records(const struct gm_tls *t)
{
    return t->own;
}

void gm_tls_get_stats(const struct gm_tls *t, struct gm_tls_stats *st)
{
    *st = t->st;
    st->tx_seq = t->own ? t->tx.seq : 0;
    st->rx_seq = t->own ? t->rx.seq : 0;
}

int gm_tls_seal_raw(struct gm_tls *t, uint8_t type, const uint8_t *content, size_t len, size_t pad)
{
    if (!t->own)
        return -EINVAL;
    return seal_one(t, type, content, len, pad);
}

int gm_tls_fork_raw(const struct gm_tls *t, struct gm_tls **out)
{
    struct gm_tls *f;
    int err;

    *out = NULL;
    if (!t->own)
        return -EINVAL;
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->ctx = t->ctx;
    f->role = t->role;
    f->done = 1;
    f->st.last_alert_sent = -1;
    f->st.last_alert_received = -1;
    err = gm_rec_init(&f->tx, t->tx.cipher, t->tx.md, t->tx.secret, t->tx.secret_len, 1);
    if (err == 0) {
        err = gm_rec_init(&f->rx, t->rx.cipher, t->rx.md, t->rx.secret, t->rx.secret_len, 0);
        if (err != 0)
            gm_rec_free(&f->tx);
    }
    if (err != 0) {
        free(f);
        return err;
    }
    f->tx.seq = t->tx.seq;
    f->rx.seq = t->rx.seq;
    f->own = 1;
    *out = f;
    return 0;
}

int gm_tls_update_tx_raw(struct gm_tls *t)
{
    if (!t->own)
        return -EINVAL;
    return gm_rec_update(&t->tx);
}

int gm_tls_is_join(const struct gm_tls *t)
{
    return t->join;
}

const char *gm_tls_peer_node(const struct gm_tls *t)
{
    return t->peer_node;
}

const char *gm_tls_peer_serial(const struct gm_tls *t)
{
    return t->peer_serial;
}

int gm_tls_peer_pubkey(const struct gm_tls *t, uint8_t pub[GM_ID_PUB_LEN])
{
    X509 *x = SSL_get0_peer_certificate(t->ssl);
    size_t n = GM_ID_PUB_LEN;

    if (x == NULL || EVP_PKEY_get_raw_public_key(X509_get0_pubkey(x), pub, &n) != 1 ||
        n != GM_ID_PUB_LEN) {
        ERR_clear_error();
        return -ENOENT;
    }
    return 0;
}

const char *gm_tls_reason(const struct gm_tls *t)
{
    return t->reason[0] ? t->reason : "no detail";
}

int gm_tls_export(struct gm_tls *t, const char *label, uint8_t *out, size_t len)
{
    if (!t->done || strncmp(label, "EXPORTER-", 9) != 0)
        return -EINVAL;
    if (SSL_export_keying_material(t->ssl, out, len, label, strlen(label), NULL, 0, 0) != 1) {
        ERR_clear_error();
        return GM_ERR_PROTO;
    }
    return 0;
}

int gm_tls_pinned_ca(const struct gm_tls *t, struct gm_cert **out)
{
    *out = NULL;
    if (t->pinned_ca == NULL)
        return -ENOENT;
    return gm_id_cert_wrap(t->pinned_ca, out);
}
