/*
 * train/sim.h - `gradmesh train --local JOB.ini --simulate-workers N`: N
 * data-parallel replicas in one process, to study codecs without a cluster.
 *
 * Each rank is the real trainer (train/trainer.h) on its own thread, on its
 * shard of the data, with the real codec and collective code over one
 * in-memory transport (train/comm/transport_mem.h).  The transport is touched only
 * under one mutex: at every step each rank starts its operation, and the last
 * rank to arrive drives the transport until all complete (so a run is
 * deterministic whatever the thread timing).  If a rank stops early (error or
 * signal), every link is broken so that the others' operations fail instead of
 * waiting.  BLAS runs single-threaded per replica (the replicas are the
 * parallelism).
 *
 * What each rank does around its optimizer step - the codec from the job's [comm], auto
 * resolved, PowerSGD's and DiLoCo's settings, the parameter-hash checks every 100 steps, after
 * every DiLoCo sync and at the end, DiLoCo's mid-round end - is train/gradsync.h, the same
 * code the agent's job runtime runs; this file is only its executor: threads, the rendezvous
 * and the in-memory transport.
 *
 * Summary: rank 0's (its parameters are every rank's), with samples_per_s for
 * all ranks together, bytes_sent = gradient (DiLoCo: parameter-delta) payload
 * bytes sent by all ranks (hash checks and headers not counted), codec =
 * gm_gradsync_summary_codec() (the strategy's name; "none" for one worker).
 */
#ifndef GM_TRAIN_SIM_H
#define GM_TRAIN_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/job.h"
#include "train/trainer.h"

/* A DiLoCo re-size replayed (`--simulate-resize`): what `codec = auto` does in a cluster when
 * it re-sizes H or changes the deltas' width (train/gradsync.h, "Switching"), at a step a
 * cluster's log names (event=codec-switch step=...), so that a run with re-sizes can be
 * studied here.  From the first round boundary at or after step every rank runs DiLoCo with
 * H = h and bits-bit deltas, as the agents would (the round in flight flushed there, the outer
 * momentum afresh). */
struct gm_sim_resize {
    long step;  /* >= 1 */
    uint32_t h; /* >= 1 */
    int bits;   /* 16 (diloco) or 8 (diloco8) */
};
#define GM_SIM_RESIZE_MAX 16

struct gm_sim_opts {
    int workers;         /* 1 .. 64 */
    bool error_feedback; /* powersgd; false only for the negative control */
    /* re-sizes, in increasing step order (the job's codec must be diloco or diloco8) */
    struct gm_sim_resize resize[GM_SIM_RESIZE_MAX];
    int nresize;
    bool eval_alone; /* rank 0 evaluates alone instead of every rank its slice (tests) */
};

/* "STEP:H[:BITS][,STEP:H[:BITS]...]" (BITS 16 or 8; 16 when left out) into so->resize, steps
 * increasing.  0, or -EINVAL with a reason in why (why_len bytes). */
GM_MUST_CHECK int gm_sim_resize_parse(const char *arg, struct gm_sim_opts *so, char *why,
                                      size_t why_len);

GM_MUST_CHECK int gm_sim_train(const struct gm_job *job, const struct gm_train_opts *opts,
                               const struct gm_sim_opts *so, struct gm_train_summary *sum);

#endif
