/*
 * agent/agent.h - the gradmesh daemon: the composition root.  It opens every room, owns the
 * listener, the links' callbacks, the dispatch of frames and control commands over the rooms'
 * tables, and the order of the periodic work (the 500 ms tick), stop and free.
 *
 * The rooms live in sub-folders whose arrows run one way (docs/ARCHITECTURE.md, "The agent's
 * rooms"; tests/layering.sh checks every include): net/ (frames, wire messages, the TLS link)
 * < service/ (config, control socket, metrics, sd_notify) < core/ (struct gm_agent, the room
 * table) < mesh/ (members, measurement, endpoints, beacons) < cluster/ (the raft chief, its
 * state machine, keyring, admission, joiner) < jobs/ (the job room, rank bridge, training
 * channel, checkpoints, codec = auto) < this root (agent.c, views.c, drain.c) < cli/.  No room
 * includes this header.
 *
 * Members: every node id known from the join and from gossip (MEMBERS frames) is kept in the
 * state directory's `members` file.  Of two members the one with the smaller node id dials the
 * other (so each pair has one link), retrying with backoff; an incoming link from a member
 * replaces an older one.  Every link is mutual TLS against the cluster CA; the peer's
 * certificate names the node, and its HELLO must name the same node.
 *
 * Dispatch: each room lists its frames {type, allowed link states, handler}, its control
 * commands {name, handler} and optional link hooks (agent/core/state.h); agent.c looks them up
 * in its rooms[].  A frame of no room's type, or not allowed in the link's state, closes that
 * link with GM_ERR_PROTO (an ERROR frame first), never the agent.
 *
 * The chief is elected by raft among the voters (agent/cluster/chief.h).  Joins are admitted by
 * any voter that holds the keyring (agent/cluster/keyring.h, admit.h), each token use committed
 * through the chief first.  Refusals are logged with the token id, never the token.
 *
 * Loop thread only.  gm_agent_open() builds everything, gm_agent_start() listens,
 * uv_run(gm_agent_loop(a)) serves until gm_agent_stop() (or SIGINT/SIGTERM, or the end of a
 * drain: agent/drain.h) has closed every handle; then gm_agent_free().
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
