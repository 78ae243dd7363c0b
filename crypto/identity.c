/*
 * crypto/identity.c - see identity.h.  OpenSSL 3 EVP and X509 APIs.
 *
 * Certificate profile: v3, random 127-bit serial, notBefore = now - 5 min
 * (clock skew), CA: basicConstraints critical CA:TRUE pathlen:0, keyUsage
 * keyCertSign+cRLSign; node: CA:FALSE, digitalSignature, EKU serverAuth +
 * clientAuth (a node is both on its links).  Ed25519 signatures (no digest).
 */
#include "crypto/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sodium.h>

#include "common/file.h"
#include "common/log.h"
#include "crypto/internal.h"

#define URI_PREFIX "gradmesh://"

struct gm_key {
    EVP_PKEY *pkey; /* owned */
};

struct gm_cert {
    X509 *x509; /* owned */
};

void gm_crypto_log_openssl(const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256];

    if (e == 0) {
        gm_err("event=openssl what=%s detail=\"no error queued\"", what);
        return;
    }
    ERR_error_string_n(e, buf, sizeof(buf));
    gm_err("event=openssl what=%s detail=\"%s\"", what, buf);
    ERR_clear_error();
}

int gm_id_name_valid(const char *s)
{
    size_t i, n;

    if (s == NULL)
        return 0;
    n = strlen(s);
    if (n == 0 || n > GM_ID_NAME_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '-' && c != '_' && c != '.')))
            return 0;
    }
    return 1;
}

X509 *gm_id_cert_x509(const struct gm_cert *c)
{
    return c->x509;
}

EVP_PKEY *gm_id_key_pkey(const struct gm_key *k)
{
    return k->pkey;
}

int gm_id_key_generate(struct gm_key **out)
{
    struct gm_key *k;

    *out = NULL;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    k->pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (k->pkey == NULL) {
        gm_crypto_log_openssl("keygen");
        free(k);
        return -ENOMEM;
    }
    *out = k;
    return 0;
}

void gm_id_key_free(struct gm_key *k)
{
    if (k == NULL)
        return;
    EVP_PKEY_free(k->pkey); /* ecx keys: secure-clear free of the private half */
    free(k);
}

int gm_id_read_private_file(const char *path, size_t max, char **out, size_t *len)
{
    struct stat st;

    *out = NULL;
    *len = 0;
    if (stat(path, &st) != 0)
        return -errno;
    if ((st.st_mode & 077) != 0) {
        gm_err("event=key-refused path=%s reason=\"mode %03o: must be 0600\"", path,
               (unsigned)(st.st_mode & 0777));
        return -EPERM;
    }
    return gm_id_read_file(path, max, out, len);
}

/* Both are common/file.h's, kept under these names for crypto's callers. */
int gm_id_write_file(const char *path, const void *data, size_t len, int mode)
{
    return gm_file_write_atomic(path, data, len, mode);
}

int gm_id_read_file(const char *path, size_t max, char **out, size_t *len)
{
    return gm_file_read(path, max, out, len);
}

int gm_id_key_save(const struct gm_key *k, const char *path)
{
    BIO *b = BIO_new(BIO_s_mem());
    BUF_MEM *mem = NULL;
    int err;

    if (b == NULL)
        return -ENOMEM;
    if (PEM_write_bio_PrivateKey(b, k->pkey, NULL, NULL, 0, NULL, NULL) != 1) {
        gm_crypto_log_openssl("key-encode");
        err = -ENOMEM;
        goto out;
    }
    BIO_get_mem_ptr(b, &mem);
    err = gm_id_write_file(path, mem->data, mem->length, 0600);
    OPENSSL_cleanse(mem->data, mem->length);
out:
    BIO_free(b);
    return err;
}

/* The private key as PEM text (sensitive: the caller wipes and frees it). */
int gm_id_key_to_pem(const struct gm_key *k, char **pem, size_t *len)
{
    BIO *b = BIO_new(BIO_s_mem());
    BUF_MEM *mem = NULL;
    int err = 0;

    *pem = NULL;
    *len = 0;
    if (b == NULL)
        return -ENOMEM;
    if (PEM_write_bio_PrivateKey(b, k->pkey, NULL, NULL, 0, NULL, NULL) != 1) {
        gm_crypto_log_openssl("key-encode");
        err = -ENOMEM;
        goto out;
    }
    BIO_get_mem_ptr(b, &mem);
    *pem = malloc(mem->length + 1);
    if (*pem == NULL) {
        err = -ENOMEM;
        goto out;
    }
    memcpy(*pem, mem->data, mem->length);
    (*pem)[mem->length] = '\0';
    *len = mem->length;
    OPENSSL_cleanse(mem->data, mem->length);
out:
    BIO_free(b);
    return err;
}

