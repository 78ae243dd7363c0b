/*
 * crypto/record.c - see record.h.  Every cipher call goes through OpenSSL's
 * EVP AEAD interface; the key is set once per direction and only the nonce
 * per record, so a record costs one IV setup, the additional data, the
 * content and the tag.
 */
#include "crypto/record.h"

#include <errno.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>

/* HKDF-Expand-Label(secret, label, "", n) of RFC 8446 section 7.1. */
static int expand_label(const EVP_MD *md, const uint8_t *secret, size_t secret_len,
                        const char *label, uint8_t *out, size_t n)
{
    uint8_t info[2 + 1 + 6 + 16 + 1]; /* the longest label is "traffic upd" */
    size_t ll = strlen(label), il = 0;
    EVP_KDF *kdf = NULL;
    EVP_KDF_CTX *kc = NULL;
    OSSL_PARAM params[5];
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY, ok = 0;

    if (ll > 16 || n > 255)
        return -EINVAL;
    info[il++] = 0;
    info[il++] = (uint8_t)n;
    info[il++] = (uint8_t)(6 + ll);
    memcpy(info + il, "tls13 ", 6);
    il += 6;
    memcpy(info + il, label, ll);
    il += ll;
    info[il++] = 0; /* empty context */
    params[0] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
    params[1] =
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)EVP_MD_get0_name(md), 0);
    params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, secret_len);
    params[3] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, il);
    params[4] = OSSL_PARAM_construct_end();
    kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    kc = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    ok = kc != NULL && EVP_KDF_derive(kc, out, n, params) == 1;
    EVP_KDF_CTX_free(kc);
    EVP_KDF_free(kdf);
    if (!ok) {
        ERR_clear_error();
        return GM_ERR_PROTO;
    }
    return 0;
}

/* Key and IV from d->secret into d's cipher context (a new one when d has
 * none).  Wipes the key. */
static int set_keys(struct gm_rec_dir *d)
{
    uint8_t key[32];
    int klen = EVP_CIPHER_get_key_length(d->cipher), err, ok;

    if (klen <= 0 || (size_t)klen > sizeof(key) || EVP_CIPHER_get_iv_length(d->cipher) != 12)
        return -EINVAL;
    err = expand_label(d->md, d->secret, d->secret_len, "key", key, (size_t)klen);
    if (err == 0)
        err = expand_label(d->md, d->secret, d->secret_len, "iv", d->iv, sizeof(d->iv));
    if (err != 0) {
        OPENSSL_cleanse(key, sizeof(key));
        return err;
    }
    if (d->ctx == NULL) {
        d->ctx = EVP_CIPHER_CTX_new();
        ok = d->ctx != NULL &&
             EVP_CipherInit_ex(d->ctx, d->cipher, NULL, key, d->iv, d->seal ? 1 : 0) == 1;
    } else { /* same cipher, new key: the nonce is set per record anyway */
        ok = EVP_CipherInit_ex(d->ctx, NULL, NULL, key, d->iv, d->seal ? 1 : 0) == 1;
    }
    OPENSSL_cleanse(key, sizeof(key));
    if (!ok) {
        err = d->ctx == NULL ? -ENOMEM : GM_ERR_PROTO;
        ERR_clear_error();
        return err;
    }
    d->seq = 0;
    return 0;
}

int gm_rec_init(struct gm_rec_dir *d, const EVP_CIPHER *cipher, const EVP_MD *md,
                const uint8_t *secret, size_t secret_len, int seal)
{
    int err;

    memset(d, 0, sizeof(*d));
    if (secret_len == 0 || secret_len > sizeof(d->secret) ||
        secret_len != (size_t)EVP_MD_get_size(md))
        return -EINVAL;
    d->cipher = cipher;
    d->md = md;
    d->seal = seal != 0;
    memcpy(d->secret, secret, secret_len);
    d->secret_len = secret_len;
    err = set_keys(d);
    if (err != 0)
        gm_rec_free(d);
    return err;
}

int gm_rec_update(struct gm_rec_dir *d)
{
    uint8_t next[EVP_MAX_MD_SIZE];
    int err = expand_label(d->md, d->secret, d->secret_len, "traffic upd", next, d->secret_len);

    if (err == 0) {
        memcpy(d->secret, next, d->secret_len);
        err = set_keys(d);
    }
    OPENSSL_cleanse(next, sizeof(next));
    if (err != 0)
        gm_rec_free(d);
    return err;
}

void gm_rec_free(struct gm_rec_dir *d)
{
    EVP_CIPHER_CTX_free(d->ctx); /* wipes the key schedule */
    OPENSSL_cleanse(d, sizeof(*d));
}

static void nonce_of(const struct gm_rec_dir *d, uint8_t nonce[12])
{
    memcpy(nonce, d->iv, 12);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= (uint8_t)(d->seq >> (56 - 8 * i));
}

