/*
 * agent/mesh/measure.h - link measurement: what is known of the link to each
 * member (class, MTU, RTT, throughput both ways, reachability) and how it is
 * learned.
 *
 * Frames (gm_measure_room): PING/PONG (RTT; the first PONG on a dialed link
 * starts the probe), BULK and PROBE trains timed by the receiver, which
 * answers RATE; PROBE rounds grow 4x until one lasts PROBE_TARGET_US; an
 * empty PROBE says "my probe is over" so the other end probes next, never
 * both at once; LINK_STATS carries a member's own view of its links, kept
 * for doctor's matrix and reach_in.  Each member's struct gm_measure is
 * reset when a new link to it comes up.  Reachability: the end that was
 * dialed opens a bare TCP connection to the dialer's listen address.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_MESH_MEASURE_H
#define GM_AGENT_MESH_MEASURE_H

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

#include "discovery/iface.h"

struct gm_agent;
struct gm_room;
struct gm_peer;
struct gm_lctx;
struct gm_link_stat;

/* What is known of the link to one member; reset when a new link comes up. */
struct gm_measure {
    enum gm_link_class cls_local, cls_remote; /* 0: unknown */
    int mtu_local, mtu_remote;
    char iface[IF_NAMESIZE];
    double mbps_out, mbps_in; /* < 0: unknown */
    int reach_out;            /* we can open a TCP connection to it: 1, 0, -1 unknown */
    uint32_t probe_size;      /* bytes of the round in flight; 0: no probe running */
    int probe_after_pong;     /* probe once the first RTT (on the idle link) is in */
    uint64_t probe_req;
    struct gm_link_stat *remote; /* its LINK_STATS (owned) */
    size_t nremote;
};

extern const struct gm_room gm_measure_room;

/* Frees what m owns and marks everything unknown. */
void gm_measure_reset(struct gm_measure *m);
/* The class of the link to p: either end in a tunnel makes it a tunnel; then wan over lan. */
enum gm_link_class gm_measure_class(const struct gm_peer *p);
/* This end's view of c's link (egress interface, class, path MTU), into c. */
void gm_measure_link_view(struct gm_agent *a, struct gm_lctx *c);
/* A member's link came up (HELLO): fresh measurements from c's view and the
 * peer's (remote_class as named in its HELLO, remote_mtu). */
void gm_measure_link_init(struct gm_peer *p, const struct gm_lctx *c, const char *remote_class,
                          int remote_mtu);
/* After the HELLO exchange: the dialer probes after the first PONG; the
 * dialed end checks that the dialer's listen address is reachable. */
void gm_measure_link_start(struct gm_agent *a, struct gm_peer *p, int dialed);
/* The member's link went down: no probe in flight any more. */
void gm_measure_link_down(struct gm_measure *m);
/* Sends LINK_STATS every STATS_EVERY_S. */
void gm_measure_tick(struct gm_agent *a, uint64_t now);
/* Ends the reachability checks in flight (their handles close on the loop). */
void gm_measure_stop(struct gm_agent *a);
/* Frees the probe block. */
void gm_measure_free(struct gm_agent *a);

#endif
