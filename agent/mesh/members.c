/*
 * agent/mesh/members.c - see members.h.
 *
 * Ownership: a->peers (an array, grown by doubling up to GM_MEMBERS_MAX) owns
 * each member's measurements; peer.link is borrowed, set by HELLO and
 * cleared in agent.c's on_close.  Links point at members by name only, so
 * growing the array moves nothing they hold.
 */
#include "agent/mesh/members.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/mesh/endpoints.h"
#include "agent/mesh/measure.h"
#include "agent/core/state.h"
#include "agent/service/version.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"

#define DIAL_BACKOFF_MAX_MS 5000

int gm_members_write(const char *path, const struct gm_member *m, size_t n)
{
    char *buf;
    size_t i, off = 0, cap = (n + 1) * (GM_ID_NAME_MAX + GM_ADDR_MAX + 4);
    int err;

    buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    for (i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s %s\n", m[i].node, m[i].address);
    err = gm_id_write_file(path, buf, off, 0644);
    free(buf);
    return err;
}

int gm_members_save(struct gm_agent *a)
{
    char path[GM_PATH_MAX];
    struct gm_member *m = NULL;
    size_t n = 0;
    int err;

    err = gm_config_state_path(&a->cfg, "members", path, sizeof(path));
    if (err != 0)
        return err;
    err = gm_members_list(a, &m, &n); /* this node first: not in its own file */
    if (err == 0)
        err = gm_members_write(path, m + 1, n - 1);
    free(m);
    if (err != 0)
        gm_err("event=members-save err=%d msg=\"%s\"", err, gm_strerror(err));
    return err;
}

struct gm_peer *gm_members_upsert(struct gm_agent *a, const char *node, const char *address,
                                  int *changed)
{
    struct gm_peer *p = gm_agent_peer_find(a, node);

    *changed = 0;
    if (strcmp(node, a->cfg.node) == 0)
        return NULL;
    if (p == NULL) {
        if (a->npeers == a->cap_peers) {
            size_t cap = a->cap_peers ? 2 * a->cap_peers : 8;
            struct gm_peer *np;
            size_t i;
            if (cap > GM_MEMBERS_MAX)
                return NULL;
            np = realloc(a->peers, cap * sizeof(*np));
            if (np == NULL)
                return NULL;
            a->peers = np;
            a->cap_peers = cap;
            /* links point at peers by name only: fix nothing */
            for (i = a->npeers; i < cap; i++)
                memset(&a->peers[i], 0, sizeof(a->peers[i]));
        }
        p = &a->peers[a->npeers++];
        memset(p, 0, sizeof(*p));
        gm_measure_reset(&p->m);
        snprintf(p->node, sizeof(p->node), "%s", node);
        *changed = 1;
    }
    if (strcmp(p->address, address) != 0) {
        snprintf(p->address, sizeof(p->address), "%s", address);
        *changed = 1;
    }
    return p;
}

int gm_members_load(struct gm_agent *a)
{
    char path[GM_PATH_MAX], *text = NULL, *line, *save = NULL;
    int err = gm_agent_state_read(a, "members", path, &text), changed;

    if (err != 0 || text == NULL)
        return err;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char node[GM_ID_NAME_MAX + 1], addr[GM_ADDR_MAX];
        struct sockaddr_storage ss;
        if (sscanf(line, "%63s %63s", node, addr) != 2 || !gm_id_name_valid(node) ||
            gm_proto_addr_parse(addr, &ss) != 0) {
            gm_err("event=members-bad-line file=%s", path);
            err = GM_ERR_CONFIG;
            break;
        }
        (void)gm_members_upsert(a, node, addr, &changed);
    }
    free(text);
    return err;
}

void gm_members_free(struct gm_agent *a)
{
    size_t i;

    for (i = 0; i < a->npeers; i++)
        gm_measure_reset(&a->peers[i].m);
    free(a->peers);
    a->peers = NULL;
    a->npeers = a->cap_peers = 0;
}

int gm_members_should_dial(const struct gm_agent *a, const struct gm_peer *p)
{
    return strcmp(a->cfg.node, p->node) < 0;
}

int gm_members_dialing_to(const struct gm_agent *a, const char *node)
{
    const struct gm_lctx *c;

    for (c = a->links; c != NULL; c = c->next)
        if (c->dialed && strcmp(c->node, node) == 0 && gm_link_state(c->link) != GM_LSTATE_UP &&
            !gm_link_is_closing(c->link))
            return 1;
    return 0;
}

