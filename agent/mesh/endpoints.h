/*
 * agent/mesh/endpoints.h - static endpoints from the config ([discovery] peers,
 * "host:port, host:port"): each is dialed until it is linked, whoever it
 * turns out to be (TLS says who), resolving host names through libuv's
 * threadpool and retrying on its own backoff with jitter (1 s doubling to
 * 30 s).  The first failure is logged as a warning, later ones at debug.
 * Once an endpoint has answered as a member, the member table's own dials
 * take over while that member is linked or being dialed.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_MESH_ENDPOINTS_H
#define GM_AGENT_MESH_ENDPOINTS_H

#include <stdint.h>

#include <uv.h>

#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/identity.h"

struct gm_agent;

struct gm_endpoint {
    struct gm_agent *a;
    char spec[GM_ADDR_MAX];        /* host:port as configured */
    char node[GM_ID_NAME_MAX + 1]; /* learned on the first link */
    char last_error[128];
    int dialing, resolving;
    uint64_t next_dial;
    unsigned backoff_ms;
    uv_getaddrinfo_t gai;
};

/* Reads a->cfg.peers into a->eps; GM_ERR_CONFIG for an entry without a port. */
GM_MUST_CHECK int gm_endpoints_parse(struct gm_agent *a);
/* Dials the endpoints that are not linked yet, each on its own backoff. */
void gm_endpoints_tick(struct gm_agent *a, uint64_t now);
/* A dial of ep's failed (err, reason): log, and back off. */
void gm_endpoint_failed(struct gm_endpoint *ep, int err, const char *reason);
/* ep answered as member node: it works. */
void gm_endpoint_linked(struct gm_endpoint *ep, const char *node);
/* ep's link closed, so it may be dialed again; after a link that was up (or
 * closed as a duplicate: was_up), not before the first backoff step. */
void gm_endpoint_link_closed(struct gm_endpoint *ep, int was_up);
/* Cancels resolutions in flight (their callbacks run with UV_ECANCELED). */
void gm_endpoints_stop(struct gm_agent *a);
void gm_endpoints_free(struct gm_agent *a);

#endif