/* An Ed25519 private key from PEM text: GM_ERR_FORMAT for anything else. */
int gm_id_key_from_pem(const char *pem, size_t len, struct gm_key **out)
{
    struct gm_key *k = NULL;
    BIO *b = NULL;
    int err = 0;

    *out = NULL;
    if (len > 64 * 1024)
        return GM_ERR_FORMAT;
    k = calloc(1, sizeof(*k));
    b = BIO_new_mem_buf(pem, (int)len);
    if (k == NULL || b == NULL) {
        err = -ENOMEM;
        goto out;
    }
    k->pkey = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    if (k->pkey == NULL || EVP_PKEY_get_id(k->pkey) != EVP_PKEY_ED25519) {
        ERR_clear_error();
        err = GM_ERR_FORMAT;
        goto out;
    }
    *out = k;
    k = NULL;
out:
    BIO_free(b);
    gm_id_key_free(k);
    return err;
}

int gm_id_key_load(const char *path, struct gm_key **out)
{
    char *pem = NULL;
    size_t len = 0;
    int err;

    *out = NULL;
    err = gm_id_read_private_file(path, 64 * 1024, &pem, &len);
    if (err != 0)
        return err;
    err = gm_id_key_from_pem(pem, len, out);
    OPENSSL_cleanse(pem, len);
    free(pem);
    return err;
}

int gm_id_key_public(const struct gm_key *k, uint8_t pub[GM_ID_PUB_LEN])
{
    size_t n = GM_ID_PUB_LEN;

    if (EVP_PKEY_get_raw_public_key(k->pkey, pub, &n) != 1 || n != GM_ID_PUB_LEN)
        return -EINVAL;
    return 0;
}

static int add_ext(X509 *issuer, X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *ext;
    int ok;

    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (ext == NULL)
        return -EINVAL;
    ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok == 1 ? 0 : -ENOMEM;
}

/* Common part: version, serial, validity, subject, public key. */
static int cert_base(X509 *x, const char *cn, EVP_PKEY *pub, int days)
{
    BIGNUM *bn = BN_new();
    X509_NAME *name = X509_get_subject_name(x);
    int err = 0;

    if (bn == NULL)
        return -ENOMEM;
    if (X509_set_version(x, 2) != 1 || BN_rand(bn, 127, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) != 1 ||
        BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) == NULL ||
        X509_gmtime_adj(X509_getm_notBefore(x), -300) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) == NULL ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1,
                                   0) != 1 ||
        X509_set_pubkey(x, pub) != 1)
        err = -ENOMEM;
    BN_free(bn);
    return err;
}

static int cert_new(struct gm_cert **out, X509 *x)
{
    struct gm_cert *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return -ENOMEM;
    c->x509 = x;
    *out = c;
    return 0;
}

int gm_id_ca_create(const char *cluster, const struct gm_key *cakey, int days, struct gm_cert **out)
{
    char cn[GM_ID_NAME_MAX + 32], uri[GM_ID_NAME_MAX + 32];
    X509 *x = NULL;
    int err;

    *out = NULL;
    if (!gm_id_name_valid(cluster) || days <= 0)
        return -EINVAL;
    snprintf(cn, sizeof(cn), "gradmesh CA %s", cluster);
    snprintf(uri, sizeof(uri), "URI:" URI_PREFIX "%s/", cluster);
    x = X509_new();
    if (x == NULL)
        return -ENOMEM;
    err = cert_base(x, cn, cakey->pkey, days);
    if (err == 0 && X509_set_issuer_name(x, X509_get_subject_name(x)) != 1)
        err = -ENOMEM;
    if (err == 0)
        err = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    if (err == 0)
        err = add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
    if (err == 0)
        err = add_ext(x, x, NID_subject_key_identifier, "hash");
    if (err == 0)
        err = add_ext(x, x, NID_subject_alt_name, uri);
    if (err == 0 && X509_sign(x, cakey->pkey, NULL) <= 0) {
        gm_crypto_log_openssl("ca-sign");
        err = -EINVAL;
    }
    if (err == 0)
        err = cert_new(out, x);
    if (err != 0)
        X509_free(x);
    return err;
}

int gm_id_cert_issue(const struct gm_cert *ca, const struct gm_key *cakey, const char *cluster,
                     const char *node, const uint8_t pub[GM_ID_PUB_LEN], int days,
                     struct gm_cert **out)
{
    char cn[GM_ID_NAME_MAX + 32], uri[2 * GM_ID_NAME_MAX + 32];
    EVP_PKEY *pk = NULL;
    X509 *x = NULL;
    int err;

