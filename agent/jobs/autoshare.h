/*
 * agent/jobs/autoshare.h - [job] shares = auto on the job's coordinator: each rank's part of
 * the global batch from its measured speed, so that a slow machine adds to the job instead of
 * holding the others back (issue 25).  Pure functions and a small state; tested alone
 * (tests/unit/test_autoshare.c); the job room (agent/jobs/job_codec.c) feeds it and carries the
 * decision out.
 *
 * The measure: each rank's compute speed in samples per second, its share of a step's samples
 * over the step's compute time (data, forward, loss, backward: the trainer's compute_s, which
 * leaves out the wait for the collective), averaged over steps (x0.9).  Members report it with
 * their alpha-beta fit (JOB_REPORT "fit", compute_sps), rank 0 reads its own.  The same timing
 * codec = auto reads for rank 0's compute per step.
 *
 * The rule (gm_autoshare_decide), on every coordinator tick with a speed for every rank:
 *  - balanced shares: the global batch split in proportion to the speeds (gm_autoshare_balance:
 *    largest remainder, train/job.h gm_job_split_by, at least one sample each), which makes the
 *    ranks' compute equally long;
 *  - a step's compute is predicted as the slowest rank's, max_r n_r / speed_r
 *    (gm_autoshare_step_s); the balanced shares replace the running ones when they predict a
 *    step at least GM_AUTOSHARE_HYST times faster, on GM_AUTOSHARE_CONFIRM decisions in a row,
 *    and never within GM_AUTOSHARE_DWELL steps of a group forming (a change of shares forms one):
 *    the hysteresis, so that measurement noise does not re-form groups;
 *  - too slow to help: a rank whose balanced share is below one sample still takes one (a rank
 *    of the group cannot take none) and the decision says so (its why, logged by the caller).
 *    Leaving it out as a spare (a group without it) is not built yet.
 *
 * Carried out by re-forming the group with the new shares (JOB_GROUP "shares"): every rank
 * takes them at the same step, the first of the new group (rank 0's), from rank 0's state; a
 * rank lost meanwhile is simply not in that group.  Loop thread of the coordinator.
 */
#ifndef GM_AGENT_JOBS_AUTOSHARE_H
#define GM_AGENT_JOBS_AUTOSHARE_H

#include <stddef.h>

#include "train/job.h"

#define GM_AUTOSHARE_HYST 1.15 /* predicted step compute at least this much faster */
#define GM_AUTOSHARE_CONFIRM 5 /* decisions in a row (ticks of 200 ms: 1 s) */
#define GM_AUTOSHARE_DWELL 30  /* steps after a group forms before a decision */

/* Shares of global batch g for world ranks of speeds sps (samples/s, each > 0): in proportion,
 * each >= 1 (g >= world), summing to g.  Returns how many ranks' proportional share was below
 * one sample (they were given one). */
int gm_autoshare_balance(const double *sps, int world, int g, int *counts);

/* The predicted compute of a step with counts: max_r counts[r] / sps[r] (seconds). */
double gm_autoshare_step_s(const double *sps, int world, const int *counts);

struct gm_autoshare {
    int confirm;      /* decisions in a row that wanted a change */
    long quiet_until; /* no decision before this step */
};

/* A group formed at step: the count restarts, and no decision for GM_AUTOSHARE_DWELL steps. */
void gm_autoshare_group(struct gm_autoshare *a, long step);

/* One decision at rank 0's step for the running counts cur (world ranks, global batch g) and
 * the speeds sps (an entry <= 0: not measured yet: no decision).  Returns 1 with out filled
 * (and why: one line, for the log) when the shares should change now, else 0. */
int gm_autoshare_decide(struct gm_autoshare *a, const double *sps, int world, int g, const int *cur,
                        long step, int *out, char *why, size_t cap);

#endif
