/*
 * train/trainer.h - the training loop: one process, one model replica.
 *
 * gm_trainer_run() is what `gradmesh train --local` runs and what the agent's
 * trainer thread runs per rank: load the data, build the model (seeded
 * init), then for every epoch reshuffle (seed, epoch), take this rank's
 * shard in full batches (a trailing partial batch is dropped so every rank
 * does the same number of steps), forward, loss, backward, optimizer step
 * with the scheduled learning rate; evaluate on the test split every
 * eval_every epochs and at the end; write the final weights (safetensors,
 * PyTorch names and layout, metadata: job text, step, epoch) atomically.
 *
 * Progress: a bar on stderr when it is a terminal, else one log line every
 * log_every steps.  Checkpoints (weights, optimizer state, data position; see
 * train/ckpt/ckpt.h) every checkpoint_every steps, and a run resumed from
 * one (opts->resume) ends with bitwise the same weights as a run that never
 * stopped: the data order, dropout masks and learning rate depend only on
 * (seed, step), and the optimizer state and step are restored.  A stop request (SIGINT/SIGTERM in
 * the CLI sets *stop) ends the run at the next step boundary and still writes the weights. Runs on
 * the calling thread; no global state.
 */
#ifndef GM_TRAIN_TRAINER_H
#define GM_TRAIN_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/job.h"

struct gm_train_summary {
    char job[64];
    char model[16];
    char device[16]; /* "cpu" or "cuda:N": what the run trained on */
    char codec[16];
    int epochs; /* completed */
    long steps;
    double test_accuracy; /* percent */
    double test_loss;
    double train_loss;    /* mean over the last epoch */
    double samples_per_s; /* training samples per second of training time (no eval) */
    double train_s;
    double wall_s;
    uint64_t bytes_sent;
    size_t params;
    size_t trainable; /* of params: the rest is frozen ([model] freeze) */
    long peak_rss_kb;
    int interrupted;
    char checkpoint[1024];
    char error[400]; /* a failed run: the line that says more than its error code (the data
                      * check's bad image), or "" */
};

struct gm_model;
struct gm_optim;
struct gm_st_tensor;
struct gm_st_file;

/*
 * The replica's state at a step boundary: what a group must hold identical,
 * and what it may replace when its membership changes.
 *
 * Data order.  The global batch G is fixed for the life of a run (job
 * global_batch, or batch * the initial world).  Epoch e is the permutation
 * of the training set drawn from (seed, e); step s of the epoch takes its
 * positions [s*G, (s+1)*G), so steps_per_epoch = floor(n / G) whatever the
 * world.  Rank r of world W takes a contiguous share of that block, the
 * ranks in order: n_r samples by the split in force (share_n/share_w below;
 * train/job.h gm_job_split_by): equal, G/W samples, the first G mod W ranks
 * one more, or in proportion to the weights ([job] shares = 3:1, largest
 * remainder), so every sample of the epoch is taken by exactly one rank.
 * When shares differ, each rank scales its mean gradient by W*n_r/G before
 * the all-reduce takes the mean, so the update is the sample-weighted mean
 * over all G samples exactly as one replica with batch G would take it (up
 * to float summation order).  Exception: a rank whose optimizer steps on its
 * own gradients (DiLoCo; gm_train_comm.local_grads) is not scaled: its
 * inner steps take its own batch mean, and its outer contribution is
 * weighted by the samples it processed (train/gradsync.h).  A membership
 * change therefore re-shards at once, at the next step, with nothing to
 * remember but the step (and the weights, which fixed shares keep only while
 * the world is the one they list: a different world splits equally, logged).
 */
struct gm_train_state {
    struct gm_model *model; /* borrowed */
    struct gm_optim *optim; /* borrowed */
    long step;              /* the next step to take, counted from 0 over the run */
    long steps_per_epoch, total_steps;
    int global_batch;
    int rank, world; /* this replica's place in the group for the next step */
    double loss;     /* of the last step taken */
    /* The split of the global batch for the next step: share_n = world weights share_w, or
     * share_n = 0 for equal shares.  Set from [job] shares; a hook may change it at a step
     * boundary (the same value on every rank, at the same step). */
    int share_n;
    uint32_t share_w[GM_JOB_SHARES_MAX];
    int share_samples; /* this rank's samples in the step being taken (reduce_grads on) */
};

