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

#include "discovery/iface.h"

struct gm_agent;
struct gm_room;
struct gm_peer;
struct gm_lctx;
struct gm_link_stat;
struct gm_measure; /* agent/core/state.h, beside struct gm_peer */

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
