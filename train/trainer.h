/*
 * train/trainer.h - the training loop: one process, one model replica.
 *
 * gm_trainer_run() is what `gradmesh train --local` runs and what the agent's
 * trainer thread will run per rank: load the data, build the model (seeded
 * init), then for every epoch reshuffle (seed, epoch), take this rank's
 * shard in full batches (a trailing partial batch is dropped so every rank
 * does the same number of steps), forward, loss, backward, optimizer step
 * with the scheduled learning rate; evaluate on the test split every
 * eval_every epochs and at the end; write the final weights (safetensors,
 * PyTorch names and layout, metadata: job text, step, epoch) atomically.
 *
 * Progress: a bar on stderr when it is a terminal, else one log line every
 * log_every steps.  A stop request (SIGINT/SIGTERM in the CLI sets *stop)
 * ends the run at the next step boundary and still writes the weights.
 * Runs on the calling thread; no global state.
 */
#ifndef GM_TRAIN_TRAINER_H
#define GM_TRAIN_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/job.h"

struct gm_train_summary {
    char job[64];
    char model[16];
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
    long peak_rss_kb;
    int interrupted;
    char checkpoint[1024];
};

struct gm_model;

/*
 * Optional communication hook (train/sim.c for --simulate-workers; the agent
 * later): the replica trains on shard `rank` of `world`, reduce_grads runs
 * after backward and before the optimizer step (replace m's gradients by
 * their reduction over ranks), after_step after the optimizer step (local
 * SGD / DiLoCo).  A negative return ends the run with that error.  Ranks
 * other than 0 neither log progress, evaluate nor write weights.
 */
struct gm_train_comm {
    int rank, world;
    int (*reduce_grads)(void *ctx, struct gm_model *m, long step, long total_steps);
    int (*after_step)(void *ctx, struct gm_model *m, long step, long total_steps);
    void *ctx;
};

/*
 * Optional observer of a run (train/tbevents.h writes TensorBoard events from it; the
 * agent's job runtime can feed agent/metrics.h the same way): on_step after every optimizer
 * step, on_eval after every test evaluation.  Called on the trainer's thread, on rank 0 only
 * (sim.c's other ranks run without hooks); the callbacks must not block for long.
 */
struct gm_train_step_info {
    long step;            /* steps done, this one included (1, 2, ...) */
    int epoch;            /* 1-based */
    double loss;          /* this step's batch loss */
    double lr;            /* the learning rate this step used */
    double compute_s;     /* data, forward, loss, backward */
    double collective_s;  /* reduce_grads: waiting for the collective (0 alone) */
    double optimizer_s;   /* optimizer step and after_step */
    double samples_per_s; /* this step's batch / its wall time */
};

struct gm_train_eval_info {
    long step;                       /* steps done at the evaluation */
    int epoch;                       /* 1-based; the epoch just finished */
    double test_loss, test_accuracy; /* percent */
    double epoch_loss;               /* mean training loss of the epoch */
    double epoch_samples_per_s;
};

struct gm_train_hooks {
    void (*on_step)(void *ctx, const struct gm_train_step_info *s);
    void (*on_eval)(void *ctx, const struct gm_train_eval_info *e);
    void *ctx;
};

struct gm_train_opts {
    int progress;                       /* 1: terminal progress bar; 0: log lines */
    volatile sig_atomic_t *stop;        /* borrowed, may be NULL */
    const char *out;                    /* overrides job->out when not NULL */
    const struct gm_train_comm *comm;   /* borrowed, may be NULL: one replica alone */
    const struct gm_train_hooks *hooks; /* borrowed, may be NULL */
};

/* Returns 0 or an error (GM_ERR_CONFIG / GM_ERR_DATA already logged with the
 * file and the problem; GM_ERR_NUMERIC when the loss turns NaN/Inf). */
int gm_trainer_run(const struct gm_job *job, const struct gm_train_opts *opts,
                   struct gm_train_summary *sum) GM_MUST_CHECK;

/* Writes the summary as one JSON object (DESIGN.md field names). */
int gm_train_summary_write_json(const struct gm_train_summary *sum, const char *path) GM_MUST_CHECK;

#endif
