/*
 * agent/cluster/joiner.h - the joining side of `gradmesh join`.
 *
 * Connects to the admitter with the token's CA pin (crypto/tls.h: nothing is
 * sent before the server's chain matched the pin), proves knowledge of the
 * token bound to this TLS session, and checks the admitter's proof, the CA
 * (its pin must be the token's) and the issued certificate (this node, this
 * key, signed by that CA) before accepting anything.  While the admitter
 * records the token use (through the chief: it can take a while) its link
 * keepalive may PING the joiner; the joiner answers PONG.  Any other frame
 * but JOIN_ACCEPT or ERROR ends the join with GM_ERR_PROTO, and the ERROR
 * it sends the admitter names the message that was not expected.
 *
 * Loop thread only; gm_join_run wraps it with a private loop for the CLI.
 */
#ifndef GM_AGENT_CLUSTER_JOINER_H
#define GM_AGENT_CLUSTER_JOINER_H

#include <stddef.h>

#include <uv.h>

#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/identity.h"
#include "crypto/token.h"

struct gm_join_params {
    const struct gm_token *token; /* borrowed */
    const struct sockaddr *peer;  /* admitter address */
    const char *node;             /* requested node id */
    const char *listen;           /* our listen address "ip:port" for the members */
    const struct gm_key *key;     /* our new key (borrowed) */
    /* tests only: send these JOIN_REQUEST bytes instead (a replay) / keep a copy */
    const char *replay_request;
    char **capture_request;
};

struct gm_join_result {
    int err;                   /* 0: joined */
    char reason[512];          /* for the user when err != 0; never secret */
    struct gm_cert *cert, *ca; /* owned on success */
    struct gm_member *members; /* owned (free()) */
    size_t n_members;
    uint8_t beacon_key[GM_BEACON_KEY_BYTES]; /* the cluster's beacon key */
};

typedef void (*gm_join_done_fn)(void *arg, struct gm_join_result *r);

/* Starts a join on loop; done runs once (never from inside this call). */
GM_MUST_CHECK int gm_join_start(uv_loop_t *loop, const struct gm_join_params *p,
                                struct gm_join_result *r, gm_join_done_fn done, void *arg);
/* Runs a join to the end on a private loop; returns r->err. */
GM_MUST_CHECK int gm_join_run(const struct gm_join_params *p, struct gm_join_result *r);
void gm_join_result_free(struct gm_join_result *r);

#endif
