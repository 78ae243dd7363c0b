/*
 * agent/drain.h - SIGTERM on the chief: finish the step, hand leadership
 * over, exit.
 *
 * On SIGTERM (agent.c's signal handler) a node that is the chief, with a
 * voter linked that can take over, drains instead of stopping at once:
 *   1. step: its trainer ends after the step in flight (gm_jobs_leave): the
 *      other ranks finish that step with it, so every survivor holds the
 *      state of the same finished step; the job is not ended (no JOB_END),
 *      only left.  At most 8 s (a longer step is cut: the survivors then resume
 *      from the step before, as after a kill); no job: nothing to wait for.
 *   2. transfer: leadership goes to a linked voter (raft_transfer through
 *      gm_chief_hand_over, logged as event=chief-transfer), which is elected
 *      at once instead of after an election timeout.  At most 3 s.  Both bounds
 *      keep a drain under the unit's TimeoutStopSec=15s.
 *   3. exit: the normal stop (BYE on every link), exit status 0.  The members
 *      see their coordinator leave, and the new chief takes the job over at
 *      its next job tick from the step the survivors share (agent/jobs/job_partition.c's
 *      partition_tick: no rollback), without the members' 30 s orphan wait.
 * Drain decides, the agent acts: gm_drain_tick answers "stop now" and agent.c
 * stops (drain.c never calls up into agent.c).  Each phase is logged (event=drain-*).  Any node
 * that is not the chief, or a chief with nobody to hand over to, stops at once as before: its peers
 * see a peer leave.  A second SIGTERM or SIGINT during a drain stops at once.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_DRAIN_H
#define GM_AGENT_DRAIN_H

#include <stdint.h>

#include "common/err.h"

struct gm_agent;

/* SIGTERM: 1 when a drain started (the caller then ticks it at once and on every agent
 * tick, and stops when the tick says so), else 0 (stop now). */
int gm_drain_start(struct gm_agent *a);
/* 1 while a drain is under way. */
int gm_drain_active(const struct gm_agent *a);
/* Moves a drain on (every agent tick): 1 when it is over and the agent must stop now,
 * else 0 (also when no drain is under way). */
GM_MUST_CHECK int gm_drain_tick(struct gm_agent *a, uint64_t now);

#endif
