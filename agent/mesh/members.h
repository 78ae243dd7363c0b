/*
 * agent/mesh/members.h - the member table: every node id known from the join and
 * from gossip, kept in the state directory's `members` file ("node address"
 * a line), and the links to them.
 *
 * Who dials whom: of two members the one with the smaller node id dials the
 * other (so each pair has one link), retrying with backoff; an incoming link
 * from a member replaces an older one, and when both ends dialed at once
 * both keep the link the smaller id dialed.
 *
 * Frames (gm_members_room): HELLO (the first frame on a member link: it
 * must name the node the certificate names; it brings the link up) and
 * MEMBERS (gossip: each end sends its list when a link comes up and whenever
 * it learns a member, so a node that knows one peer learns all).  Addresses
 * of known members come from their own HELLO, never from gossip.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_MESH_MEMBERS_H
#define GM_AGENT_MESH_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct gm_agent;
struct gm_room;
struct gm_peer;
struct gm_lctx;
struct gm_member;

extern const struct gm_room gm_members_room;

/* Adds or updates a member (never this node); *changed says whether the
 * table changed.  NULL: this node, table full or no memory. */
struct gm_peer *gm_members_upsert(struct gm_agent *a, const char *node, const char *address,
                                  int *changed);
/* Writes the members file (logs its own errors). */
GM_MUST_CHECK int gm_members_save(struct gm_agent *a);
/* The one writer of the members file format: "node address\n" for each of m[0..n), written
 * atomically to path (0644).  gm_members_save and `gradmesh join` (agent/cli) use it. */
GM_MUST_CHECK int gm_members_write(const char *path, const struct gm_member *m, size_t n);
/* Reads the members file; a missing one is an empty table. */
GM_MUST_CHECK int gm_members_load(struct gm_agent *a);
/* Own entry first, then every member. *out malloc'd. */
GM_MUST_CHECK int gm_members_list(struct gm_agent *a, struct gm_member **out, size_t *n);
/* 1 when this node dials p (the smaller id dials). */
int gm_members_should_dial(const struct gm_agent *a, const struct gm_peer *p);
/* 1 when a dial to node is under way (from a beacon, an endpoint or the member table). */
int gm_members_dialing_to(const struct gm_agent *a, const char *node);
/* Dials p unless it is linked or a dial to it is under way. */
void gm_members_dial(struct gm_agent *a, struct gm_peer *p);
/* A dial of the member table's to p ended: redial with backoff unless linked. */
void gm_members_dial_ended(struct gm_peer *p);
/* Sends this node's HELLO on c's member link (after its TLS handshake). */
GM_MUST_CHECK int gm_members_send_hello(struct gm_agent *a, struct gm_lctx *c);
/* Dials the members that are due. */
void gm_members_tick(struct gm_agent *a, uint64_t now);
/* Frees the table. */
void gm_members_free(struct gm_agent *a);

#endif
