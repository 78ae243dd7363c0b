/*
 * agent/jobs/rank.h - one rank of a distributed job inside the agent: the trainer
 * thread, and the bridge between it and the loop thread.
 *
 * Threads (docs/ARCHITECTURE.md "Processes and threads").  gm_rank_start()
 * spawns the trainer thread, which runs the same gm_trainer_run() as `train
 * --local`, with communication hooks that run train/gradsync.h's strategy
 * (the one the simulation runs).  The trainer never calls libuv: each
 * collective operation goes to the loop as a request appended to a FIFO under
 * a mutex plus uv_async_send; the loop starts the requests on the group's
 * gm_coll in that order, and each completion wakes the trainer through a
 * condition variable.  The trainer waits for each request at once (run), or,
 * for the buckets of the gradient all-reduce during backward, later (submit,
 * then wait).  Everything else here (gm_rank_set_group, _group_broken, _stop,
 * the exit callback) runs on the loop thread.
 *
 * Groups.  The job room (agent/jobs/job.c) hands the rank a group: a generation,
 * this rank's place, the world size and an agent/jobs/xport.h transport (owned by
 * the rank from then on).  An operation that fails because a link broke
 * marks the group broken, tells the job room (on_group_failed, so the
 * coordinator hears of it) and returns GM_ERR_REGROUP to the trainer, which
 * calls resync: wait for a newer group, then broadcast rank 0's state
 * (parameters, optimizer state, optimizer and training step) to every rank
 * and go on from that step.  The first group is taken the same way (the
 * start hook), so rank 0's initial weights reach every rank, and a member
 * that comes back gets the current state at a step boundary.  Codec state
 * (PowerSGD's Q and error feedback, DiLoCo's outer state) starts afresh with
 * every group.
 *
 * Switching codec (codec = auto, gm_rank_switch): the trainer checks for an
 * announced switch at every step boundary, before backward_begin, i.e. before
 * any of the step's communication, and replaces its gradsync there (the old
 * one's state dropped; DiLoCo left only at a round boundary, see
 * train/gradsync.h "Switching").  The loop times every gradient/parameter op
 * for the rank's alpha-beta fit (gm_rank_get_fit), which the coordinator
 * re-decides from.
 *
 * When the last step is taken, every rank hashes its parameters (progress
 * params_sha256; the job room logs it as event=job-final-hash), so a rank that
 * rejoined can be seen to end with the same weights as rank 0 wrote.
 *
 * Errors that are not about the group (GM_ERR_MISMATCH from a hash check,
 * GM_ERR_NUMERIC, a bad job) end the run.  gm_rank_stop() ends it at the next
 * step boundary; every rank still writes the weights of its last finished
 * step (train/trainer.h keep_on_stop).
 */
#ifndef GM_AGENT_JOBS_RANK_H
#define GM_AGENT_JOBS_RANK_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "train/ckpt/ckpt.h"
#include "train/job.h"
#include "train/trainer.h"

struct gm_rank;
struct gm_xport;