void gm_members_dial(struct gm_agent *a, struct gm_peer *p)
{
    struct sockaddr_storage ss;

    if (a->stopping || p->link != NULL || p->dialing || gm_members_dialing_to(a, p->node) ||
        !gm_rooms_may_link(a, p->node))
        return;
    if (gm_proto_addr_parse(p->address, &ss) != 0)
        return;
    gm_debug("event=dial peer=%s address=%s", p->node, p->address);
    if (gm_agent_dial(a, p->node, (struct sockaddr *)&ss, NULL) == 0)
        p->dialing = 1;
}

void gm_members_dial_ended(struct gm_peer *p)
{
    p->dialing = 0;
    if (p->link == NULL) {
        p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : GM_AGENT_TICK_MS;
        if (p->backoff_ms > DIAL_BACKOFF_MAX_MS)
            p->backoff_ms = DIAL_BACKOFF_MAX_MS;
        p->next_dial = gm_time_mono_ns() + (uint64_t)p->backoff_ms * 1000000ull;
    }
}

void gm_members_tick(struct gm_agent *a, uint64_t now)
{
    size_t i;

    for (i = 0; i < a->npeers; i++) {
        struct gm_peer *p = &a->peers[i];
        if (p->link == NULL && !p->dialing && gm_members_should_dial(a, p) && now >= p->next_dial)
            gm_members_dial(a, p);
    }
}

int gm_members_send_hello(struct gm_agent *a, struct gm_lctx *c)
{
    struct gm_msg_hello m;
    char *json = NULL;
    size_t len = 0;
    int err;

    memset(&m, 0, sizeof(m));
    snprintf(m.node, sizeof(m.node), "%s", a->cfg.node);
    snprintf(m.listen, sizeof(m.listen), "%s", a->listen_addr);
    snprintf(m.link_class, sizeof(m.link_class), "%s", gm_class_name(c->cls));
    m.mtu = c->mtu;
    m.proto = GM_PROTO_VERSION;
    snprintf(m.version, sizeof(m.version), "%s", gm_version_string());
    err = gm_proto_hello_encode(&m, &json, &len);
    return gm_agent_send_json(c->link, GM_MSG_HELLO, json, len, err);
}

int gm_members_list(struct gm_agent *a, struct gm_member **out, size_t *n)
{
    struct gm_member *m = calloc(a->npeers + 1, sizeof(*m));
    size_t i;

    *out = NULL;
    *n = 0;
    if (m == NULL)
        return -ENOMEM;
    snprintf(m[0].node, sizeof(m[0].node), "%s", a->cfg.node);
    snprintf(m[0].address, sizeof(m[0].address), "%s", a->listen_addr);
    for (i = 0; i < a->npeers; i++) {
        snprintf(m[i + 1].node, sizeof(m[i + 1].node), "%s", a->peers[i].node);
        snprintf(m[i + 1].address, sizeof(m[i + 1].address), "%s", a->peers[i].address);
    }
    *out = m;
    *n = a->npeers + 1;
    return 0;
}

static int send_members(struct gm_agent *a, struct gm_link *l)
{
    struct gm_member *m = NULL;
    char *json = NULL;
    size_t n = 0, len = 0;
    int err = gm_members_list(a, &m, &n);

    if (err == 0)
        err = gm_proto_members_encode(m, n, &json, &len);
    free(m);
    return gm_agent_send_json(l, GM_MSG_MEMBERS, json, len, err);
}

/* Tells every up member but skip the member list (it changed). */
static void members_push(struct gm_agent *a, const struct gm_link *skip)
{
    size_t i;

    for (i = 0; i < a->npeers; i++) {
        struct gm_link *l = a->peers[i].link;
        if (l != NULL && l != skip && gm_link_state(l) == GM_LSTATE_UP)
            gm_agent_ignore(send_members(a, l));
    }
}

/* 1 when the link was dialed by the smaller of the two node ids. */
static int dialed_by_min(const struct gm_agent *a, const struct gm_lctx *c)
{
    return c->dialed == (strcmp(a->cfg.node, c->node) < 0);
}

