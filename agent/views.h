/*
 * agent/views.h - what the agent shows of itself over the control socket:
 * `status` (the object docs/ARCHITECTURE.md describes: cluster, node, role, chief, term,
 * quorum, members with link class, state, RTT, throughput, MTU, ...; job) and
 * `doctor` (status plus the control socket path, discovery counters, static
 * endpoints, the RTT and throughput matrix from every member's LINK_STATS,
 * and the wall clock).  `gradmesh peers` reads `status`.  Read-only: nothing
 * here changes the agent.
 *
 * Control commands (gm_views_room): status, doctor.  Loop thread only.
 *
 * gm_views_publish_metrics (every tick, when [metrics] listen is set): the same member
 * table as numbers for agent/service/metrics.h: per link class, state, bytes, RTT, throughput and
 * the TCP retransmits the kernel counted (TCP_INFO); members up; token uses.
 */
#ifndef GM_AGENT_VIEWS_H
#define GM_AGENT_VIEWS_H

struct gm_room;
struct gm_agent;

extern const struct gm_room gm_views_room;

void gm_views_publish_metrics(struct gm_agent *a);

#endif
