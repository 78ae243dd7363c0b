/*
 * crypto/join.h - channel-bound join proofs.
 *
 * Both sides of a join hold the token verifier v (crypto/token.h): the joiner
 * computes it from the token, the admitter reads it from its store.  Each
 * proves knowledge of v with
 *   proof = BLAKE2b-256(key = v, label_role 0 binding[32] ctx)
 * where binding is SSL_export_keying_material(GM_JOIN_EXPORTER_LABEL, 32) of
 * the TLS session carrying the join (crypto/tls.h gm_tls_export), and ctx the
 * request being authorised (token id, node name, public key).  A proof
 * captured from one session does not verify on another: every session has a
 * different exporter value.  Comparisons are constant-time.
 *
 * Pure functions; thread-safe.
 */
#ifndef GM_CRYPTO_JOIN_H
#define GM_CRYPTO_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "crypto/token.h"

#define GM_JOIN_EXPORTER_LABEL "EXPORTER-gradmesh-join-v1"
#define GM_JOIN_BINDING_LEN 32
#define GM_JOIN_PROOF_LEN 32

enum gm_join_role {
    GM_JOIN_ROLE_JOINER = 1,
    GM_JOIN_ROLE_ADMITTER = 2,
};

void gm_join_proof(const uint8_t v[GM_TOKEN_VERIFIER_LEN], enum gm_join_role role,
                   const uint8_t binding[GM_JOIN_BINDING_LEN], const void *ctx, size_t ctx_len,
                   uint8_t proof[GM_JOIN_PROOF_LEN]);
/* 0 when proof is right, GM_ERR_AUTH otherwise (constant-time compare). */
GM_MUST_CHECK int gm_join_proof_check(const uint8_t v[GM_TOKEN_VERIFIER_LEN],
                                      enum gm_join_role role,
                                      const uint8_t binding[GM_JOIN_BINDING_LEN], const void *ctx,
                                      size_t ctx_len, const uint8_t proof[GM_JOIN_PROOF_LEN]);

#endif
