/*
 * crypto/identity.h - cluster CA and node identities.
 *
 * Keys are Ed25519 (OpenSSL EVP_PKEY), certificates X.509 v3 signed by the
 * cluster CA.  A node certificate names its cluster and node in exactly one
 * URI subjectAltName "gradmesh://<cluster>/<node>"; names are 1..63 chars of
 * [a-z0-9._-] starting with a letter or digit (gm_id_name_valid).  Private
 * keys are written atomically to files of mode 0600 and refused on load when
 * group/other can read them.  Key and certificate objects are opaque; key
 * material is freed by OpenSSL's secure-clear free, PEM buffers are cleansed.
 *
 * Thread-safe: no shared state (callers do not share one object across threads).
 */
#ifndef GM_CRYPTO_IDENTITY_H
#define GM_CRYPTO_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_ID_NAME_MAX 63
#define GM_ID_PIN_LEN 32 /* SHA-256 of DER SubjectPublicKeyInfo */
#define GM_ID_PUB_LEN 32 /* raw Ed25519 public key */
#define GM_ID_CA_DAYS 3650
#define GM_ID_NODE_DAYS 90
#define GM_ID_RENEW_BEFORE_S (30 * 86400) /* renew when fewer seconds are left */

struct gm_key;  /* opaque: Ed25519 private key */
struct gm_cert; /* opaque: X.509 certificate */

/* 1 when s is a valid cluster or node name, else 0. */
int gm_id_name_valid(const char *s);

GM_MUST_CHECK int gm_id_key_generate(struct gm_key **out);
void gm_id_key_free(struct gm_key *k);
/* Writes PEM to path.tmp (0600), fsyncs, renames over path. */
GM_MUST_CHECK int gm_id_key_save(const struct gm_key *k, const char *path);
/* -EPERM when the file is readable by group or other. */
GM_MUST_CHECK int gm_id_key_load(const char *path, struct gm_key **out);
/* The private key as PEM text, *pem malloc'd and NUL-terminated (the caller wipes it). */
GM_MUST_CHECK int gm_id_key_to_pem(const struct gm_key *k, char **pem, size_t *len);
/* An Ed25519 private key from PEM text; GM_ERR_FORMAT for anything else. */
GM_MUST_CHECK int gm_id_key_from_pem(const char *pem, size_t len, struct gm_key **out);
GM_MUST_CHECK int gm_id_key_public(const struct gm_key *k, uint8_t pub[GM_ID_PUB_LEN]);

/* Self-signed CA certificate for cluster, valid days. */
GM_MUST_CHECK int gm_id_ca_create(const char *cluster, const struct gm_key *cakey, int days,
                                  struct gm_cert **out);
/* Node certificate for the raw Ed25519 public key pub, signed by ca/cakey. */
GM_MUST_CHECK int gm_id_cert_issue(const struct gm_cert *ca, const struct gm_key *cakey,
                                   const char *cluster, const char *node,
                                   const uint8_t pub[GM_ID_PUB_LEN], int days,
                                   struct gm_cert **out);
void gm_id_cert_free(struct gm_cert *c);
GM_MUST_CHECK int gm_id_cert_save(const struct gm_cert *c, const char *path);
GM_MUST_CHECK int gm_id_cert_load(const char *path, struct gm_cert **out);
/* *pem is malloc'd, NUL-terminated; the caller frees it. */
GM_MUST_CHECK int gm_id_cert_to_pem(const struct gm_cert *c, char **pem);
/* GM_ERR_FORMAT on anything but exactly one PEM certificate. */
GM_MUST_CHECK int gm_id_cert_from_pem(const char *pem, size_t len, struct gm_cert **out);
GM_MUST_CHECK int gm_id_cert_dup(const struct gm_cert *c, struct gm_cert **out);

/* Cluster and node from the URI SAN; GM_ERR_AUTH when absent or malformed.
 * For a CA certificate node is "" (URI "gradmesh://<cluster>/"). */
GM_MUST_CHECK int gm_id_cert_identity(const struct gm_cert *c, char cluster[GM_ID_NAME_MAX + 1],
                                      char node[GM_ID_NAME_MAX + 1]);
GM_MUST_CHECK int gm_id_cert_pin(const struct gm_cert *c, uint8_t pin[GM_ID_PIN_LEN]);
/* Serial number in lower-case hex (at most 40 digits). */
GM_MUST_CHECK int gm_id_cert_serial(const struct gm_cert *c, char out[41]);
/* Seconds until notAfter (negative when expired). */
GM_MUST_CHECK int gm_id_cert_seconds_left(const struct gm_cert *c, int64_t *out);
/* 1 when the certificate should be renewed now (GM_ID_RENEW_BEFORE_S). */
int gm_id_cert_needs_renewal(const struct gm_cert *c);
/* 0 when ca's key signed c and c names the same issuer; GM_ERR_AUTH otherwise. */
GM_MUST_CHECK int gm_id_cert_check_issued(const struct gm_cert *ca, const struct gm_cert *c);
/* 1 when c's public key is the private key k's. */
int gm_id_cert_matches_key(const struct gm_cert *c, const struct gm_key *k);

/* Writes len bytes atomically to path with the given mode (tmp, fsync, rename). */
GM_MUST_CHECK int gm_id_write_file(const char *path, const void *data, size_t len, int mode);
/* As gm_id_read_file, for secrets: -EPERM (and a log line) when group or
 * other may access the file. */
GM_MUST_CHECK int gm_id_read_private_file(const char *path, size_t max, char **out, size_t *len);
/* Reads a whole file (at most max bytes) into a malloc'd NUL-terminated buffer. */
GM_MUST_CHECK int gm_id_read_file(const char *path, size_t max, char **out, size_t *len);

#endif
