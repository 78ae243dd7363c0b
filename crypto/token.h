/*
 * crypto/token.h - invite tokens and the admitter's token store.
 *
 * Token string: "gmtoken1_" + base64url (no padding) of
 *   u8 version (1) | u8 n | cluster[n] | pin[32] | id[8] | secret[16] | check[4]
 * where pin is the SHA-256 of the CA's SubjectPublicKeyInfo, id the public
 * token id (shown as 16 hex digits in lists and logs), secret 128 random bits
 * and check the first 4 bytes of BLAKE2b(all before) to catch copy-paste typos.
 *
 * The store never holds the secret: it keeps the verifier
 *   v = BLAKE2b-256(key = secret, "gradmesh-token-v1" 0 cluster 0 id)
 * (libsodium crypto_generichash, keyed with the secret), which the joiner
 * recomputes from its token; join proofs are MACs keyed with v (crypto/join.h).
 * v proves nothing outside a join and only while the token is live; the store
 * file is 0600 next to the CA key.  Records: expiry (default 24 h), uses left
 * (default 1), revoked flag, recent failures (rate limit: GM_TOKEN_MAX_FAILS
 * in GM_TOKEN_FAIL_WINDOW_S locks the token for that window).
 *
 * Tokens and the store are used from the loop thread only.
 */
#ifndef GM_CRYPTO_TOKEN_H
#define GM_CRYPTO_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "crypto/identity.h"

#define GM_TOKEN_PREFIX "gmtoken1_"
#define GM_TOKEN_ID_LEN 8
#define GM_TOKEN_SECRET_LEN 16
#define GM_TOKEN_VERIFIER_LEN 32
#define GM_TOKEN_STR_MAX 256
#define GM_TOKEN_DEFAULT_TTL_S (24 * 3600)
#define GM_TOKEN_MAX_FAILS 5
#define GM_TOKEN_FAIL_WINDOW_S 60

struct gm_token;       /* opaque: holds the secret, wiped on free */
struct gm_token_store; /* opaque */

/* Parses a token string (surrounding whitespace allowed); GM_ERR_TOKEN when malformed. */
GM_MUST_CHECK int gm_token_parse(const char *s, size_t len, struct gm_token **out);
void gm_token_free(struct gm_token *t);
const char *gm_token_cluster(const struct gm_token *t);
const uint8_t *gm_token_pin(const struct gm_token *t);
const uint8_t *gm_token_id(const struct gm_token *t);
void gm_token_verifier(const struct gm_token *t, uint8_t v[GM_TOKEN_VERIFIER_LEN]);
/* Encodes a token string into out (GM_TOKEN_STR_MAX bytes). For the store and tests. */
GM_MUST_CHECK int gm_token_encode(const char *cluster, const uint8_t pin[GM_ID_PIN_LEN],
                                  const uint8_t id[GM_TOKEN_ID_LEN],
                                  const uint8_t secret[GM_TOKEN_SECRET_LEN],
                                  char out[GM_TOKEN_STR_MAX]);
void gm_token_id_hex(const uint8_t id[GM_TOKEN_ID_LEN], char hex[2 * GM_TOKEN_ID_LEN + 1]);

struct gm_token_info {
    char id[2 * GM_TOKEN_ID_LEN + 1];
    int64_t created, expires; /* unix seconds */
    int uses_left, uses_total, revoked;
};

/* Loads path (a missing file is an empty store).  GM_ERR_FORMAT on a bad file. */
GM_MUST_CHECK int gm_token_store_open(const char *path, struct gm_token_store **out);
void gm_token_store_free(struct gm_token_store *s);
/* Creates a token, saves the store, writes the token string into out (the
 * caller wipes it with sodium_memzero after printing). */
GM_MUST_CHECK int gm_token_store_create(struct gm_token_store *s, const char *cluster,
                                        const uint8_t pin[GM_ID_PIN_LEN], int64_t ttl_s, int uses,
                                        int64_t now, char out[GM_TOKEN_STR_MAX],
                                        struct gm_token_info *info);
size_t gm_token_store_count(const struct gm_token_store *s);
GM_MUST_CHECK int gm_token_store_get(const struct gm_token_store *s, size_t i,
                                     struct gm_token_info *info);
/* -ENOENT when no token has this id (hex). */
GM_MUST_CHECK int gm_token_store_revoke(struct gm_token_store *s, const char *id_hex);
/* Looks a token up for a join at time now: 0 and its verifier, GM_ERR_TOKEN
 * (unknown, expired, revoked, used up) or -EBUSY (locked after failures).
 * *why names the reason for logs. */
GM_MUST_CHECK int gm_token_store_check(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN],
                                       int64_t now, uint8_t v[GM_TOKEN_VERIFIER_LEN],
                                       const char **why);
/* Records one use and saves the store before returning (call before issuing). */
GM_MUST_CHECK int gm_token_store_use(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN]);
/* Records a failed proof for the rate limit (unknown ids are ignored). */
void gm_token_store_fail(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN], int64_t now);

/* The record of token id: 0, or -ENOENT. */
GM_MUST_CHECK int gm_token_store_info(const struct gm_token_store *s,
                                      const uint8_t id[GM_TOKEN_ID_LEN],
                                      struct gm_token_info *info);
/* The store as text (the store file's lines, verifiers included) for another node that
 * holds the CA key; *out malloc'd, the caller wipes (sodium_memzero) and frees it. */
GM_MUST_CHECK int gm_token_store_export(const struct gm_token_store *s, char **out, size_t *len);
/* Merges another store's text (gm_token_store_export's form): unknown tokens are added, a
 * known one keeps the fewer uses left, and revoked wins.  The whole text is checked first:
 * GM_ERR_FORMAT (or -ENOSPC past the store's bound) changes nothing.  Saves the store when
 * *changed. */
GM_MUST_CHECK int gm_token_store_merge(struct gm_token_store *s, const char *text, size_t len,
                                       int *changed);

#endif
