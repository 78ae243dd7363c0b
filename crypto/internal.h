/*
 * crypto/internal.h - crypto/-private accessors to the OpenSSL objects inside
 * the opaque identity types, and the beacon codec below its seal.  Only files
 * in crypto/ include this (and tests/fuzz/fuzz_beacon.c, to reach the field
 * parser behind the seal).
 */
#ifndef GM_CRYPTO_INTERNAL_H
#define GM_CRYPTO_INTERNAL_H

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "crypto/beacon.h"
#include "crypto/identity.h"

X509 *gm_id_cert_x509(const struct gm_cert *c);   /* borrowed */
EVP_PKEY *gm_id_key_pkey(const struct gm_key *k); /* borrowed */
int gm_id_x509_identity(X509 *x, char cluster[GM_ID_NAME_MAX + 1], char node[GM_ID_NAME_MAX + 1]);
int gm_id_x509_pin(X509 *x, uint8_t pin[GM_ID_PIN_LEN]);
int gm_id_x509_serial(X509 *x, char out[41]);
/* Wraps x, taking one new reference to it. */
int gm_id_cert_wrap(X509 *x, struct gm_cert **out);
/* Logs the OpenSSL error queue once (event=openssl what=...) and clears it. */
void gm_crypto_log_openssl(const char *what);

/* Beacon internals (crypto/beacon.c; the layout is in its header comment).
 * Fields, then "u16 length | der" when der is not NULL (the MEMBER layout):
 * -EINVAL when b's fields or der_len are invalid, -ENOSPC past cap. */
GM_MUST_CHECK int gm_beacon_fields_encode(const struct gm_beacon *b, const uint8_t *der,
                                          size_t der_len, uint8_t *out, size_t cap, size_t *len);
/* Exactly n bytes of fields in kind's layout (MEMBER: with the certificate,
 * *der then points into p); the same checks as the encoder, GM_ERR_FORMAT. */
GM_MUST_CHECK int gm_beacon_fields_decode(enum gm_beacon_kind kind, const uint8_t *p, size_t n,
                                          struct gm_beacon *b, const uint8_t **der,
                                          size_t *der_len);
/* header | random nonce | seal(key, plain[n]); -ENOSPC past cap or GM_BEACON_MAX. */
GM_MUST_CHECK int gm_beacon_seal_raw(enum gm_beacon_kind kind, const uint8_t key[GM_BEACON_KEY_LEN],
                                     const uint8_t *plain, size_t n, uint8_t *out, size_t cap,
                                     size_t *len);

#endif