/* Offset and length of rank's share of a global batch g split over world, equally. */
void gm_train_share(int g, int world, int rank, int *off, int *n);
/* The same by weights w[0..world) (NULL: equal), train/job.h gm_job_split_by. */
void gm_train_share_by(int g, int world, const uint32_t *w, int rank, int *off, int *n);
/* st's split of its global batch as "72:24" (samples of each rank, in rank order) into buf. */
const char *gm_train_shares_text(const struct gm_train_state *st, char *buf, size_t len);

/*
 * Optional communication hooks (train/sim.c for --simulate-workers; the
 * agent's job runtime).  start runs once before the first step (e.g. take
 * rank 0's initial state); reduce_grads after backward and before the
 * optimizer step (replace the gradients by their reduction over ranks);
 * after_step after the optimizer step (local SGD / DiLoCo, hash checks).
 * st->step is the step being taken in reduce_grads, but already the next
 * one in after_step (the step just taken is st->step - 1): the state there
 * is the one after the step, so a resync inside after_step hands the new
 * group that state with the step that matches it, and no rank takes the
 * step twice.
 * A hook that returns GM_ERR_REGROUP says the group changed: the trainer
 * calls resync, which makes st identical across the new group (rank,
 * world, step, parameters, optimizer state), and continues from st->step.
 * Any other negative return ends the run with that error.  finish runs on
 * every rank once the last step is taken (not when the run is stopped
 * early), before rank 0 writes the weights.  Only rank 0 logs progress,
 * reports evaluations (which the ranks share when eval_sum is set) and writes weights.  min_world:
 * the smallest world the run may shrink to (sizes the per-rank batch buffers; 0: world).
 */
struct gm_train_comm {
    int rank, world, min_world;
    int (*start)(void *ctx, struct gm_train_state *st);
    int (*reduce_grads)(void *ctx, struct gm_train_state *st);
    int (*after_step)(void *ctx, struct gm_train_state *st);
    int (*resync)(void *ctx, struct gm_train_state *st);
    /* optional, for overlap: before backward, and as each layer's gradients are final
     * (tensors [first, first + n), already weighted for unequal shares) */
    int (*backward_begin)(void *ctx, struct gm_train_state *st);
    void (*grads_ready)(void *ctx, size_t first_tensor, size_t n);
    /* optional: true when this step's optimizer steps on this rank's own gradients (DiLoCo's
     * inner steps), which are then not scaled for unequal shares; NULL: false */
    bool (*local_grads)(void *ctx);
    /* optional: the final state, on every rank (the agent logs its parameter hash) */
    void (*finish)(void *ctx, const struct gm_train_state *st);
    /* optional: rank 0's progress after every step (loss, samples/s), for the agent */
    void (*progress)(void *ctx, const struct gm_train_state *st, int epoch, double loss,
                     double samples_per_s);
    /* optional: this rank's codec state for a checkpoint: up to cap tensors (data borrowed
     * until the next hook call), named GM_CKPT_CODEC_PREFIX..., *codec its name; returns how
     * many (0: none) */
    size_t (*codec_state)(void *ctx, struct gm_st_tensor *t, size_t cap, const char **codec);
    /* optional: a rank that resumes from the checkpoint f (path origin, written by a run of
     * codec `codec`, "" for none) takes its codec state from it (train/gradsync.h
     * gm_gradsync_ckpt_restore); 0 or an error (logged), which fails the resume */
    int (*codec_restore)(void *ctx, const struct gm_st_file *f, const char *codec,
                         const char *origin);
    /* optional: the parameters a test evaluation is of, when they are not this replica's own
     * (DiLoCo: its outer parameters, the model every rank agrees on; train/gradsync.h
     * gm_gradsync_outer_params): n floats from the start of the model's parameters (the
     * trainable prefix), borrowed until the next hook call; NULL: the replica's own */
    const float *(*eval_params)(void *ctx, size_t *n);
    /* optional: after steps_done steps (an epoch's end), how many more steps until the
     * parameters eval_params names take in an update still in flight (overlapped DiLoCo:
     * train/gradsync.h gm_gradsync_eval_defer), the same on every rank; 0: none.  The
     * epoch's evaluation then runs that many steps later, of the model the epoch made, and
     * its event=epoch line says how long after the epoch's end (eval_delay_s).  A regroup
     * before then makes rank 0 evaluate it alone at once; a stop, an interrupted run's
     * evaluation, stands in for it.  NULL: never put off. */
    long (*eval_defer)(void *ctx, long steps_done, long total_steps);
    /* optional, both or neither: a sharded evaluation.  At an epoch's evaluation every rank
     * evaluates its slice of the test set (split as the global batch is: gm_train_share_by
     * with the step's shares) instead of rank 0 all of it, and eval_sum adds v[0..n) over the
     * ranks, in place.  The buffers (batch norm's running statistics) evaluated with are the
     * ranks' mean when eval_fsum is set, else rank 0's: eval_bcast copies rank 0's buf[0..n)
     * to every rank, in place, and eval_fsum adds buf[0..n) over the ranks in float, the same
     * sum on every rank (each rank's own buffers are put back after, but at the run's end,
     * where they stay for the weights written: train/trainer.c evaluate_shard).  All are
     * collectives: every rank calls them at the same evaluation with the same n.  The result
     * is rank 0's evaluation of the whole set, with those buffers, up to float rounding of
     * the loss; an error (a group that broke) makes rank 0 evaluate alone, with its own.
     * NULL: rank 0 evaluates alone (as after a stop, always). */
    int (*eval_sum)(void *ctx, long step, double *v, size_t n);
    int (*eval_bcast)(void *ctx, long step, float *buf, size_t n);
    int (*eval_fsum)(void *ctx, long step, float *buf, size_t n); /* optional even then */
    void *ctx;
};

