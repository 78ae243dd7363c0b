/*
 * agent/mesh/endpoints.c - see endpoints.h.
 *
 * Ownership: a->eps is one array made by gm_endpoints_parse and freed in
 * gm_endpoints_free, after the loop has run dry (a resolution in flight
 * holds &ep->gai).  A link dialed for an endpoint borrows it (lctx.ep).
 */
#include "agent/mesh/endpoints.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "agent/core/state.h"
#include "common/log.h"
#include "common/time.h"

#define EP_BACKOFF_MIN_MS 1000 /* static endpoints: first retry */
#define EP_BACKOFF_MAX_MS 30000

void gm_endpoint_failed(struct gm_endpoint *ep, int err, const char *reason)
{
    uint64_t jitter;

    snprintf(ep->last_error, sizeof(ep->last_error), "%s%s%s", gm_strerror(err),
             reason[0] ? ": " : "", reason);
    if (ep->backoff_ms == 0)
        gm_warn("event=endpoint-unreachable endpoint=%s err=%d reason=\"%s\" "
                "retry=\"with backoff up to %d s; logged once\"",
                ep->spec, err, ep->last_error, EP_BACKOFF_MAX_MS / 1000);
    else
        gm_debug("event=endpoint-unreachable endpoint=%s err=%d", ep->spec, err);
    ep->backoff_ms = ep->backoff_ms ? ep->backoff_ms * 2 : EP_BACKOFF_MIN_MS;
    if (ep->backoff_ms > EP_BACKOFF_MAX_MS)
        ep->backoff_ms = EP_BACKOFF_MAX_MS;
    jitter = randombytes_uniform(ep->backoff_ms / 4 + 1);
    ep->next_dial = gm_time_mono_ns() + ((uint64_t)ep->backoff_ms + jitter) * 1000000ull;
}

void gm_endpoint_linked(struct gm_endpoint *ep, const char *node)
{
    snprintf(ep->node, sizeof(ep->node), "%s", node);
    ep->backoff_ms = 0;
    ep->last_error[0] = '\0';
}

void gm_endpoint_link_closed(struct gm_endpoint *ep, int was_up)
{
    ep->dialing = 0;
    if (was_up)
        ep->next_dial = gm_time_mono_ns() + (uint64_t)EP_BACKOFF_MIN_MS * 1000000ull;
}

static void endpoint_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct gm_endpoint *ep = req->data;
    struct gm_agent *a = ep->a;
    int err = status;

    ep->resolving = 0;
    if (status == UV_ECANCELED || a->stopping) {
        uv_freeaddrinfo(res);
        return;
    }
    if (err == 0 && res != NULL)
        err = gm_agent_dial(a, ep->node, res->ai_addr, ep);
    else if (err == 0)
        err = -EHOSTUNREACH;
    uv_freeaddrinfo(res);
    if (err == 0)
        ep->dialing = 1;
    else
        gm_endpoint_failed(ep, err, "cannot resolve the host name");
}

static void endpoint_dial(struct gm_agent *a, struct gm_endpoint *ep)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct sockaddr_storage ss;
    char host[GM_ADDR_MAX];
    const char *colon = strrchr(ep->spec, ':');
    int err;

    if (gm_proto_addr_parse(ep->spec, &ss) == 0) {
        err = gm_agent_dial(a, ep->node, (struct sockaddr *)&ss, ep);
        if (err == 0)
            ep->dialing = 1;
        return;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - ep->spec), ep->spec);
    ep->gai.data = ep;
    err = uv_getaddrinfo(&a->loop, &ep->gai, endpoint_resolved, host, colon + 1, &hints);
    if (err == 0)
        ep->resolving = 1;
    else
        gm_endpoint_failed(ep, err, "cannot resolve the host name");
}

void gm_endpoints_tick(struct gm_agent *a, uint64_t now)
{
    size_t i;

    for (i = 0; i < a->neps; i++) {
        struct gm_endpoint *ep = &a->eps[i];
        struct gm_peer *p = ep->node[0] ? gm_agent_peer_find(a, ep->node) : NULL;
        if (ep->dialing || ep->resolving || now < ep->next_dial)
            continue;
        if (p != NULL && (p->link != NULL || p->dialing))
            continue; /* linked, or its member dial is on the way */
        endpoint_dial(a, ep);
    }
}

/* "host:port, host:port" from the config; each checked for a port. */
int gm_endpoints_parse(struct gm_agent *a)
{
    char buf[sizeof(a->cfg.peers)], *tok, *save = NULL;
    size_t n = 0;

    snprintf(buf, sizeof(buf), "%s", a->cfg.peers);
    for (tok = strtok_r(buf, ", \t", &save); tok != NULL; tok = strtok_r(NULL, ", \t", &save))
        n++;
    if (n == 0)
        return 0;
    a->eps = calloc(n, sizeof(*a->eps));
    if (a->eps == NULL)
        return -ENOMEM;
    snprintf(buf, sizeof(buf), "%s", a->cfg.peers);
    for (tok = strtok_r(buf, ", \t", &save); tok != NULL; tok = strtok_r(NULL, ", \t", &save)) {
        struct gm_endpoint *ep = &a->eps[a->neps];
        const char *colon = strrchr(tok, ':');
        long port = colon ? strtol(colon + 1, NULL, 10) : 0;
        if (colon == NULL || colon == tok || port <= 0 || port > 65535 ||
            strlen(tok) >= sizeof(ep->spec)) {
            gm_err("event=config-bad-value key=discovery.peers value=%s reason=\"want HOST:PORT\"",
                   tok);
            return GM_ERR_CONFIG;
        }
        ep->a = a;
        snprintf(ep->spec, sizeof(ep->spec), "%s", tok);
        a->neps++;
    }
    return 0;
}

void gm_endpoints_stop(struct gm_agent *a)
{
    size_t i;

    for (i = 0; i < a->neps; i++)
        if (a->eps[i].resolving)
            gm_agent_ignore(uv_cancel((uv_req_t *)&a->eps[i].gai));
}

void gm_endpoints_free(struct gm_agent *a)
{
    free(a->eps);
    a->eps = NULL;
    a->neps = 0;
}