struct gm_rank_progress {
    long step, total_steps;
    int epoch; /* 0-based, of the last step */
    int rank, world;
    uint32_t generation;
    double loss, samples_per_s;
    double compute_s; /* a step's compute (data, forward, loss, backward), averaged (x0.9) */
    double sync_s;    /* one DiLoCo sync (gm_gradsync_diloco_sync_s), the last codec's kept
                       * until the running one has synced; 0: none in this group yet */
    /* what shares = auto balances (agent/jobs/autoshare.h), averaged over steps (x0.9): a
     * step's wall time (compute, collective, optimizer) and its collective part; and this
     * rank's samples in the last step */
    double step_s, coll_s;
    int share;
    /* the part of coll_s this rank's own machine stalled: the run delay (runnable, not
     * running: a CPU quota's throttle, other work on its cores) of the loop thread, which runs
     * the collective, and of the trainer, both inside its waits for it (rank.c wait_done), per
     * step, averaged (x0.9).  In lockstep a rank held up inside its collective holds everyone
     * there, so the wall clock alone cannot say whose that time is; this says it is this
     * rank's (agent/jobs/autoshare.h) */
    double stall_s;
    /* the compute this rank's collective took from its trainer a step: the loop thread's CPU
     * outside the trainer's waits, as far as the trainer was held off a core meanwhile
     * (train/gradsync.h gm_gradsync_cpu_taken; 0 on an uncapped host with a spare core),
     * averaged (a mean over a group's or codec's first 10 steps, then x0.9); what codec =
     * auto prices beside the links (agent/jobs/autocodec.h) */
    double cpu_taken_s;
    int rounds;           /* 1: those are DiLoCo's, averaged by rounds (agent/jobs/autoshare.h) */
    int round_folds;      /* and how many rounds are in them (a new one: a new reading) */
    double test_accuracy; /* NAN until evaluated */
    uint64_t hash_checks;
    /* "" until the last step is taken; then the SHA-256 (hex) of the final parameters: every
     * tensor in PyTorch layout as little-endian float32, tensors in name order, i.e.
     * sha256(b"".join(t[k].tobytes() for k in sorted(t))) over the safetensors file rank 0
     * writes.  Every rank of a finished job holds the same one. */
    char params_sha256[65];
    /* a run that went on from a checkpoint: its step (-1: none, or not known yet) and path */
    long resumed_step;
    char resumed_from[256];
    long resumed_total_steps; /* the run the checkpoint was written by: its steps (0: unknown) */
};

/* Checkpoints of a rank (train/ckpt/ckpt.h): rank 0 writes them into dir every
 * checkpoint_every steps of the job, at the end and when stopped; resume: go on from the newest
 * valid checkpoint of this job in dir, if there is one (the coordinator; the other ranks take
 * its state in the first resync). */
#define GM_RANK_COMMITTED_MAX 64
struct gm_rank_ckpt {
    const char *dir; /* borrowed (copied); NULL: no checkpoints */
    bool resume;
    uint64_t term; /* recorded in each checkpoint */
    /* committed_only: resume only from one of committed[0..ncommitted) (the cluster's
     * raft-committed checkpoints of this job; copied, at most GM_RANK_COMMITTED_MAX), the
     * newest usable one (train/trainer.h) */
    bool committed_only;
    const struct gm_ckpt_ref *committed; /* borrowed (copied) */
    size_t ncommitted;
};

struct gm_rank_ops {
    /* The trainer thread ended (err 0: finished or stopped); sum is its summary. */
    void (*on_exit)(struct gm_rank *rk, int err, const struct gm_train_summary *sum, void *arg);
    /* An operation of group gen failed on a link (err): a new group is needed. */
    void (*on_group_failed)(struct gm_rank *rk, uint32_t gen, int err, void *arg);
    /* Optional: rank 0 wrote and committed a checkpoint (path, SHA-256 hex, step). */
    void (*on_checkpoint)(struct gm_rank *rk, const char *path, const char *sha256, long step,
                          void *arg);
    /* Optional: rank 0 could not write the checkpoint of step (path) (err; training goes on). */
    void (*on_checkpoint_failed)(struct gm_rank *rk, const char *path, long step, int err,
                                 void *arg);
};

/* job is copied (its text too); out: where rank 0 writes the weights; ck may be NULL. */
GM_MUST_CHECK int gm_rank_start(uv_loop_t *loop, const struct gm_job *job, const char *out,
                                const struct gm_rank_ckpt *ck, const struct gm_rank_ops *ops,
                                void *arg, struct gm_rank **rk);
/* A new group; x is owned by the rank from now on (also on error).  islands (world entries,
 * copied; NULL: none): each rank's LAN island as the lowest rank in it; when they split the
 * world the group's collectives run the hierarchical all-reduce (GM_COLL_HIER: fp32 inside an
 * island, the strategy's codec between the island leaders). */
GM_MUST_CHECK int gm_rank_set_group(struct gm_rank *rk, uint32_t gen, int rank, int world,
                                    struct gm_xport *x, const int *islands);