/*
 * Optional observer of a run (train/tbevents.h writes TensorBoard events from it; the
 * agent's job runtime can feed agent/service/metrics.h the same way): on_step after every optimizer
 * step, on_eval after every test evaluation (rank 0 reports them).  Called on the trainer's
 * thread of the replica given them (sim.c gives them to rank 0 only); they must not block
 * for long.  The step time split: compute is batch, forward, loss and backward (with the
 * overlap hooks, the collective runs during it); collective is the wait in reduce_grads
 * after backward; optimizer is the optimizer step and after_step.
 */
struct gm_train_step_info {
    long step;            /* steps done, this one included (1, 2, ...) */
    int epoch;            /* 1-based */
    double loss;          /* this step's batch loss */
    double lr;            /* the learning rate this step used */
    double compute_s;     /* data, forward, loss, backward */
    double data_s;        /* of compute_s: waiting for the loader's batch */
    double collective_s;  /* reduce_grads: waiting for the collective (0 alone) */
    double optimizer_s;   /* optimizer step and after_step */
    double samples_per_s; /* this step's batch / its wall time */
    int epoch_end;        /* 1: the epoch's last step */
    int samples;          /* this rank's share of the batch (its compute_s is for these) */
};

struct gm_train_eval_info {
    long step; /* steps done at the epoch's end (an evaluation put off, eval_defer, is of the
                * model those steps made) */
    int epoch; /* 1-based; the epoch just finished */
    double test_loss, test_accuracy; /* percent */
    double epoch_loss;               /* mean training loss of the epoch */
    double epoch_samples_per_s;
};

struct gm_train_hooks {
    void (*on_step)(void *ctx, const struct gm_train_step_info *s);
    void (*on_eval)(void *ctx, const struct gm_train_eval_info *e);
    void *ctx;
};

struct gm_ckpt_ref;

