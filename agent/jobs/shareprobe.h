/*
 * agent/jobs/shareprobe.h - [job] shares = auto's speed probe on one rank (agent/jobs/autoshare.h
 * "The speed probe"): the job's model timed here, forward and backward on the CPU, at two
 * sample counts, before the job's first group.  A scratch model of its own (random weights,
 * random inputs: the CPU kernels' time does not depend on the values), so nothing of the job,
 * its weights, its data order or any replica, is touched; no optimizer step, no collective.
 * Any thread (the job room runs it on libuv's threadpool, agent/jobs/job_check.c and
 * job_member.c); it blocks for its budget.
 */
#ifndef GM_AGENT_JOBS_SHAREPROBE_H
#define GM_AGENT_JOBS_SHAREPROBE_H

#include <stddef.h>

#include "agent/jobs/autoshare.h"
#include "common/err.h"
#include "train/job.h"

#define GM_SHAREPROBE_BLOCK_S 0.125 /* a block of passes at one count: many quota periods */
#define GM_SHAREPROBE_BLOCKS 2       /* blocks per count, alternated (n0 n1 n0 n1) */
#define GM_SHAREPROBE_BUDGET_S 1.2   /* past the warm-up: no new block after this */

/* What the probe found: the points and the model's size (for the collective's cost). */
struct gm_shareprobe {
    struct gm_autoshare_probe p;
    size_t params; /* the model's trainable parameters */
    double cost_s; /* the probe's wall time, model building included */
};

/* Times job's model for a rank of world at global batch job->optim.global_batch: the equal
 * share n = ceil(g / world) (fewer where a pass at n would take more than a sixth of the budget:
 * the line extrapolates) and n / 2, in blocks of passes at one count, alternated (n, n/2, n,
 * n/2), each block timed whole over GM_SHAREPROBE_BLOCK_S at least (a quota's throttle falls in
 * whichever pass runs out of it: only a block that spans many periods reads the cap); no new
 * block past GM_SHAREPROBE_BUDGET_S.  Only on the CPU: a job that may train on a GPU here
 * (device not cpu, this build's layers run on CUDA and a GPU answers) returns -ENOTSUP (the
 * probe would not time what the rank runs).  0 or a negative error; why filled (one line) on an
 * error. */
GM_MUST_CHECK int gm_shareprobe_run(const struct gm_job *job, int world, struct gm_shareprobe *out,
                                    char *why, size_t cap);

#endif
