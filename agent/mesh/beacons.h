/*
 * agent/mesh/beacons.h - the agent's side of LAN discovery (discovery/): starts
 * it when the config and the listen address allow, turns fresh MEMBER
 * beacons into dials (by the smaller-id rule; the other end is asked to dial
 * by answering with our own beacon), and on the admitter keeps one JOIN
 * beacon key per live invite token so that a joiner with only a token finds
 * it.  Beacons are only hints: every peer is confirmed over mutual TLS.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_MESH_BEACONS_H
#define GM_AGENT_MESH_BEACONS_H

struct gm_agent;

/* Starts discovery (a->disc); without it the agent still works through
 * members and static endpoints, so failures are logged, not returned. */
void gm_beacons_start(struct gm_agent *a);
/* Admitter: one JOIN beacon key per live token (run every tick). */
void gm_beacons_refresh_join_keys(struct gm_agent *a);
/* Stops discovery (a->disc NULL after). */
void gm_beacons_stop(struct gm_agent *a);

#endif