    *out = NULL;
    if (!gm_id_name_valid(cluster) || !gm_id_name_valid(node) || days <= 0)
        return -EINVAL;
    pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, GM_ID_PUB_LEN);
    if (pk == NULL) {
        ERR_clear_error();
        return -EINVAL;
    }
    snprintf(cn, sizeof(cn), "%s", node);
    snprintf(uri, sizeof(uri), "URI:" URI_PREFIX "%s/%s", cluster, node);
    x = X509_new();
    if (x == NULL) {
        err = -ENOMEM;
        goto out;
    }
    err = cert_base(x, cn, pk, days);
    if (err == 0 && X509_set_issuer_name(x, X509_get_subject_name(ca->x509)) != 1)
        err = -ENOMEM;
    if (err == 0)
        err = add_ext(ca->x509, x, NID_basic_constraints, "critical,CA:FALSE");
    if (err == 0)
        err = add_ext(ca->x509, x, NID_key_usage, "critical,digitalSignature");
    if (err == 0)
        err = add_ext(ca->x509, x, NID_ext_key_usage, "serverAuth,clientAuth");
    if (err == 0)
        err = add_ext(ca->x509, x, NID_authority_key_identifier, "keyid:always");
    if (err == 0)
        err = add_ext(ca->x509, x, NID_subject_alt_name, uri);
    if (err == 0 && X509_sign(x, cakey->pkey, NULL) <= 0) {
        gm_crypto_log_openssl("cert-sign");
        err = -EINVAL;
    }
    if (err == 0)
        err = cert_new(out, x);
    if (err == 0)
        x = NULL;
out:
    X509_free(x);
    EVP_PKEY_free(pk);
    return err;
}

void gm_id_cert_free(struct gm_cert *c)
{
    if (c == NULL)
        return;
    X509_free(c->x509);
    free(c);
}

int gm_id_cert_to_pem(const struct gm_cert *c, char **pem)
{
    BIO *b = BIO_new(BIO_s_mem());
    BUF_MEM *mem = NULL;
    int err = 0;

    *pem = NULL;
    if (b == NULL)
        return -ENOMEM;
    if (PEM_write_bio_X509(b, c->x509) != 1) {
        err = -ENOMEM;
        goto out;
    }
    BIO_get_mem_ptr(b, &mem);
    *pem = malloc(mem->length + 1);
    if (*pem == NULL) {
        err = -ENOMEM;
        goto out;
    }
    memcpy(*pem, mem->data, mem->length);
    (*pem)[mem->length] = '\0';
out:
    BIO_free(b);
    return err;
}

int gm_id_cert_from_pem(const char *pem, size_t len, struct gm_cert **out)
{
    BIO *b;
    X509 *x, *extra;
    int err;

    *out = NULL;
    if (len > 64 * 1024 || len > INT32_MAX)
        return GM_ERR_FORMAT;
    b = BIO_new_mem_buf(pem, (int)len);
    if (b == NULL)
        return -ENOMEM;
    x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    extra = x != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (x == NULL || extra != NULL) {
        X509_free(x);
        X509_free(extra);
        return GM_ERR_FORMAT;
    }
    err = cert_new(out, x);
    if (err != 0)
        X509_free(x);
    return err;
}

int gm_id_cert_wrap(X509 *x, struct gm_cert **out)
{
    int err;

    *out = NULL;
    if (X509_up_ref(x) != 1)
        return -ENOMEM;
    err = cert_new(out, x);
    if (err != 0)
        X509_free(x);
    return err;
}

int gm_id_cert_dup(const struct gm_cert *c, struct gm_cert **out)
{
    int err;

    *out = NULL;
    if (X509_up_ref(c->x509) != 1)
        return -ENOMEM;
    err = cert_new(out, c->x509);
    if (err != 0)
        X509_free(c->x509);
    return err;
}

int gm_id_cert_save(const struct gm_cert *c, const char *path)
{
    char *pem = NULL;
    int err = gm_id_cert_to_pem(c, &pem);

    if (err == 0)
        err = gm_id_write_file(path, pem, strlen(pem), 0644);
    free(pem);
    return err;
}

int gm_id_cert_load(const char *path, struct gm_cert **out)
{
    char *pem = NULL;
    size_t len = 0;
    int err;

    *out = NULL;
    err = gm_id_read_file(path, 64 * 1024, &pem, &len);
    if (err == 0)
        err = gm_id_cert_from_pem(pem, len, out);
    free(pem);
    return err;
}

