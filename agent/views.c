/*
 * agent/views.c - see views.h.
 *
 * Every view is built fresh from the member table, the measurements and the
 * discovery counters; the answer object is the caller's (json_decref).
 */
#include "agent/views.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>

#include "agent/cluster/chief.h"
#include "agent/mesh/endpoints.h"
#include "agent/mesh/measure.h"
#include "agent/jobs/job.h"
#include "agent/service/metrics.h"
#include "agent/service/version.h"
#include "agent/jobs/ckptxfer.h"
#include "agent/core/state.h"
#include "common/assert.h"
#include "discovery/discovery.h"
#include "discovery/iface.h"

static json_t *num_or_null(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

static json_t *tri(int v)
{
    return v < 0 ? json_null() : json_boolean(v);
}

/* Class of the path to a member without a link: from the route it would take. */
static enum gm_link_class path_class(const struct gm_agent *a, const char *address)
{
    struct sockaddr_storage ss;
    struct gm_iface eg;

    if (gm_proto_addr_parse(address, &ss) != 0 ||
        gm_iface_egress((struct sockaddr *)&ss, a->cfg.tunnels, &eg) != 0)
        return GM_CLASS_WAN;
    return gm_iface_classify((struct sockaddr *)&ss, &eg);
}

/* What p measured of its link to us (LINK_STATS), or NULL. */
static const struct gm_link_stat *remote_view(const struct gm_agent *a, const struct gm_peer *p)
{
    size_t i;

    for (i = 0; i < p->m.nremote; i++)
        if (strcmp(p->m.remote[i].node, a->cfg.node) == 0)
            return &p->m.remote[i];
    return NULL;
}

static json_t *member_json(struct gm_agent *a, const struct gm_peer *p)
{
    const struct gm_link_stat *rv = p->link ? remote_view(a, p) : NULL;
    int mtu = p->m.mtu_local;
    double skew = 0;
    json_t *m;

    if (p->m.mtu_remote > 0 && (mtu <= 0 || p->m.mtu_remote < mtu))
        mtu = p->m.mtu_remote;
    m = json_pack("{s:s, s:s, s:s, s:s}", "node", p->node, "address", p->address, "link",
                  gm_class_name(p->link ? gm_measure_class(p) : path_class(a, p->address)), "state",
                  p->link ? "up" : "down");
    if (m == NULL)
        return NULL;
    json_object_set_new(
        m, "rtt_ms",
        num_or_null(p->link && gm_link_rtt_ms(p->link) > 0 ? gm_link_rtt_ms(p->link) : -1));
    json_object_set_new(m, "throughput_mbps", num_or_null(p->link ? p->m.mbps_out : -1));
    json_object_set_new(m, "throughput_in_mbps", num_or_null(p->link ? p->m.mbps_in : -1));
    json_object_set_new(m, "mtu", p->link && mtu > 0 ? json_integer(mtu) : json_null());
    json_object_set_new(m, "iface",
                        p->link && p->m.iface[0] ? json_string(p->m.iface) : json_null());
    json_object_set_new(m, "clock_skew_ms",
                        p->link && gm_link_skew_ms(p->link, &skew) ? json_real(skew) : json_null());
    json_object_set_new(m, "reach_out", tri(p->link ? p->m.reach_out : -1));
    json_object_set_new(m, "reach_in", tri(rv ? rv->reach : -1));
    /* what its last HELLO said; null before a link ever came up */
    json_object_set_new(m, "version", p->version[0] ? json_string(p->version) : json_null());
    json_object_set_new(m, "proto", p->proto > 0 ? json_integer(p->proto) : json_null());
    return m;
}

static json_t *status_json(struct gm_agent *a)
{
    json_t *o = json_object(), *members = json_array();
    size_t i, up = 0;
    int mixed = 0;

    for (i = 0; i < a->npeers; i++) {
        if (gm_chief_is_revoked(a, a->peers[i].node))
            continue; /* no member any more (`members --json` lists it under revoked) */
        up += a->peers[i].link != NULL;
        json_array_append_new(members, member_json(a, &a->peers[i]));
        mixed |= a->peers[i].version[0] && strcmp(a->peers[i].version, gm_version_string()) != 0;
    }
    json_object_set_new(o, "cluster", json_string(a->cfg.cluster));
    json_object_set_new(o, "node", json_string(a->cfg.node));
    json_object_set_new(o, "listen", json_string(a->listen_addr));
    json_object_set_new(o, "role", json_string(a->cakey ? "admitter" : "member"));
    json_object_set_new(o, "version", json_string(gm_version_string()));
    json_object_set_new(o, "commit", json_string(gm_version_commit()));
    json_object_set_new(o, "cuda", json_boolean(gm_version_cuda()));
    json_object_set_new(o, "proto", json_integer(GM_PROTO_VERSION));
    json_object_set_new(o, "mixed_versions", json_boolean(mixed));
    json_object_set_new(o, "revoked", json_boolean(a->revoked));
    gm_chief_status(a, o); /* chief, term, quorum, chief_reason, member_role, raft_role */
    json_object_set_new(o, "members", members);
    json_object_set_new(o, "job", gm_jobs_status_json(a->jobs));
    json_object_set_new(o, "disk", gm_ckptx_disk_json(a->ckptx));
    return o;
}

static json_t *discovery_json(struct gm_agent *a)
{
    struct gm_disc_stats st;
    char ifs[256];

    if (a->disc == NULL)
        return json_null();
    gm_disc_get_stats(a->disc, &st);
    gm_disc_ifaces(a->disc, ifs, sizeof(ifs));
    return json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:i}}", "group",
                     a->cfg.multicast, "interfaces", ifs, "member_beacons", a->have_bkey, "sent",
                     (int)st.sent, "received", (int)st.received, "accepted", (int)st.accepted,
                     "ignored", (int)st.ignored, "ignored_by_reason", "malformed",
                     (int)st.ignored_format, "unauthenticated", (int)st.ignored_auth, "stale",
                     (int)st.ignored_stale, "replayed", (int)st.ignored_replay, "foreign",
                     (int)st.ignored_foreign);
}

