/*
 * train/sim.h - `gradmesh train --local JOB.ini --simulate-workers N`: N
 * data-parallel replicas in one process, to study codecs without a cluster.
 *
 * Each rank is the real trainer (train/trainer.h) on its own thread, on its
 * shard of the data, with the real codec and collective code over one
 * in-memory transport (train/transport_mem.h).  The transport is touched only
 * under one mutex: at every step each rank starts its operation, and the last
 * rank to arrive drives the transport until all complete (so a run is
 * deterministic whatever the thread timing).  If a rank stops early (error or
 * signal), every link is broken so that the others' operations fail instead of
 * waiting.  BLAS runs single-threaded per replica (the replicas are the
 * parallelism).
 *
 * Codec from the job's [comm]: fp32, fp16 (mean of the gradients every step,
 * ring), powersgd (rank from [comm], error feedback, fp16 factors, dense fp16
 * warm-up for the first 2% of steps, ring), diloco (local_steps, outer_lr,
 * outer_momentum; fp16 deltas, ring).  auto means fp32 here: in-memory links
 * are the fastest LAN there is, and DESIGN.md sends uncompressed on fast LANs.
 * The ring is used throughout so byte counts compare like with like.
 *
 * A DiLoCo run that ends mid-round ends on the outer parameters of the last
 * sync (the local steps since are dropped), so every rank ends identical.  The
 * parameter-hash check (gm_coll_hashcheck_start) proves the replicas bitwise
 * identical every 100 steps, after every DiLoCo sync and at the end; a
 * difference fails the run with GM_ERR_MISMATCH.
 *
 * Summary: rank 0's (its parameters are every rank's), with samples_per_s for
 * all ranks together, bytes_sent = gradient (DiLoCo: parameter-delta) payload
 * bytes sent by all ranks (hash checks and headers not counted), codec = the
 * codec's name.
 */
#ifndef GM_TRAIN_SIM_H
#define GM_TRAIN_SIM_H

#include <stdbool.h>

#include "common/err.h"
#include "train/job.h"
#include "train/trainer.h"

struct gm_sim_opts {
    int workers;         /* 1 .. 64 */
    bool error_feedback; /* powersgd; false only for the negative control */
};

struct gm_model;
/* Floats one PowerSGD step of the given rank all-reduces for model m after
 * warm-up, with the views the simulation uses (for `gradmesh doctor`). */
GM_MUST_CHECK int gm_sim_psgd_payload(const struct gm_model *m, int rank, size_t *floats);

GM_MUST_CHECK int gm_sim_train(const struct gm_job *job, const struct gm_train_opts *opts,
                               const struct gm_sim_opts *so, struct gm_train_summary *sum);

#endif
