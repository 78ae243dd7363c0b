/* crypto/join.c - see join.h. */
#include "crypto/join.h"

#include <sodium.h>

void gm_join_proof(const uint8_t v[GM_TOKEN_VERIFIER_LEN], enum gm_join_role role,
                   const uint8_t binding[GM_JOIN_BINDING_LEN], const void *ctx, size_t ctx_len,
                   uint8_t proof[GM_JOIN_PROOF_LEN])
{
    static const char joiner[] = "gradmesh-join-joiner";
    static const char admitter[] = "gradmesh-join-admitter";
    const char *label = role == GM_JOIN_ROLE_JOINER ? joiner : admitter;
    size_t label_len = role == GM_JOIN_ROLE_JOINER ? sizeof(joiner) : sizeof(admitter);
    crypto_generichash_state st;

    crypto_generichash_init(&st, v, GM_TOKEN_VERIFIER_LEN, GM_JOIN_PROOF_LEN);
    crypto_generichash_update(&st, (const unsigned char *)label, label_len); /* with NUL */
    crypto_generichash_update(&st, binding, GM_JOIN_BINDING_LEN);
    crypto_generichash_update(&st, ctx, ctx_len);
    crypto_generichash_final(&st, proof, GM_JOIN_PROOF_LEN);
    sodium_memzero(&st, sizeof(st));
}

int gm_join_proof_check(const uint8_t v[GM_TOKEN_VERIFIER_LEN], enum gm_join_role role,
                        const uint8_t binding[GM_JOIN_BINDING_LEN], const void *ctx, size_t ctx_len,
                        const uint8_t proof[GM_JOIN_PROOF_LEN])
{
    uint8_t want[GM_JOIN_PROOF_LEN];
    int ok;

    gm_join_proof(v, role, binding, ctx, ctx_len, want);
    ok = sodium_memcmp(want, proof, GM_JOIN_PROOF_LEN) == 0;
    sodium_memzero(want, sizeof(want));
    return ok ? 0 : GM_ERR_AUTH;
}