struct gm_train_opts {
    int progress;                     /* 1: terminal progress bar; 0: log lines */
    volatile sig_atomic_t *stop;      /* borrowed, may be NULL */
    const char *out;                  /* overrides job->out when not NULL */
    const struct gm_train_comm *comm; /* borrowed, may be NULL: one replica alone */
    int keep_on_stop; /* every rank (not only 0) writes its weights when stopped early */
    const struct gm_train_hooks *hooks; /* borrowed, may be NULL */
    /* Checkpoints (train/ckpt/ckpt.h), written by rank 0 when the job's checkpoint_every > 0:
     * every checkpoint_every steps, at the end and when stopped early, into ckpt_dir (NULL:
     * the job's checkpoint_dir), keeping the newest checkpoint_keep.  term goes into each. */
    const char *ckpt_dir;
    uint64_t term;
    /* Optional: called on rank 0's thread after each checkpoint is written and committed
     * (its path, SHA-256 hex and step); the agent streams it to the other members. */
    void (*on_checkpoint)(void *ctx, const char *path, const char *sha256, long step);
    /* Optional: called on rank 0's threads when the checkpoint of step (path) could not be
     * written (err: ENOSPC for a full disk); training goes on (logged). */
    void (*on_checkpoint_failed)(void *ctx, const char *path, long step, int err);
    void *ckpt_ctx;
    /* Resume from this checkpoint file, or from the newest valid one of this directory.  A
     * refused file (corrupt, truncated, foreign: logged) falls back to the newest valid one
     * before it in its directory; none usable fails the run with GM_ERR_CONFIG. */
    const char *resume;
    /* resume names a directory that may hold no usable checkpoint: start from the beginning
     * then (logged) instead of failing (the agent's coordinator) */
    int resume_optional;
    /* committed_only (with resume a directory): only the checkpoints committed[0..ncommitted)
     * count (the cluster's raft-committed ones, train/ckpt/ckpt.h gm_ckpt_ref): the newest of
     * them whose file is here, valid and of the committed SHA-256; a missing, refused or
     * different newer one is logged and the committed one before it used.  None usable: with
     * resume_optional the run starts at step 0 (logged), else GM_ERR_CONFIG. */
    int committed_only;
    const struct gm_ckpt_ref *committed; /* borrowed */
    size_t ncommitted;
};

/* Returns 0 or an error (GM_ERR_CONFIG / GM_ERR_DATA already logged with the
 * file and the problem; GM_ERR_NUMERIC when the loss turns NaN/Inf). */
int gm_trainer_run(const struct gm_job *job, const struct gm_train_opts *opts,
                   struct gm_train_summary *sum) GM_MUST_CHECK;

/* What gm_trainer_check found out about a job. */
struct gm_train_check {
    size_t n_train;      /* training samples */
    int global_batch;    /* over the world it was asked for */
    uint64_t ckpt_bytes; /* about the size of one checkpoint (a little over) */
};

/* Checks, without training, what gm_trainer_run checks before its first step: the global
 * batch over world workers, the dataset opened as the run opens it (its headers and sizes:
 * a garbage IDX file is refused here), at least one global batch of training samples, the
 * model built on the data's images (on the CPU, one sample: the shapes, not the device), the
 * schedule.  A refusal is logged as the one line `train --local` prints for it (the calling
 * thread's gm_log_last_error) and returned (GM_ERR_CONFIG, GM_ERR_DATA, ...).  Any thread
 * (the agent's coordinator runs it on libuv's threadpool at submit). */
int gm_trainer_check(const struct gm_job *job, int world, struct gm_train_check *out) GM_MUST_CHECK;

/* Whether dir's file system has room for a job's checkpoints: the newest keep and the one
 * being written (before the oldest is pruned), each bytes, less what checkpoints already in dir
 * hold.  0, or -ENOSPC with one line logged naming dir, what they need and what is free.
 * *need, *avail: the figures (avail UINT64_MAX when statvfs fails: not checked, warned). */
int gm_trainer_ckpt_space(const char *dir, uint64_t each, int keep, uint64_t *need,
                          uint64_t *avail) GM_MUST_CHECK;

/* Writes the summary as one JSON object (the field names docs/ARCHITECTURE.md lists). */
int gm_train_summary_write_json(const struct gm_train_summary *sum, const char *path) GM_MUST_CHECK;

#endif