/* "gradmesh://<cluster>/<node>" -> parts; node may be "" (CA). */
static int parse_uri(const unsigned char *s, int n, char cluster[GM_ID_NAME_MAX + 1],
                     char node[GM_ID_NAME_MAX + 1])
{
    const size_t plen = sizeof(URI_PREFIX) - 1;
    const char *p, *slash;
    size_t rest, clen, nlen;

    if (n < 0 || (size_t)n <= plen || memcmp(s, URI_PREFIX, plen) != 0)
        return GM_ERR_AUTH;
    if (memchr(s, '\0', (size_t)n) != NULL)
        return GM_ERR_AUTH;
    p = (const char *)s + plen;
    rest = (size_t)n - plen;
    slash = memchr(p, '/', rest);
    if (slash == NULL)
        return GM_ERR_AUTH;
    clen = (size_t)(slash - p);
    nlen = rest - clen - 1;
    if (clen == 0 || clen > GM_ID_NAME_MAX || nlen > GM_ID_NAME_MAX)
        return GM_ERR_AUTH;
    memcpy(cluster, p, clen);
    cluster[clen] = '\0';
    memcpy(node, slash + 1, nlen);
    node[nlen] = '\0';
    if (!gm_id_name_valid(cluster) || (nlen > 0 && !gm_id_name_valid(node)))
        return GM_ERR_AUTH;
    return 0;
}

int gm_id_x509_identity(X509 *x, char cluster[GM_ID_NAME_MAX + 1], char node[GM_ID_NAME_MAX + 1])
{
    GENERAL_NAMES *names;
    int i, found = 0, err = GM_ERR_AUTH;

    cluster[0] = '\0';
    node[0] = '\0';
    names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    if (names == NULL)
        return GM_ERR_AUTH;
    for (i = 0; i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, i);
        if (gn->type != GEN_URI)
            continue;
        found++;
        err = parse_uri(ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier),
                        ASN1_STRING_length(gn->d.uniformResourceIdentifier), cluster, node);
    }
    GENERAL_NAMES_free(names);
    if (found != 1)
        err = GM_ERR_AUTH; /* exactly one gradmesh URI, or the name is ambiguous */
    if (err != 0) {
        cluster[0] = '\0';
        node[0] = '\0';
    }
    return err;
}

int gm_id_cert_identity(const struct gm_cert *c, char cluster[GM_ID_NAME_MAX + 1],
                        char node[GM_ID_NAME_MAX + 1])
{
    return gm_id_x509_identity(c->x509, cluster, node);
}

int gm_id_x509_pin(X509 *x, uint8_t pin[GM_ID_PIN_LEN])
{
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(X509_get0_pubkey(x), &der);

    if (n <= 0)
        return -EINVAL;
    crypto_hash_sha256(pin, der, (unsigned long long)n);
    OPENSSL_free(der);
    return 0;
}

int gm_id_cert_pin(const struct gm_cert *c, uint8_t pin[GM_ID_PIN_LEN])
{
    return gm_id_x509_pin(c->x509, pin);
}

int gm_id_x509_serial(X509 *x, char out[41])
{
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    char *hex;
    size_t i, n;

    out[0] = '\0';
    if (bn == NULL)
        return -ENOMEM;
    hex = BN_bn2hex(bn);
    BN_free(bn);
    if (hex == NULL)
        return -ENOMEM;
    n = strlen(hex);
    if (n > 40) {
        OPENSSL_free(hex);
        return GM_ERR_FORMAT;
    }
    for (i = 0; i <= n; i++)
        out[i] = (hex[i] >= 'A' && hex[i] <= 'F') ? (char)(hex[i] - 'A' + 'a') : hex[i];
    OPENSSL_free(hex);
    return 0;
}

int gm_id_cert_serial(const struct gm_cert *c, char out[41])
{
    return gm_id_x509_serial(c->x509, out);
}

int gm_id_cert_seconds_left(const struct gm_cert *c, int64_t *out)
{
    int days = 0, secs = 0;

    *out = 0;
    if (ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(c->x509)) != 1)
        return GM_ERR_FORMAT;
    *out = (int64_t)days * 86400 + secs;
    return 0;
}

int gm_id_cert_needs_renewal(const struct gm_cert *c)
{
    int64_t left = 0;

    if (gm_id_cert_seconds_left(c, &left) != 0)
        return 1;
    return left < GM_ID_RENEW_BEFORE_S;
}

int gm_id_cert_matches_key(const struct gm_cert *c, const struct gm_key *k)
{
    return X509_check_private_key(c->x509, k->pkey) == 1;
}

int gm_id_cert_check_issued(const struct gm_cert *ca, const struct gm_cert *c)
{
    int ok = X509_check_issued(ca->x509, c->x509) == X509_V_OK &&
             X509_verify(c->x509, X509_get0_pubkey(ca->x509)) == 1;

    ERR_clear_error();
    return ok ? 0 : GM_ERR_AUTH;
}
