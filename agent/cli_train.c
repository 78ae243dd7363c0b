/*
 * agent/cli_train.c - `gradmesh train --local JOB.ini [--summary-json FILE]
 * [--out FILE] [--no-progress]`: the single-machine trainer, no network.
 *
 * SIGINT/SIGTERM set a flag (the handler does nothing else); the trainer
 * stops at the next step boundary, saves the weights and the run ends with
 * exit code 130.  Exit codes otherwise as in DESIGN.md: 0, 1 runtime, 2
 * usage, 78 bad job or data file.
 */
#include <getopt.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "train/job.h"
#include "train/trainer.h"

/* The one flag a signal handler may touch. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gradmesh train --local JOB.ini [--summary-json FILE] [--out FILE]\n"
               "                      [--no-progress]\n"
               "\n"
               "Trains the job on this machine alone (the single-machine baseline).\n"
               "  --local JOB.ini      the job file (see README.md, \"Job file\")\n"
               "  --summary-json FILE  write the run summary (accuracy, speed, ...) as JSON\n"
               "  --out FILE           final weights (safetensors); default: the job's out\n"
               "  --no-progress        log lines instead of a progress bar on a terminal\n"
               "Distributed jobs are submitted to the agent with `gradmesh submit`.\n");
}

int gm_cli_train(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"local", required_argument, NULL, 'l'}, {"summary-json", required_argument, NULL, 's'},
        {"out", required_argument, NULL, 'o'},   {"no-progress", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *job_path = NULL, *summary = NULL, *out = NULL;
    int progress = isatty(2) && getenv("JOURNAL_STREAM") == NULL;
    struct gm_job job;
    struct gm_train_summary sum;
    struct gm_train_opts opts = {0};
    struct sigaction sa;
    int c, err;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            job_path = optarg;
            break;
        case 's':
            summary = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'n':
            progress = 0;
            break;
        case 'h':
            usage(stdout);
            return GM_EXIT_OK;
        default:
            usage(stderr);
            return GM_EXIT_USAGE;
        }
    }
    if (job_path == NULL || optind != argc) {
        if (job_path == NULL)
            fprintf(stderr, "gradmesh train: --local JOB.ini is required\n");
        else
            fprintf(stderr, "gradmesh train: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return GM_EXIT_USAGE;
    }
    if ((err = gm_job_load(job_path, &job)) < 0)
        return gm_err_exit_code(err); /* the loader logged file, line and problem */

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    opts.progress = progress;
    opts.stop = &stop_requested;
    opts.out = out;
    err = gm_trainer_run(&job, &opts, &sum);
    if (err == 0 && summary != NULL)
        err = gm_train_summary_write_json(&sum, summary);
    gm_job_free(&job);
    if (err < 0) {
        if (err != GM_ERR_CONFIG && err != GM_ERR_DATA && err != GM_ERR_NUMERIC)
            gm_err("gradmesh train: %s", gm_strerror(err));
        return gm_err_exit_code(err);
    }
    return sum.interrupted ? 130 : GM_EXIT_OK;
}
