/*
 * agent/cluster/chief.h - the chief room: consensus (canonical raft 0.15, Debian's
 * libraft) over the member links, and the replicated cluster state
 * (agent/cluster/chieffsm.h).  The chief is the raft leader.
 *
 * Raft: libraft's libuv backend (raft_uv_init) keeps the log, the term, the
 * vote and the snapshots in the state directory's `raft/` folder; its
 * traffic rides in the member links (agent/cluster/chiefnet.h, GM_MSG_RAFT), never
 * on a port of its own.  Pre-vote is on (a node that comes back from a
 * partition does not depose a working chief).  Election timeout 1 s
 * (randomised 1-2 s), heartbeat 100 ms; a snapshot every 256 entries keeps
 * the log bounded (64 trailing entries kept for slow followers).  A server's
 * raft id is derived from its node id and its raft address is the node id.
 * Every entry and snapshot is padded with blanks to a multiple of 8 bytes:
 * raft's segment format silently misreads entries of other lengths after a
 * restart or on a follower (canonical/raft issues 189 and 304).
 *
 * Bootstrap: the node that holds the CA key (the one that ran `init`) makes
 * the first configuration, itself as the only voter, when its raft folder is
 * empty; every other node starts with an empty configuration and waits for
 * the chief to add it.  (Wiping raft/ on a node that holds the CA key, the
 * init node or a voter (agent/cluster/keyring.h), in a running cluster would
 * bootstrap a second cluster: don't.)
 *
 * The chief's controller (one change at a time; each agent tick, and again as soon as its
 * previous change or proposal commits, so joins go at commit speed): a member
 * with an up link that raft does not know is added (raft_add), and recorded
 * in the state machine as a voter while fewer than GM_CHIEF_VOTERS voters and
 * witnesses exist, else as a spare; raft's role of each server follows the
 * recorded one (voter and witness: raft voter; spare: raft standby, which
 * follows the log without voting); a revoked node leaves the configuration.
 * A chief whose own recorded role is spare hands leadership to a voter first;
 * a witness that wins an election (it votes, so it can) hands it to a voter
 * with an up link as soon as there is one: the chief coordinates training.
 *
 * Commands (control socket; on a member they are forwarded to the chief in
 * CHIEF_REQ and answered in CHIEF_ANS once committed or refused):
 *   members            roles, raft roles, links, the chief, the term, revoked nodes
 *   revoke {node}      replicated denylist: every node closes its link to it at once and
 *                      refuses it from then on (links, raft channels); the chief removes
 *                      it from raft's configuration
 *   role {node, role}  voter | witness | spare; refused when the voters that would
 *                      remain could not form a majority with the links up now
 *   chief-result {req} the outcome of a revoke or role request: pending, done or refused
 * Every command carries the chief's term; the state machine refuses one from
 * an older term (agent/cluster/chieffsm.h).  With no chief (no majority), `status`
 * says so and why, and changes are refused.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_CLUSTER_CHIEF_H
#define GM_AGENT_CLUSTER_CHIEF_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agent/cluster/chieffsm.h"
#include "common/err.h"
#include "train/ckpt/ckpt.h"

#define GM_CHIEF_VOTERS 5 /* voters and witnesses the controller makes by itself */

struct gm_agent;
struct gm_room;

extern const struct gm_room gm_chief_room;

/* The outcome of a request made with a callback: code 0 when committed, else the refusal
 * (msg: printable text). */
typedef void (*gm_chief_done_fn)(void *arg, int code, const char *msg);

/* Makes a->chief (raft initialised, not started). */
GM_MUST_CHECK int gm_chief_open(struct gm_agent *a);
/* Starts raft (after the listener is up). */
GM_MUST_CHECK int gm_chief_start(struct gm_agent *a);
void gm_chief_tick(struct gm_agent *a, uint64_t now);
void gm_chief_link_down(struct gm_agent *a, const char *node);
/* Closes raft (asynchronous: the agent's loop runs until it is closed). */
void gm_chief_stop(struct gm_agent *a);
void gm_chief_free(struct gm_agent *a);

/* 1 when node is on the replicated denylist. */
int gm_chief_is_revoked(struct gm_agent *a, const char *node);
/* The chief's node id into out and its term: 0, or -ENOENT when there is no chief now. */
int gm_chief_leader(struct gm_agent *a, char out[GM_CHIEF_NAME_MAX + 1], uint64_t *term);
/* The job coordinator's view: the chief into out and the term (*term set either way):
 * 0, or -ENOENT with why in why.  Raft's leader whose links reach no majority of the voters
 * is no coordinator here, before raft itself steps down. */