/* The strategy of every group from the next one on (codec = auto: the coordinator's current
 * pick; copied; its algo is set from the group's islands).  Without it the job's [comm]. */
struct gm_gradsync_strategy;
void gm_rank_set_codec(struct gm_rank *rk, const struct gm_gradsync_strategy *s);
/* The samples per rank (counts[0..n), summing to the global batch) of every group from the
 * next one on whose world is n (shares = auto: the coordinator's current ones); n = 0: none,
 * the trainer splits by the job's [job] shares.  Copied.  Loop thread. */
void gm_rank_set_shares(struct gm_rank *rk, const int *counts, int n);
/* This rank's alpha-beta fit of its gradient and parameter collectives (train/gradsync.h:
 * seconds against the bytes this rank sent in each op; ops that wait for rank 0's evaluation
 * or a resync are left out) and how many ops it has seen.  Any thread. */
struct gm_coll_link;
void gm_rank_get_fit(struct gm_rank *rk, struct gm_coll_link *fit, uint64_t *n);
/* The fit's prior (train/gradsync.h gm_gradsync_ab_prior): the measured link this rank's
 * collectives wait on, so that samples of one small message size (a compressing codec) do not
 * read as a free link.  Any thread. */
void gm_rank_set_fit_prior(struct gm_rank *rk, double alpha_s, double bytes_per_s);
/* Switching codec mid-run (codec = auto).  The coordinator announces that group gen runs `to`
 * from step on (sequence number seq); every rank takes it at the boundary of the first step
 * >= step at which its strategy may be left (gm_gradsync_switch_step: DiLoCo at a round
 * boundary, which every rank computes alike), before any of that step's communication, so all
 * switch at the same step.  Returns 0 when it will; -ESTALE when this rank is not in group
 * gen; -EALREADY when its trainer has already passed that step (*at_step: the last step
 * boundary it passed); -ERANGE when the run ends before the boundary it would take effect at
 * (a DiLoCo round boundary past the last step).  wait (rank 0): at that step the trainer waits for
 * gm_rank_switch_answer: ok, every member accepted; not ok, one could not, and the trainer
 * leaves the group (GM_ERR_REGROUP: the coordinator re-forms it with the new codec, so the
 * ranks still agree).  A new group drops a pending switch.  Loop thread. */
GM_MUST_CHECK int gm_rank_switch(struct gm_rank *rk, uint32_t gen, uint32_t seq, long step,
                                 const struct gm_gradsync_strategy *to, bool wait, long *at_step);
void gm_rank_switch_answer(struct gm_rank *rk, uint32_t seq, bool ok);
/* The current group's transport (borrowed), NULL before the first group. */
struct gm_xport *gm_rank_xport(struct gm_rank *rk);
uint32_t gm_rank_generation(const struct gm_rank *rk);
/* Why the trainer ended with an error: the line it logged last (the one `train --local` prints,
 * e.g. "DIR: 60000 training samples, fewer than one global batch of 30000000"), else the
 * error's name; "" when it ended without one.  From on_exit until gm_rank_free. */
const char *gm_rank_error(const struct gm_rank *rk);
/* The group is gone (a member left): its operations fail with GM_ERR_REGROUP. */
void gm_rank_group_broken(struct gm_rank *rk);
/* Ends the run at the next step boundary; why is logged by the caller. */
void gm_rank_stop(struct gm_rank *rk);
void gm_rank_get_progress(struct gm_rank *rk, struct gm_rank_progress *p);
/* From now on the trainer thread publishes each step (step time split, samples/s, loss,
 * step, epoch; accuracy after evaluations) to m (agent/service/metrics.h, borrowed: it must outlive
 * the trainer thread) under the job's id and name, and at its end the final values
 * (gm_metrics_job_finish); NULL: stop.  Any thread. */
struct gm_metrics;
void gm_rank_set_metrics(struct gm_rank *rk, struct gm_metrics *m, const char *job_id);
/* After on_exit: joins the thread, frees everything (asynchronously for the
 * libuv handles and any collective still winding down).  NULL-safe. */
void gm_rank_free(struct gm_rank *rk);

#endif