static json_t *endpoints_json(struct gm_agent *a)
{
    json_t *arr = json_array();
    size_t i;

    for (i = 0; i < a->neps; i++) {
        const struct gm_endpoint *ep = &a->eps[i];
        const struct gm_peer *p = ep->node[0] ? gm_agent_peer_find(a, ep->node) : NULL;
        const char *state = p != NULL && p->link != NULL   ? "linked"
                            : ep->dialing || ep->resolving ? "dialing"
                                                           : "retrying";
        json_array_append_new(arr, json_pack("{s:s, s:s?, s:s, s:i, s:s?}", "endpoint", ep->spec,
                                             "node", ep->node[0] ? ep->node : NULL, "state", state,
                                             "backoff_ms", (int)ep->backoff_ms, "last_error",
                                             ep->last_error[0] ? ep->last_error : NULL));
    }
    return arr;
}

/* Rows: who measured; columns: to whom.  Ours first, then each member's
 * LINK_STATS; null where nobody measured.  Revoked nodes are left out. */
static json_t *matrix_json(struct gm_agent *a)
{
    json_t *nodes = json_array(), *rtt = json_array(), *bw = json_array();
    size_t *idx = calloc(a->npeers + 1, sizeof(*idx)); /* row/column k > 0: a->peers[idx[k]] */
    size_t i, j, k, n = 1;

    if (idx == NULL)
        return json_null();
    json_array_append_new(nodes, json_string(a->cfg.node));
    for (i = 0; i < a->npeers; i++) {
        if (gm_chief_is_revoked(a, a->peers[i].node))
            continue;
        idx[n++] = i;
        json_array_append_new(nodes, json_string(a->peers[i].node));
    }
    for (i = 0; i < n; i++) {
        json_t *rr = json_array(), *br = json_array();
        for (j = 0; j < n; j++) {
            const char *to = json_string_value(json_array_get(nodes, j));
            double r = -1, b = -1;
            if (i == 0 && j > 0 && a->peers[idx[j]].link != NULL) {
                const struct gm_peer *p = &a->peers[idx[j]];
                r = gm_link_rtt_ms(p->link) > 0 ? gm_link_rtt_ms(p->link) : -1;
                b = p->m.mbps_out;
            } else if (i > 0 && i != j && a->peers[idx[i]].link != NULL) {
                const struct gm_peer *p = &a->peers[idx[i]];
                for (k = 0; k < p->m.nremote; k++)
                    if (strcmp(p->m.remote[k].node, to) == 0) {
                        r = p->m.remote[k].rtt_ms;
                        b = p->m.remote[k].throughput_mbps;
                    }
            }
            json_array_append_new(rr, num_or_null(r));
            json_array_append_new(br, num_or_null(b));
        }
        json_array_append_new(rtt, rr);
        json_array_append_new(bw, br);
    }
    free(idx);
    return json_pack("{s:o, s:o, s:o}", "nodes", nodes, "rtt_ms", rtt, "throughput_mbps", bw);
}