int gm_chief_coordinator(struct gm_agent *a, char out[GM_CHIEF_NAME_MAX + 1], uint64_t *term,
                         char *why, size_t cap);
/* On the chief: proposes c to the replicated state, stamped with the chief's term
 * (c->term is set here); committed or refused later, the outcome logged.  -EAGAIN
 * when this node is not the chief.  For the rooms that record state there (jobs,
 * checkpoints: GM_CHIEF_OP_JOB, GM_CHIEF_OP_CHECKPOINT). */
GM_MUST_CHECK int gm_chief_propose(struct gm_agent *a, struct gm_chief_cmd *c, const char *what);
/* On the chief: proposes job id's state and step to the replicated state (a job command,
 * fenced by the chief's term), with its name and the reason it ended (NULL or "": not said;
 * cut to what the command holds at a UTF-8 boundary); elsewhere nothing (the coordinator is
 * the chief). */
void gm_chief_record_job(struct gm_agent *a, const char *id, const char *state, long step,
                         const char *name, const char *error);
/* On the chief: proposes the text of job id (len bytes) and the global batch fixed for it
 * (a job-spec command), so a restarted cluster resumes it; a text over GM_CHIEF_SPEC_MAX is
 * not recorded (logged). */
void gm_chief_record_job_spec(struct gm_agent *a, const char *id, const char *text, size_t len,
                              int global_batch);
/* The checkpoints of key committed in the replicated state (at most cap into out): how many,
 * or -1 without consensus. */
long gm_chief_committed(struct gm_agent *a, const char *key, struct gm_ckpt_ref *out, size_t cap);
/* On the chief: raft_barrier (cb once every entry before it is applied).  -EAGAIN when this
 * node is not the chief or raft refuses. */
GM_MUST_CHECK int gm_chief_barrier(struct gm_agent *a, struct raft_barrier *req,
                                   raft_barrier_cb cb);
/* Records one use of the token whose id is token (16 hex digits) and whose uses are limit, in
 * the replicated state: proposed here on the chief, else asked of the chief in CHIEF_REQ
 * ("use"); only a voter's request is taken.  0: done runs later, once, never from inside this
 * call, with 0 when the use is committed, GM_ERR_TOKEN when the token is used up, -ETIMEDOUT
 * when no answer came in 10 s, -ECANCELED when the agent stops.  Else an error and done never
 * runs: -EAGAIN (no chief now), -EHOSTUNREACH (no link to it), -EPERM (not a voter). */
GM_MUST_CHECK int gm_chief_use_token(struct gm_agent *a, const char *token, int limit,
                                     gm_chief_done_fn done, void *arg);
/* 1 when this node is the chief. */
int gm_chief_is_leader(struct gm_agent *a);
/* 1 while consensus runs here (started, not closing): what gm_chief_tick needs to act. */
int gm_chief_active(struct gm_agent *a);
/* 1 when this node is the chief and a voter with an up link could take over. */
int gm_chief_can_hand_over(struct gm_agent *a);
/* Drain: hands leadership to such a voter (raft_transfer) and makes no more changes of its
 * own; logged as event=chief-transfer.  0 when the transfer started (gm_chief_is_leader
 * turns 0 once it is done), -ENOENT when this node is not the chief or nobody can take
 * over. */
GM_MUST_CHECK int gm_chief_hand_over(struct gm_agent *a, const char *why);
/* Hands leadership to node, a voter (recorded and in raft) with an up link, for why (logged
 * as event=chief-transfer): raft_transfer, this node going on as a voter.  Used when the chief
 * is too slow to take part in the job it would coordinate (agent/jobs/job_codec.c).  0 when
 * the transfer started (gm_chief_is_leader turns 0 once it is done, or stays 1 when it
 * failed); -ENOENT when this node is not the chief or node cannot lead; -EBUSY while a change
 * or a transfer is in flight; -EIO when raft refuses. */
GM_MUST_CHECK int gm_chief_hand_to(struct gm_agent *a, const char *node, const char *why);
/* The role the replicated state gives node (GM_CHIEF_ROLE_VOTER when unknown). */
enum gm_chief_role gm_chief_role_of(struct gm_agent *a, const char *node);
/* The current raft term (0 before raft started). */
uint64_t gm_chief_term(struct gm_agent *a);
/* Adds chief, term, quorum, chief_reason and raft_role to a status object. */
void gm_chief_status(struct gm_agent *a, json_t *o);
/* The replicated state (read-only; NULL before open). */
const struct gm_chief_fsm *gm_chief_state(struct gm_agent *a);

#endif