static int h_hello(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_msg_hello m;
    char listen[GM_ADDR_MAX];
    struct sockaddr_storage ss;
    struct gm_peer *peer;
    int changed = 0, err;

    if (gm_proto_hello_decode(p, h->len, &m) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed hello");
    if (strcmp(m.node, c->node) != 0)
        return gm_agent_refuse(l, GM_ERR_AUTH, "hello names another node than the certificate");
    if (m.proto < GM_PROTO_MIN) {
        char why[160];
        snprintf(why, sizeof(why),
                 "node %s runs an older gradmesh (peer protocol %d, this node needs %d or "
                 "newer): upgrade it to %s",
                 m.node, m.proto, GM_PROTO_MIN, gm_version_string());
        return gm_agent_refuse(l, GM_ERR_PROTO, why);
    }
    if (c->dialed && gm_proto_addr_parse(gm_link_peer_addr(l), &ss) == 0)
        snprintf(listen, sizeof(listen), "%s", gm_link_peer_addr(l)); /* keep what worked */
    else
        gm_proto_addr_fill_host(m.listen, gm_link_peer_addr(l), listen);
    if (c->ep != NULL) /* the endpoint answered as a member: it works */
        gm_endpoint_linked(c->ep, m.node);
    peer = gm_agent_peer_find(a, m.node);
    if (peer != NULL && peer->link != NULL && peer->link != l) {
        struct gm_lctx *old = gm_link_data(peer->link);
        if (dialed_by_min(a, old) && !dialed_by_min(a, c)) {
            /* both ends keep the link the smaller id dialed */
            c->duplicate = 1;
            snprintf(c->reason, sizeof(c->reason), "duplicate link");
            gm_debug("event=link-duplicate peer=%s", m.node);
            gm_agent_ignore(gm_link_send(l, GM_MSG_BYE, 0, NULL, 0));
            gm_link_close(l, 0);
            return 0;
        }
        snprintf(old->reason, sizeof(old->reason), "replaced by a newer link");
        gm_link_close(peer->link, 0);
        peer->link = NULL;
    }
    peer = gm_members_upsert(a, m.node, listen, &changed);
    if (peer == NULL)
        return gm_agent_refuse(l, -ENOMEM, "member table full");
    if (changed)
        gm_agent_ignore(gm_members_save(a));
    peer->link = l;
    peer->backoff_ms = 0;
    peer->proto = m.proto;
    snprintf(peer->version, sizeof(peer->version), "%s", m.version[0] ? m.version : "unknown");
    gm_measure_link_init(peer, c, m.link_class, m.mtu);
    if (a->cfg.max_tunnel_mbit > 0 && gm_measure_class(peer) == GM_CLASS_TUNNEL) {
        gm_link_set_rate(l, a->cfg.max_tunnel_mbit * 1e6 / 8); /* before the probe measures */
        gm_info("event=link-capped peer=%s class=tunnel max_mbit=%d", m.node,
                a->cfg.max_tunnel_mbit);
    }
    if (gm_measure_class(peer) != GM_CLASS_LAN) /* raft heartbeats must not wait behind bulk */
        gm_link_set_high_water(l, GM_LINK_SLOW_HIGH_WATER);
    gm_link_set_state(l, GM_LSTATE_UP);
    gm_link_ping(l); /* an RTT right away, before the probe loads the link */
    a->stats.links_up++;
    gm_notice("event=link-up peer=%s address=%s dialed=%d class=%s iface=%s", m.node,
              gm_link_peer_addr(l), c->dialed, gm_class_name(gm_measure_class(peer)), c->iface);
    err = send_members(a, l);
    /* Every link-up, not only a changed address: a member admitted by a join is
     * in our table (with its address) before its first link, and the others
     * must still hear of it. */
    (void)changed;
    members_push(a, l);
    gm_rooms_link_up(a, peer, c); /* measure's probe, admit's renewal, the jobs, ... */
    return err;
}

static int h_members(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                     const uint8_t *p)
{
    struct gm_member *m = NULL;
    size_t n = 0, i;
    int any = 0, changed;

    if (gm_proto_members_decode(p, h->len, &m, &n) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed member list");
    for (i = 0; i < n; i++) {
        struct gm_peer *peer;
        if (strcmp(m[i].node, a->cfg.node) == 0)
            continue;
        if (gm_agent_peer_find(a, m[i].node) != NULL)
            continue; /* addresses of known members come from their own hello */
        peer = gm_members_upsert(a, m[i].node, m[i].address, &changed);
        if (peer == NULL)
            break;
        any = 1;
        gm_info("event=member-learned node=%s address=%s via=%s", peer->node, peer->address,
                ((struct gm_lctx *)gm_link_data(l))->node);
        if (gm_members_should_dial(a, peer))
            gm_members_dial(a, peer);
    }
    free(m);
    if (any) {
        gm_agent_ignore(gm_members_save(a));
        members_push(a, l); /* so a node that knows one peer learns all */
    }
    return 0;
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_HELLO, GM_LSTATE_HELLO, h_hello},
    {GM_MSG_MEMBERS, GM_LSTATE_UP, h_members},
};

const struct gm_room gm_members_room = {
    .name = "members",
    .frames = frames,
    .nframes = GM_ARRAY_SIZE(frames),
};
