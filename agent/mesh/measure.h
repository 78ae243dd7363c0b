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
 * Silent peers: every tick sets each up member link's silence deadline (gm_link_set_silence_ms,
 * agent/net/link.h), so that a member alive at the TCP level but silent (SIGSTOPped, a paused
 * VM or laptop) is dropped within seconds, not after [node] peer_timeout: PINGs go every
 * 500 ms and the loop thread answers them whatever the trainer does, so a live peer is heard
 * from within one PING interval plus a round trip, plus what its PONG may wait behind (the
 * link's bulk high water at the measured throughput).  The deadline is the larger of a floor
 * (GM_SILENCE_LAN_MS on a LAN, GM_SILENCE_SLOW_MS on a tunnel or WAN, where the election
 * timeout is 5 s too) and ping + 2 x the worst fresh round trip (last 30 s: under training
 * they include the queueing behind bulk) + that queue, at most peer_timeout.  A step's time
 * does not enter: the trainer is another thread and a step blocks no PONG.
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
#define GM_SILENCE_LAN_MS 2000
#define GM_SILENCE_SLOW_MS 5000
/* The silence deadline for p's link (above); cap_ms: peer_timeout (0: none). */
unsigned gm_measure_silence_ms(const struct gm_peer *p, unsigned ping_ms, unsigned cap_ms);
/* Sends LINK_STATS every STATS_EVERY_S; sets the links' silence deadlines. */
void gm_measure_tick(struct gm_agent *a, uint64_t now);
/* Ends the reachability checks in flight (their handles close on the loop). */
void gm_measure_stop(struct gm_agent *a);
/* Frees the probe block. */
void gm_measure_free(struct gm_agent *a);

#endif
