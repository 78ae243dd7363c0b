/*
 * tests/unit/world.h - a cluster CA and its nodes, made with crypto/identity.h,
 * for the unit tests of crypto/ and discovery/.  Header-only (static
 * inline functions); include it after common/test.h.
 */
#ifndef GM_TESTS_UNIT_WORLD_H
#define GM_TESTS_UNIT_WORLD_H

#include <string.h>

#include "common/test.h"
#include "crypto/identity.h"

/* A CA and one node of a cluster. */
struct world {
    struct gm_key *cakey, *key;
    struct gm_cert *ca, *cert;
};

static inline void world_make(struct world *w, const char *cluster, const char *node)
{
    uint8_t pub[GM_ID_PUB_LEN];

    memset(w, 0, sizeof(*w));
    GM_CHECK_OK(gm_id_key_generate(&w->cakey));
    GM_CHECK_OK(gm_id_ca_create(cluster, w->cakey, 30, &w->ca));
    GM_CHECK_OK(gm_id_key_generate(&w->key));
    GM_CHECK_OK(gm_id_key_public(w->key, pub));
    GM_CHECK_OK(gm_id_cert_issue(w->ca, w->cakey, cluster, node, pub, 10, &w->cert));
}

/* Another node under base's CA (the CA key stays with base). */
static inline void world_node(const struct world *base, struct world *w, const char *cluster,
                              const char *node)
{
    uint8_t pub[GM_ID_PUB_LEN];

    memset(w, 0, sizeof(*w));
    GM_CHECK_OK(gm_id_key_generate(&w->key));
    GM_CHECK_OK(gm_id_key_public(w->key, pub));
    GM_CHECK_OK(gm_id_cert_issue(base->ca, base->cakey, cluster, node, pub, 10, &w->cert));
    GM_CHECK_OK(gm_id_cert_dup(base->ca, &w->ca));
}

static inline void world_free(struct world *w)
{
    gm_id_key_free(w->cakey);
    gm_id_key_free(w->key);
    gm_id_cert_free(w->ca);
    gm_id_cert_free(w->cert);
    memset(w, 0, sizeof(*w));
}

#endif
