/*
 * crypto/internal.h - crypto/-private accessors to the OpenSSL objects inside
 * the opaque identity types.  Only files in crypto/ include this.
 */
#ifndef GM_CRYPTO_INTERNAL_H
#define GM_CRYPTO_INTERNAL_H

#include <openssl/evp.h>
#include <openssl/x509.h>

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

#endif
