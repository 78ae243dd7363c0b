/*
 * agent/cli/cli_job.c - `gradmesh submit JOB.ini [--follow]`, `gradmesh jobs`,
 * `gradmesh cancel ID`: the job commands, over the local agent's control
 * socket.
 *
 * submit parses the job file here first, with the same parser the agents
 * use, so a bad job is refused where it was typed (one line naming the file
 * and line, exit 78) before any agent sees it.  Then it sends the text to
 * the local agent, which coordinates or forwards it to the coordinator
 * (agent/jobs/job.h), and polls `jobs` until the
 * dataset check is over: a refusal prints the coordinator's one line and
 * exits 78; with --follow it keeps polling and shows progress until the job
 * ends (a line a second, or a bar on a terminal), then the test accuracy and
 * where the weights are.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/cli/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "train/job.h"

#define POLL_MS 500

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static json_t *find_job(json_t *list, const char *id)
{
    size_t i;
    json_t *o;

    json_array_foreach(json_object_get(list, "jobs"), i, o)
    {
        const char *jid = json_string_value(json_object_get(o, "id"));
        if (jid != NULL && strcmp(jid, id) == 0)
            return o;
    }
    return NULL;
}

static const char *s_of(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s != NULL ? s : "-";
}

static double d_of(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void print_progress(json_t *o, int tty)
{
    long step = (long)json_integer_value(json_object_get(o, "step"));
    long total = (long)json_integer_value(json_object_get(o, "total_steps"));
    int pct = total > 0 ? (int)(100 * step / total) : 0;

    fprintf(tty ? stderr : stdout,
            "%sjob %s %s: epoch %lld step %ld/%ld (%d%%) world %lld loss %.4f %.0f samples/s%s",
            tty ? "\r" : "", s_of(o, "id"), s_of(o, "state"),
            (long long)json_integer_value(json_object_get(o, "epoch")), step, total, pct,
            (long long)json_integer_value(json_object_get(o, "world")), d_of(o, "loss"),
            d_of(o, "samples_per_s"), tty ? "   " : "\n");
    fflush(tty ? stderr : stdout);
}

int gm_cli_submit(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"follow", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL, *path;
    int follow = 0, c, err, tty = isatty(STDERR_FILENO);
    struct gm_job job;
    json_t *r = NULL;
    char id[64] = "";
    long last_step = -1;
    char last_state[32] = "";

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'f':
            follow = 1;
            break;
        case 'h':
            gm_cli_help(stdout, "submit"); /* the text is in cli_help.c, with gradmesh(1)'s */
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("submit");
        }
    }
    if (optind != argc - 1) {
        return gm_cli_usage_err("submit");
    }
    path = argv[optind];
    if ((err = gm_job_load(path, &job)) < 0)
        return gm_err_exit_code(err); /* the parser printed one line naming file and line */
    err = gm_cli_control("submit", config,
                         json_pack("{s:s,s:s%,s:s}", "cmd", "submit", "text", job.text,
                                   job.text_len, "origin", path),
                         &r);
    gm_job_free(&job);
    /* 78 only for a job the agent refused as such (GM_ERR_CONFIG: it does not parse
     * there, the batch does not divide, this node does not coordinate); no agent, a
     * timeout or a busy cluster (one job at a time) are runtime failures: 1 */
    if (err != 0)
        return gm_err_exit_code(err);
    snprintf(id, sizeof(id), "%s", s_of(r, "id"));
    json_decref(r);
    printf("job %s submitted: checking that every member has the same dataset\n", id);
    fflush(stdout);
    for (;;) {
        json_t *o;
        const char *state;
        sleep_ms(POLL_MS);
        if ((err = gm_cli_control("jobs", config, json_pack("{s:s}", "cmd", "jobs"), &r)) != 0)
            return GM_EXIT_RUNTIME;
        o = find_job(r, id);
        if (o == NULL) {
            fprintf(stderr, "gradmesh submit: job %s vanished from the agent\n", id);
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        state = s_of(o, "state");
        if (strcmp(state, "refused") == 0) {
            fprintf(stderr, "gradmesh submit: job refused: %s\n", s_of(o, "error"));
            json_decref(r);
            return GM_EXIT_CONFIG;
        }
        if (strcmp(state, "running") == 0 && strcmp(last_state, "") == 0) {
            printf("job %s running on %lld members (coordinator %s)\n", id,
                   (long long)json_integer_value(json_object_get(o, "world")),
                   s_of(o, "coordinator"));
            fflush(stdout);
            if (!follow) {
                json_decref(r);
                return GM_EXIT_OK;
            }
        }
        if (strcmp(state, "paused") == 0 && strcmp(last_state, "paused") != 0) {
            if (tty)
                fputc('\n', stderr);
            printf("job %s paused: %s\n", id, s_of(o, "paused_reason"));
            fflush(stdout);
        }
        if (strcmp(state, "checking") != 0)
            snprintf(last_state, sizeof(last_state), "%s", state);
        if (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0) {
            long step = (long)json_integer_value(json_object_get(o, "step"));
            if (step != last_step)
                print_progress(o, tty);
            last_step = step;
        } else if (strcmp(state, "checking") != 0) {
            json_t *sum = json_object_get(o, "summary");
            if (tty)
                fputc('\n', stderr);
            if (strcmp(state, "done") == 0) {
                printf("job %s done: test accuracy %.2f%%, %lld steps, %.0f samples/s, %.1f s\n"
                       "weights: %s\n",
                       id, d_of(sum, "test_accuracy"),
                       (long long)json_integer_value(json_object_get(sum, "steps")),
                       d_of(sum, "samples_per_s"), d_of(sum, "wall_s"), s_of(o, "weights"));
                json_decref(r);
                return GM_EXIT_OK;
            }
            fprintf(stderr, "gradmesh submit: job %s %s: %s\n", id, state, s_of(o, "error"));
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        json_decref(r);
    }
}

int gm_cli_jobs(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL;
    int as_json = 0, c;
    json_t *r = NULL, *o;
    size_t i;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'h':
            gm_cli_help(stdout, "jobs"); /* the text is in cli_help.c, with gradmesh(1)'s */
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("jobs");
        }
    }
    if (optind != argc) {
        return gm_cli_usage_err("jobs");
    }
    if (gm_cli_control("jobs", config, json_pack("{s:s}", "cmd", "jobs"), &r) != 0)
        return GM_EXIT_RUNTIME;
    if (as_json) {
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s != NULL ? s : "{}");
        free(s);
        json_decref(r);
        return GM_EXIT_OK;
    }
    printf("%-16s %-16s %-9s %7s %5s %5s %8s %10s  %s\n", "ID", "NAME", "STATE", "STEP", "EPOCH",
           "WORLD", "LOSS", "SAMPLES/S", "WEIGHTS / ERROR");
    json_array_foreach(json_object_get(r, "jobs"), i, o)
    {
        const char *st = s_of(o, "state");
        printf("%-16s %-16s %-9s %7lld %5lld %5lld %8.4f %10.0f  %s\n", s_of(o, "id"),
               s_of(o, "name"), st, (long long)json_integer_value(json_object_get(o, "step")),
               (long long)json_integer_value(json_object_get(o, "epoch")),
               (long long)json_integer_value(json_object_get(o, "world")), d_of(o, "loss"),
               d_of(o, "samples_per_s"),
               json_is_string(json_object_get(o, "paused_reason")) ? s_of(o, "paused_reason")
               : json_is_string(json_object_get(o, "error"))       ? s_of(o, "error")
                                                                   : s_of(o, "weights"));
        json_t *links = json_object_get(o, "links"), *lk;
        size_t k;
        json_array_foreach(links, k, lk)
        {
            printf("    link %-16s sent %12lld B  received %12lld B\n", s_of(lk, "node"),
                   (long long)json_integer_value(json_object_get(lk, "bytes_sent")),
                   (long long)json_integer_value(json_object_get(lk, "bytes_received")));
        }
    }
    json_decref(r);
    return GM_EXIT_OK;
}

int gm_cli_cancel(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL;
    int c, err;
    json_t *r = NULL;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'h':
            gm_cli_help(stdout, "cancel"); /* the text is in cli_help.c, with gradmesh(1)'s */
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("cancel");
        }
    }
    if (optind != argc - 1) {
        return gm_cli_usage_err("cancel");
    }
    err = gm_cli_control("cancel", config,
                         json_pack("{s:s,s:s}", "cmd", "cancel", "id", argv[optind]), &r);
    if (err != 0)
        return GM_EXIT_RUNTIME;
    printf("job %s cancelled\n", s_of(r, "id"));
    json_decref(r);
    return GM_EXIT_OK;
}
