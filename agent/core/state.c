/*
 * agent/core/state.c - see state.h: the helpers every room uses on the agent's
 * shared state (links, member lookup, state files, refusals).
 */
#include "agent/core/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/service/metrics.h"
#include "common/log.h"

#define PING_MS 500 /* fast enough to tell a silent peer in 2-3 s (link.h, measure.h) */

struct gm_lctx *gm_agent_lctx_new(struct gm_agent *a)
{
    struct gm_lctx *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->a = a;
    c->next = a->links;
    c->pprev = &a->links;
    if (a->links != NULL)
        a->links->pprev = &c->next;
    a->links = c;
    return c;
}

void gm_agent_lctx_free(struct gm_lctx *c)
{
    *c->pprev = c->next;
    if (c->next != NULL)
        c->next->pprev = c->pprev;
    free(c);
}

struct gm_link_opts gm_agent_link_opts(const struct gm_agent *a, enum gm_tls_role role)
{
    struct gm_link_opts o = {
        .role = role, .ping_ms = PING_MS, .timeout_ms = (unsigned)a->cfg.peer_timeout_s * 1000u};

    return o;
}

int gm_agent_dial(struct gm_agent *a, const char *node, const struct sockaddr *addr,
                  struct gm_endpoint *ep)
{
    struct gm_link_opts o = gm_agent_link_opts(a, GM_TLS_ROLE_CLIENT);
    struct gm_lctx *c;
    int err;

    if (a->stopping)
        return -ECANCELED;
    c = gm_agent_lctx_new(a);
    if (c == NULL)
        return -ENOMEM;
    snprintf(c->node, sizeof(c->node), "%s", node);
    c->dialed = 1;
    c->ep = ep;
    err = gm_link_new(&a->loop, a->tls, &o, a->link_ops, c, &c->link);
    if (err != 0) {
        gm_agent_lctx_free(c);
        return err;
    }
    gm_link_set_state(c->link, GM_LSTATE_HANDSHAKE);
    gm_agent_ignore(gm_link_connect(c->link, addr)); /* errors: on_close */
    return 0;
}

int gm_agent_send_json(struct gm_link *l, uint16_t type, char *json, size_t len, int err)
{
    if (err != 0)
        return err;
    err = gm_link_send(l, type, 0, json, len);
    free(json);
    return err;
}

int gm_agent_refuse(struct gm_link *l, int err, const char *what)
{
    struct gm_lctx *c = gm_link_data(l);

    snprintf(c->reason, sizeof(c->reason), "%s", what);
    c->a->stats.links_refused++;
    c->a->stats.last_refusal = err;
    gm_metrics_refused(c->a->metrics, gm_link_state(l) == GM_LSTATE_JOIN ? "join" : "link",
                       gm_metrics_reason(err));
    gm_link_fail(l, err, what);
    return 0;
}

struct gm_peer *gm_agent_peer_find(struct gm_agent *a, const char *node)
{
    size_t i;

    for (i = 0; i < a->npeers; i++)
        if (strcmp(a->peers[i].node, node) == 0)
            return &a->peers[i];
    return NULL;
}

struct gm_link *gm_agent_up_link(struct gm_agent *a, const char *node)
{
    struct gm_peer *p = gm_agent_peer_find(a, node);

    return p != NULL && p->link != NULL && gm_link_state(p->link) == GM_LSTATE_UP &&
                   !gm_link_is_closing(p->link)
               ? p->link
               : NULL;
}

int gm_agent_state_read(const struct gm_agent *a, const char *name, char path[GM_PATH_MAX],
                        char **text)
{
    size_t len = 0;
    int err = gm_config_state_path(&a->cfg, name, path, GM_PATH_MAX);

    *text = NULL;
    if (err == 0)
        err = gm_id_read_file(path, 1 << 20, text, &len);
    return err == -ENOENT ? 0 : err;
}

json_t *gm_agent_ctl_error(int err, const char *msg)
{
    return json_pack("{s:s, s:i}", "error", msg, "code", err);
}

int gm_agent_members_up(const struct gm_agent *a)
{
    size_t i;
    int n = 0;

    for (i = 0; i < a->npeers; i++)
        n += a->peers[i].link != NULL;
    return n;
}

void gm_rooms_link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    for (size_t i = 0; i < a->nrooms; i++)
        if (a->rooms[i]->link_up != NULL)
            a->rooms[i]->link_up(a, p, c);
}

void gm_rooms_link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    for (size_t i = 0; i < a->nrooms; i++)
        if (a->rooms[i]->link_down != NULL)
            a->rooms[i]->link_down(a, p, err);
}

int gm_rooms_may_link(struct gm_agent *a, const char *node)
{
    for (size_t i = 0; i < a->nrooms; i++)
        if (a->rooms[i]->may_link != NULL && !a->rooms[i]->may_link(a, node))
            return 0;
    return 1;
}
