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

struct gm_train_opts {
    int progress;                /* 1: terminal progress bar; 0: log lines */
    volatile sig_atomic_t *stop; /* borrowed, may be NULL */
    const char *out;             /* overrides job->out when not NULL */
};

/* Returns 0 or an error (GM_ERR_CONFIG / GM_ERR_DATA already logged with the
 * file and the problem; GM_ERR_NUMERIC when the loss turns NaN/Inf). */
int gm_trainer_run(const struct gm_job *job, const struct gm_train_opts *opts,
                   struct gm_train_summary *sum) GM_MUST_CHECK;

/* Writes the summary as one JSON object (DESIGN.md field names). */
int gm_train_summary_write_json(const struct gm_train_summary *sum, const char *path) GM_MUST_CHECK;

#endif
