/*
 * agent/cluster/admit.h - admission and identity upkeep: joins (JOIN_REQUEST on a
 * certificate-less join link, answered with JOIN_ACCEPT), the invite token
 * store's control commands, certificate renewal (RENEW_REQUEST/ACCEPT) and
 * the denylist of certificate serials.
 *
 * Joins are admitted by every node that holds the CA key: the one that ran
 * `init` and the voters it was handed to (agent/cluster/keyring.h), so a token
 * issued earlier still admits with the `init` machine down.  The token must
 * be live in this node's records, the joiner's proof must verify for this
 * TLS session (channel binding), and the node name must be new.  Then the
 * use is committed to the replicated state through the chief (token-use
 * with the token's limit, agent/cluster/chief.h) before the certificate is issued:
 * the join waits for the commit (its link stays in the JOIN state), and a
 * use past the limit is refused there, the same on every node, so two
 * voters cannot both spend a single-use token.  With no chief (an election,
 * no majority) a join is refused with "try again".  Each
 * refusal is logged with the token id, never the token, and counts against a
 * window of GM_JOIN_FAILS_MAX refusals per JOIN_FAIL_WINDOW_S, all tokens
 * together; past it every join is refused (-EBUSY) until the window moves.
 *
 * Renewal: every RENEW_CHECK_S (and when the admitter's link comes up) a
 * node whose certificate nears expiry renews it, itself when it holds the
 * CA key, else by asking the admitter (the `admitter` state file names the
 * node it joined through) or, when that one has no up link, the chief (a
 * voter: it holds the key).  The new certificate is saved and presented on
 * new links; old links stay.
 *
 * Control commands (gm_admit_room): token-create {ttl, uses}, token-list,
 * token-revoke {id}; on a node that holds the CA key.  A token made or
 * revoked on one voter reaches the others with the next KEYRING.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_CLUSTER_ADMIT_H
#define GM_AGENT_CLUSTER_ADMIT_H

#include <stdint.h>

#include "common/err.h"

struct gm_agent;
struct gm_lctx;
struct gm_room;

extern const struct gm_room gm_admit_room;

/* Loads the denylist state file into the TLS context (a missing file is empty). */
GM_MUST_CHECK int gm_admit_load_denylist(struct gm_agent *a);
/* Learns who issues certificates: this node when it holds the CA key, else
 * the `admitter` state file (missing or bad: unknown). */
void gm_admit_load_admitter(struct gm_agent *a);
/* Renews this node's certificate if it nears expiry (see above). */
void gm_admit_renew_check(struct gm_agent *a);
/* A link closes: a join waiting on it is answered nowhere (agent.c's on_close). */
void gm_admit_link_closed(struct gm_agent *a, struct gm_lctx *c);
/* Runs gm_admit_renew_check every RENEW_CHECK_S (sooner after a failed ask). */
void gm_admit_tick(struct gm_agent *a, uint64_t now);

#endif