static json_t *doctor_json(struct gm_agent *a)
{
    json_t *o = status_json(a);

    json_object_set_new(o, "control", json_string(a->cfg.control));
    json_object_set_new(o, "discovery", discovery_json(a));
    json_object_set_new(o, "endpoints", endpoints_json(a));
    json_object_set_new(o, "matrix", matrix_json(a));
    json_object_set_new(o, "wall_clock_ms", json_integer((json_int_t)time(NULL) * 1000));
    return o;
}

static json_t *cmd_status(struct gm_agent *a, json_t *req)
{
    (void)req;
    return status_json(a);
}

static json_t *cmd_doctor(struct gm_agent *a, json_t *req)
{
    (void)req;
    return doctor_json(a);
}

static const struct gm_room_command commands[] = {
    {"status", cmd_status},
    {"doctor", cmd_doctor},
};

const struct gm_room gm_views_room = {
    .name = "views",
    .commands = commands,
    .ncommands = GM_ARRAY_SIZE(commands),
};

/* --- metrics --------------------------------------------------------------- */

static int64_t tcp_retransmits(const struct gm_link *l)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int fd = gm_link_fd(l);

    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return -1;
    return (int64_t)ti.tcpi_total_retrans;
}

void gm_views_publish_metrics(struct gm_agent *a)
{
    struct gm_metrics_cluster c = {.checkpoint_age_s = -1, .term = -1};
    struct gm_metrics_link *links;
    size_t i;

    if (a->metrics == NULL)
        return;
    snprintf(c.cluster, sizeof(c.cluster), "%s", a->cfg.cluster);
    snprintf(c.node, sizeof(c.node), "%s", a->cfg.node);
    c.members = (unsigned)a->npeers;
    c.members_up = (unsigned)gm_agent_members_up(a);
    c.token_uses = a->stats.joins_accepted; /* every admitted join spent one token use */
    c.checkpoint_age_s = gm_ckptx_newest_age_s(a->ckptx);
    {
        struct gm_ckptx_disk d;
        gm_ckptx_disk(a->ckptx, &d);
        c.disk_full = d.full;
        c.disk_full_total = d.enospc;
    }
    {
        char chief[GM_CHIEF_NAME_MAX + 1];
        uint64_t term = 0;
        if (gm_chief_leader(a, chief, &term) == 0 && term <= INT64_MAX)
            c.term = (int64_t)term; /* left out while there is no chief */
    }
    gm_metrics_set_cluster(a->metrics, &c);
    links = calloc(a->npeers + 1, sizeof(*links));
    if (links == NULL)
        return; /* the previous list stays up; next tick tries again */
    for (i = 0; i < a->npeers; i++) {
        const struct gm_peer *p = &a->peers[i];
        struct gm_metrics_link *l = &links[i];

        snprintf(l->peer, sizeof(l->peer), "%s", p->node);
        snprintf(l->address, sizeof(l->address), "%s", p->address);
        l->cls = gm_class_name(p->link ? gm_measure_class(p) : path_class(a, p->address));
        l->codec = "none"; /* the job runtime sets the codec per link */
        l->up = p->link != NULL;
        l->rtt_s = l->bps_out = l->bps_in = -1;
        l->tcp_retransmits = -1;
        if (p->link == NULL)
            continue;
        l->bytes_sent = gm_link_bytes_sent(p->link);
        l->bytes_received = gm_link_bytes_received(p->link);
        if (gm_link_rtt_ms(p->link) > 0)
            l->rtt_s = gm_link_rtt_ms(p->link) / 1e3;
        if (p->m.mbps_out >= 0)
            l->bps_out = p->m.mbps_out * 1e6;
        if (p->m.mbps_in >= 0)
            l->bps_in = p->m.mbps_in * 1e6;
        l->tcp_retransmits = tcp_retransmits(p->link);
    }
    gm_agent_ignore(gm_metrics_set_links(a->metrics, links, a->npeers));
    free(links);
}
