/*
 * agent/agent.h - the gradmesh daemon: listener, member links, join
 * admission, link measurement, LAN discovery, control socket, distributed
 * jobs.  (The election comes later.)
 *
 * Inside, one room (file pair) per responsibility, listed in agent/core/state.h:
 * agent.c holds the lifecycle and the dispatch; members.c, admit.c,
 * measure.c, endpoints.c, beacons.c, views.c and jobroom.c (with job.c)
 * hold the rest.
 *
 * Members: every node id known from the join and from gossip (MEMBERS
 * frames) is kept in the state directory's `members` file.  Of two members
 * the one with the smaller node id dials the other (so each pair has one
 * link), retrying with backoff; an incoming link from a member replaces an
 * older one.  Every link is mutual TLS against the cluster CA; the peer's
 * certificate names the node, and its HELLO must name the same node.
 *
 * Dispatch: each room lists its frames {type, allowed link states, handler}
 * and its control commands {name, handler}; agent.c looks them up in its
 * rooms[].  A frame of no room's type, or not allowed in the link's state,
 * closes that link with GM_ERR_PROTO (an ERROR frame first), never the agent.
 *
 * Joins are admitted only by the node that holds the CA key (the one that ran
 * `init`).  Refusals are logged with the token id, never the token.
 *
 * Loop thread only.  gm_agent_open() builds everything, gm_agent_start()
 * listens, uv_run(gm_agent_loop(a)) serves until gm_agent_stop() (or
 * SIGINT/SIGTERM) has closed every handle; then gm_agent_free().
 */
#ifndef GM_AGENT_AGENT_H
#define GM_AGENT_AGENT_H

#include <stdint.h>

#include <uv.h>

#include "agent/service/config.h"
#include "common/err.h"

struct gm_agent;

GM_MUST_CHECK int gm_agent_open(const char *config_path, struct gm_agent **out);
GM_MUST_CHECK int gm_agent_start(struct gm_agent *a);
void gm_agent_stop(struct gm_agent *a);
void gm_agent_free(struct gm_agent *a);
uv_loop_t *gm_agent_loop(struct gm_agent *a);
/* The bound listen address ("ip:port"; port chosen by the kernel for port 0). */
const char *gm_agent_listen_addr(const struct gm_agent *a);

#endif