long gm_rec_seal(struct gm_rec_dir *d, uint8_t type, const uint8_t *content, size_t len, size_t pad,
                 uint8_t *out)
{
    static const uint8_t zeros[256];
    uint8_t nonce[12];
    size_t body = len + 1 + pad + GM_REC_TAG;
    uint8_t *p = out + GM_REC_HDR;
    int n;

    if (!d->seal || len > GM_REC_MAX_PLAIN || pad > sizeof(zeros) || body > GM_REC_MAX_BODY)
        return -EINVAL;
    if (d->seq == UINT64_MAX)
        return -EOVERFLOW; /* RFC 8446 5.5: never wrap; 2^64 records is never reached */
    out[0] = GM_REC_TYPE_DATA;
    out[1] = 0x03;
    out[2] = 0x03;
    out[3] = (uint8_t)(body >> 8);
    out[4] = (uint8_t)body;
    nonce_of(d, nonce);
    if (EVP_EncryptInit_ex(d->ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_EncryptUpdate(d->ctx, NULL, &n, out, GM_REC_HDR) != 1 ||
        (len > 0 && EVP_EncryptUpdate(d->ctx, p, &n, content, (int)len) != 1) ||
        EVP_EncryptUpdate(d->ctx, p + len, &n, &type, 1) != 1 ||
        (pad > 0 && EVP_EncryptUpdate(d->ctx, p + len + 1, &n, zeros, (int)pad) != 1) ||
        EVP_EncryptFinal_ex(d->ctx, p + len + 1 + pad, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_GET_TAG, GM_REC_TAG, p + len + 1 + pad) != 1) {
        ERR_clear_error();
        return GM_ERR_PROTO;
    }
    d->seq++;
    return (long)(GM_REC_HDR + body);
}

long gm_rec_size(const uint8_t *p, size_t avail)
{
    size_t body;

    if (avail < GM_REC_HDR)
        return 0;
    body = (size_t)p[3] << 8 | p[4];
    /* every protected record is outer type application_data, 0x0303, and
     * holds at least the inner type and the tag */
    if (p[0] != GM_REC_TYPE_DATA || p[1] != 0x03 || p[2] != 0x03 || body < 1 + GM_REC_TAG ||
        body > GM_REC_MAX_BODY)
        return GM_ERR_PROTO;
    return (long)(GM_REC_HDR + body);
}

uint8_t gm_rec_header_alert(const uint8_t *p)
{
    size_t body = (size_t)p[3] << 8 | p[4];

    if (p[0] != GM_REC_TYPE_DATA)
        return 10; /* unexpected_message: plaintext or change_cipher_spec after the handshake */
    if (body > GM_REC_MAX_BODY)
        return 22; /* record_overflow */
    return 50;     /* decode_error: wrong version, or too short for a type and a tag */
}

/* Byte i of an inner plaintext split over dst[n1] and spill. */
static uint8_t inner_at(const uint8_t *dst, size_t n1, const uint8_t *spill, size_t i)
{
    return i < n1 ? dst[i] : spill[i - n1];
}

int gm_rec_open(struct gm_rec_dir *d, const uint8_t *rec, size_t rec_len, uint8_t *dst,
                size_t dst_cap, uint8_t *spill, size_t *len, uint8_t *type)
{
    uint8_t nonce[12], tag[GM_REC_TAG];
    size_t inner, i, n1;
    int n;

    *len = 0;
    *type = 0;
    if (d->seal || gm_rec_size(rec, rec_len) != (long)rec_len)
        return GM_ERR_PROTO;
    if (d->seq == UINT64_MAX)
        return GM_ERR_PROTO;
    inner = rec_len - GM_REC_HDR - GM_REC_TAG;
    n1 = dst_cap < inner ? dst_cap : inner;
    if (n1 < inner && spill == NULL)
        return -EINVAL;
    memcpy(tag, rec + rec_len - GM_REC_TAG, GM_REC_TAG);
    nonce_of(d, nonce);
    if (EVP_DecryptInit_ex(d->ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_SET_TAG, GM_REC_TAG, tag) != 1 ||
        EVP_DecryptUpdate(d->ctx, NULL, &n, rec, GM_REC_HDR) != 1 ||
        (n1 > 0 && EVP_DecryptUpdate(d->ctx, dst, &n, rec + GM_REC_HDR, (int)n1) != 1) ||
        (n1 < inner &&
         EVP_DecryptUpdate(d->ctx, spill, &n, rec + GM_REC_HDR + n1, (int)(inner - n1)) != 1) ||
        EVP_DecryptFinal_ex(d->ctx, tag, &n) != 1) { /* AEAD finals write no bytes */
        ERR_clear_error();
        goto wipe; /* bad_record_mac */
    }
    d->seq++;
    /* the type is the last non-zero byte; zeros after it are padding */
    for (i = inner; i > 0 && inner_at(dst, n1, spill, i - 1) == 0; i--)
        ;
    if (i == 0)
        goto wipe; /* unexpected_message: no type */
    *type = inner_at(dst, n1, spill, i - 1);
    *len = i - 1;
    if (*len > GM_REC_MAX_PLAIN) {
        *type = 0;
        goto wipe; /* record_overflow */
    }
    return 0;
wipe:
    if (n1 > 0)
        OPENSSL_cleanse(dst, n1);
    if (n1 < inner)
        OPENSSL_cleanse(spill, inner - n1);
    return GM_ERR_PROTO;
}
