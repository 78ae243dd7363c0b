/*
 * agent/cli/cli_train.c - `gradmesh train --local JOB.ini [--summary-json FILE]
 * [--out FILE] [--tensorboard DIR | --no-tensorboard] [--no-progress]
 * [--resume CKPT|DIR] [--simulate-workers N [--no-error-feedback]
 * [--simulate-resize STEP:H[:BITS],...]]`:
 * the single-machine trainer, no network.  --simulate-workers runs N
 * data-parallel replicas in this process over the in-memory transport with
 * the job's [comm] codec (train/sim.h); --no-error-feedback turns PowerSGD's
 * error feedback off (the negative control of docs/BENCHMARKS.md);
 * --simulate-resize replays DiLoCo re-sizes that auto made in a cluster.
 * --resume goes on from a checkpoint (train/ckpt/ckpt.h; the job's
 * checkpoint_every writes them), or from the newest valid one of a directory.
 *
 * SIGINT/SIGTERM set a flag (the handler does nothing else); the trainer
 * stops at the next step boundary, saves the weights and the run ends with
 * exit code 130.  Exit codes otherwise as in gradmesh(1): 0, 1 runtime, 2
 * usage, 78 bad job or data file.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/cli/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "train/job.h"
#include "train/tbevents.h"
#include "train/sim.h"
#include "train/trainer.h"

/* The one flag a signal handler may touch. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

int gm_cli_train(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"local", required_argument, NULL, 'l'},
        {"summary-json", required_argument, NULL, 's'},
        {"out", required_argument, NULL, 'o'},
        {"no-progress", no_argument, NULL, 'n'},
        {"simulate-workers", required_argument, NULL, 'w'},
        {"no-error-feedback", no_argument, NULL, 'e'},
        {"simulate-resize", required_argument, NULL, 'z'},
        {"tensorboard", required_argument, NULL, 't'},
        {"no-tensorboard", no_argument, NULL, 'T'},
        {"resume", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *job_path = NULL, *summary = NULL, *out = NULL, *tb_dir = NULL;
    char tb_default[GM_JOB_NAME_MAX + 64];
    struct gm_tb_writer *tb = NULL;
    struct gm_train_hooks hooks;
    int tb_on = 1, progress = isatty(2) && getenv("JOURNAL_STREAM") == NULL;
    struct gm_job job;
    struct gm_train_summary sum;
    struct gm_train_opts opts = {0};
    struct sigaction sa;
    struct gm_sim_opts so = {.workers = 0, .error_feedback = true};
    char *end, why[128];
    long workers;
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
        case 'w':
            workers = strtol(optarg, &end, 10);
            if (end == optarg || *end != 0 || workers < 1 || workers > 64) {
                fprintf(stderr, "gradmesh train: --simulate-workers wants 1..64, not '%s'\n",
                        optarg);
                return GM_EXIT_USAGE;
            }
            so.workers = (int)workers;
            break;
        case 'e':
            so.error_feedback = false;
            break;
        case 'z':
            if (gm_sim_resize_parse(optarg, &so, why, sizeof(why)) < 0) {
                fprintf(stderr, "gradmesh train: --simulate-resize '%s': %s\n", optarg, why);
                return GM_EXIT_USAGE;
            }
            break;
        case 't':
            tb_dir = optarg;
            break;
        case 'T':
            tb_on = 0;
            break;
        case 'r':
            opts.resume = optarg;
            break;
        case 'h':
            gm_cli_help(stdout, "train");
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("train");
        }
    }
    if (job_path == NULL || optind != argc) {
        if (job_path == NULL)
            fprintf(stderr, "gradmesh train: --local JOB.ini is required\n");
        else
            fprintf(stderr, "gradmesh train: unexpected argument '%s'\n", argv[optind]);
        return gm_cli_usage_err("train");
    }
    if (so.nresize > 0 && so.workers == 0) {
        fprintf(stderr, "gradmesh train: --simulate-resize needs --simulate-workers N\n");
        return gm_cli_usage_err("train");
    }
    if ((err = gm_job_load(job_path, &job)) < 0)
        return gm_err_exit_code(err); /* the loader logged file, line and problem */
    if (opts.resume != NULL && access(opts.resume, F_OK) != 0) {
        /* said here, in words, rather than as a checkpoint without its .sha256 */
        fprintf(stderr,
                "gradmesh train: --resume %s: %s; give a checkpoint file or the directory the "
                "job's checkpoint_every writes them to (%s)\n",
                opts.resume, strerror(errno),
                job.checkpoint_dir[0] ? job.checkpoint_dir : "NAME.checkpoints");
        gm_job_free(&job);
        return GM_EXIT_CONFIG;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    opts.progress = progress;
    opts.stop = &stop_requested;
    opts.out = out;
    if (tb_on) {
        if (tb_dir == NULL) { /* runs/JOB-YYYYmmdd-HHMMSS: one TensorBoard run per run */
            time_t now = time(NULL);
            struct tm tm;
            char stamp[32];
            strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
            snprintf(tb_default, sizeof(tb_default), "runs/%s-%s", job.name, stamp);
            tb_dir = tb_default;
        }
        if ((err = gm_tb_open(tb_dir, &tb)) < 0) { /* logged with the directory */
            gm_job_free(&job);
            return GM_EXIT_RUNTIME;
        }
        gm_tb_train_hooks(tb, &hooks);
        opts.hooks = &hooks;
        gm_info("event=tensorboard file=%s", gm_tb_path(tb));
    }
    if (so.workers > 0)
        err = gm_sim_train(&job, &opts, &so, &sum);
    else
        err = gm_trainer_run(&job, &opts, &sum);
    if (err == 0 && summary != NULL)
        err = gm_train_summary_write_json(&sum, summary);
    if (tb != NULL) {
        int e = err == 0 ? gm_tb_write_summary(tb, &sum) : 0;
        char path[4096];
        snprintf(path, sizeof(path), "%s", gm_tb_path(tb));
        if (gm_tb_close(tb) != 0 || e != 0)
            gm_warn("event=tensorboard-incomplete dir=%s", tb_dir); /* the run still counts */
        if ((err == GM_ERR_CONFIG || err == GM_ERR_DATA) && sum.steps == 0) {
            /* refused before a step (a bad job, data or weights file): leave nothing behind,
             * not even the events file of a run that never started */
            unlink(path);
            rmdir(tb_dir); /* fails, harmlessly, when it holds anything else */
            if (tb_dir == tb_default)
                rmdir("runs");
        }
    }
    gm_job_free(&job);
    if (err < 0) {
        if (err != GM_ERR_CONFIG && err != GM_ERR_DATA && err != GM_ERR_NUMERIC)
            gm_err("gradmesh train: %s", gm_strerror(err));
        return gm_err_exit_code(err);
    }
    return sum.interrupted ? 130 : GM_EXIT_OK;
}
