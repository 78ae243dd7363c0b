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
#include <signal.h>
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
#define EXIT_DETACHED 130    /* 128 + SIGINT: what a shell reports for a Ctrl-C */
#define CANCEL_WAIT_MS 15000 /* how long cancel waits for a forwarded cancel to land */

/* SIGINT and SIGTERM, blocked while a command watches a job: they are taken by
 * wait_or_signal() instead of ending the process, so that a Ctrl-C detaches with a line
 * saying the job runs on (no handler, no flag). */
static void block_stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigprocmask(SIG_BLOCK, set, NULL);
}

/* Waits ms milliseconds; 1 when a blocked stop signal arrived meanwhile (or before). */
static int wait_or_signal(const sigset_t *set, int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    for (;;) {
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig > 0)
            return 1;
        if (errno != EINTR)
            return 0; /* EAGAIN: the time is up */
    }
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

/* What a watch remembers between polls: the first step seen and when, for the ETA. */
struct watch {
    long step0, last_step;
    double t0;
    char last_state[32];
    int resumed_said;
    int noted;     /* the job's note (why it did not resume) was printed */
    json_t *ranks; /* owned: the group at the last poll; NULL before the first */
    json_t *seen;  /* owned: every node that was in a group while watching ({node: true}) */
};

static int has_node(json_t *arr, const char *node)
{
    size_t i;
    json_t *v;

    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), node) == 0)
            return 1;
    }
    return 0;
}

/* One event line; on a terminal the progress bar's line is ended first. */
static void event_line(int tty, const struct watch *w)
{
    if (tty && w->last_step >= 0)
        fputc('\n', stderr);
}

/* Events a person reads between progress lines: a resume from a checkpoint, members lost,
 * back or new (from the job's "ranks" between two polls). */
static void print_events(json_t *o, int tty, struct watch *w)
{
    json_t *ranks = json_object_get(o, "ranks"), *res = json_object_get(o, "resumed_from"), *v;
    long step = (long)json_integer_value(json_object_get(o, "step"));
    size_t i, before, now;

    if (!w->noted && json_is_string(json_object_get(o, "note"))) {
        event_line(tty, w);
        printf("%s\n", json_string_value(json_object_get(o, "note")));
        w->noted = 1;
    }
    if (!w->resumed_said && json_is_object(res)) {
        event_line(tty, w);
        printf("resuming from step %lld (checkpoint %s)\n",
               (long long)json_integer_value(json_object_get(res, "step")),
               s_of(res, "checkpoint"));
        if (json_is_integer(json_object_get(res, "from_epochs")))
            printf("%s from %lld to %lld epochs\n",
                   json_integer_value(json_object_get(res, "from_epochs")) <
                           json_integer_value(json_object_get(res, "epochs"))
                       ? "extending"
                       : "shortening",
                   (long long)json_integer_value(json_object_get(res, "from_epochs")),
                   (long long)json_integer_value(json_object_get(res, "epochs")));
        w->resumed_said = 1;
    }
    if (!json_is_array(ranks) || json_array_size(ranks) == 0)
        return;
    if (w->seen == NULL)
        w->seen = json_object();
    if (w->ranks != NULL) {
        before = json_array_size(w->ranks);
        now = json_array_size(ranks);
        json_array_foreach(w->ranks, i, v)
        {
            const char *n = json_string_value(v);
            if (n == NULL || has_node(ranks, n))
                continue;
            event_line(tty, w);
            printf("member %s lost at step %ld; world %zu -> %zu\n", n, step, before, now);
        }
        json_array_foreach(ranks, i, v)
        {
            const char *n = json_string_value(v);
            if (n == NULL || has_node(w->ranks, n))
                continue;
            event_line(tty, w);
            printf("member %s %s at step %ld; world %zu -> %zu\n", n,
                   json_object_get(w->seen, n) != NULL ? "back" : "joined", step, before, now);
        }
    }
    json_array_foreach(ranks, i, v)
    {
        if (json_is_string(v))
            json_object_set_new(w->seen, json_string_value(v), json_true());
    }
    json_decref(w->ranks);
    w->ranks = json_deep_copy(ranks);
    fflush(stdout);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_progress(json_t *o, int tty, struct watch *w)
{
    long step = (long)json_integer_value(json_object_get(o, "step"));
    long total = (long)json_integer_value(json_object_get(o, "total_steps"));
    int pct = total > 0 ? (int)(100 * step / total) : 0;
    double t = now_s();
    char eta[40] = "", d[16];

    if (total <= 0) /* the group has not formed yet: nothing to show */
        return;
    if (w->step0 < 0) {
        w->step0 = step;
        w->t0 = t;
    } else if (step > w->step0 && total > step && t > w->t0) {
        /* the rate seen while watching: steps per second since the first poll */
        double rate = (double)(step - w->step0) / (t - w->t0);
        snprintf(eta, sizeof(eta), " ETA %s",
                 gm_cli_fmt_duration((double)(total - step) / rate, d, sizeof(d)));
    }
    fprintf(tty ? stderr : stdout,
            "%sjob %s %s: epoch %lld step %ld/%ld (%d%%) world %lld loss %.4f %.0f samples/s%s%s",
            tty ? "\r" : "", s_of(o, "id"), s_of(o, "state"),
            (long long)json_integer_value(json_object_get(o, "epoch")), step, total, pct,
            (long long)json_integer_value(json_object_get(o, "world")), d_of(o, "loss"),
            d_of(o, "samples_per_s"), eta, tty ? "   " : "\n");
    fflush(tty ? stderr : stdout);
}

/* Polls the local agent's `jobs` for job id until it ends (follow) or runs (!follow), saying
 * what happens; a Ctrl-C (SIGINT, SIGTERM) detaches, saying the job runs on.  verb: for the
 * messages.  Returns the exit code. */
static int watch_poll(const char *verb, const char *config, const char *id, int follow,
                      struct watch *w)
{
    int tty = isatty(STDERR_FILENO);
    sigset_t stop;
    json_t *r = NULL;

    block_stop_signals(&stop);
    for (;;) {
        json_t *o;
        const char *state;
        if (wait_or_signal(&stop, POLL_MS)) {
            if (tty)
                fputc('\n', stderr);
            fprintf(stderr, "job %s keeps running; gradmesh cancel %s stops it\n", id, id);
            return EXIT_DETACHED;
        }
        if (gm_cli_control(verb, config, json_pack("{s:s}", "cmd", "jobs"), &r) != 0)
            return GM_EXIT_RUNTIME;
        o = find_job(r, id);
        if (o == NULL) {
            fprintf(stderr, "gradmesh %s: job %s vanished from the agent\n", verb, id);
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        state = s_of(o, "state");
        if (strcmp(state, "refused") == 0) {
            fprintf(stderr, "gradmesh %s: job refused: %s\n", verb, s_of(o, "error"));
            json_decref(r);
            return GM_EXIT_CONFIG;
        }
        if (strcmp(state, "running") == 0 && strcmp(w->last_state, "") == 0) {
            printf("job %s running on %lld members (coordinator %s)\n", id,
                   (long long)json_integer_value(json_object_get(o, "world")),
                   s_of(o, "coordinator"));
            fflush(stdout);
            if (!follow) {
                json_decref(r);
                return GM_EXIT_OK;
            }
        }
        if (strcmp(state, "paused") == 0 && strcmp(w->last_state, "paused") != 0) {
            if (tty)
                fputc('\n', stderr);
            printf("job %s paused: %s\n", id, s_of(o, "paused_reason"));
            fflush(stdout);
        }
        if (strcmp(state, "checking") != 0)
            snprintf(w->last_state, sizeof(w->last_state), "%s", state);
        if (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0) {
            long step = (long)json_integer_value(json_object_get(o, "step"));
            print_events(o, tty, w);
            if (step != w->last_step)
                print_progress(o, tty, w);
            w->last_step = step;
        } else if (strcmp(state, "checking") != 0) {
            json_t *sum = json_object_get(o, "summary");
            char dur[16];
            if (tty && w->last_step >= 0)
                fputc('\n', stderr);
            w->last_step = -1; /* the bar's line is ended */
            /* what the last polls missed: a run that resumed and ended between two of them
             * (jobs --json keeps resumed_from once the rank is gone) */
            print_events(o, tty, w);
            if (strcmp(state, "done") == 0) {
                printf("job %s done: test accuracy %.2f%%, %lld steps, %.0f samples/s, %s\n"
                       "weights: %s\n",
                       id, d_of(sum, "test_accuracy"),
                       (long long)json_integer_value(json_object_get(sum, "steps")),
                       d_of(sum, "samples_per_s"),
                       gm_cli_fmt_duration(d_of(sum, "wall_s"), dur, sizeof(dur)),
                       s_of(o, "weights"));
                json_decref(r);
                return GM_EXIT_OK;
            }
            fprintf(stderr, "gradmesh %s: job %s %s: %s\n", verb, id, state, s_of(o, "error"));
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        json_decref(r);
    }
}

static int watch_job(const char *verb, const char *config, const char *id, int follow)
{
    struct watch w = {.step0 = -1, .last_step = -1};
    int rc = watch_poll(verb, config, id, follow, &w);

    json_decref(w.ranks);
    json_decref(w.seen);
    return rc;
}

int gm_cli_submit(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"follow", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL, *path;
    int follow = 0, c, err;
    struct gm_job job;
    json_t *r = NULL;
    char id[64] = "";

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
    return watch_job("submit", config, id, follow);
}

/* jobs --follow [ID]: attach to job ID, or to the one that has not ended; list: the agent's
 * `jobs` (consumed). */
static int follow_job(const char *config, json_t *list, const char *want)
{
    char id[64] = "";
    json_t *o;
    size_t i;

    if (want != NULL) {
        if (find_job(list, want) == NULL) {
            fprintf(stderr,
                    "gradmesh jobs: this agent knows no job %s; `gradmesh jobs` lists the "
                    "ones it knows\n",
                    want);
            json_decref(list);
            return GM_EXIT_RUNTIME;
        }
        snprintf(id, sizeof(id), "%s", want);
    } else {
        json_array_foreach(json_object_get(list, "jobs"), i, o)
        {
            const char *st = s_of(o, "state");
            if (strcmp(st, "running") == 0 || strcmp(st, "checking") == 0 ||
                strcmp(st, "paused") == 0) {
                snprintf(id, sizeof(id), "%s", s_of(o, "id"));
                break;
            }
        }
        if (id[0] == '\0') {
            fprintf(stderr, "gradmesh jobs: no job is running; `gradmesh jobs` lists the ended "
                            "ones, `gradmesh jobs --follow ID` shows how one ended\n");
            json_decref(list);
            return GM_EXIT_RUNTIME;
        }
    }
    o = find_job(list, id);
    printf("following job %s (%s, coordinator %s); Ctrl-C detaches, the job runs on\n", id,
           s_of(o, "name"), s_of(o, "coordinator"));
    fflush(stdout);
    json_decref(list);
    return watch_job("jobs", config, id, 1);
}

int gm_cli_jobs(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"follow", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL;
    int as_json = 0, follow = 0, c;
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
        case 'f':
            follow = 1;
            break;
        case 'h':
            gm_cli_help(stdout, "jobs"); /* the text is in cli_help.c, with gradmesh(1)'s */
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("jobs");
        }
    }
    if (optind != argc && !(follow && optind == argc - 1))
        return gm_cli_usage_err("jobs");
    if (follow && as_json)
        return gm_cli_usage_err("jobs");
    if (gm_cli_control("jobs", config, json_pack("{s:s}", "cmd", "jobs"), &r) != 0)
        return GM_EXIT_RUNTIME;
    if (follow)
        return follow_job(config, r, optind < argc ? argv[optind] : NULL);
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
        char loss[16] = "-", rate[16] = "-"; /* a job this node knows only from the history */

        if (json_is_number(json_object_get(o, "loss")))
            snprintf(loss, sizeof(loss), "%.4f", d_of(o, "loss"));
        if (json_is_number(json_object_get(o, "samples_per_s")))
            snprintf(rate, sizeof(rate), "%.0f", d_of(o, "samples_per_s"));
        printf("%-16s %-16s %-9s %7lld %5lld %5lld %8s %10s  %s\n", s_of(o, "id"),
               s_of(o, "name"), st, (long long)json_integer_value(json_object_get(o, "step")),
               (long long)json_integer_value(json_object_get(o, "epoch")),
               (long long)json_integer_value(json_object_get(o, "world")), loss, rate,
               json_is_string(json_object_get(o, "paused_reason")) ? s_of(o, "paused_reason")
               : json_is_string(json_object_get(o, "error"))       ? s_of(o, "error")
                                                                   : s_of(o, "weights"));
        json_t *links = json_object_get(o, "links"), *lk;
        size_t k;
        json_array_foreach(links, k, lk)
        {
            char sent[16], recv[16];
            printf(
                "    link %-16s sent %10s  received %10s\n", s_of(lk, "node"),
                gm_cli_fmt_bytes((double)json_integer_value(json_object_get(lk, "bytes_sent")),
                                 sent, sizeof(sent)),
                gm_cli_fmt_bytes((double)json_integer_value(json_object_get(lk, "bytes_received")),
                                 recv, sizeof(recv)));
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
    if (strcmp(s_of(r, "state"), "cancelling") == 0) {
        /* typed on a member: the coordinator cancels it, and its end comes back here */
        char id[64], coord[64];
        snprintf(id, sizeof(id), "%s", s_of(r, "id"));
        snprintf(coord, sizeof(coord), "%s", s_of(r, "coordinator"));
        json_decref(r);
        for (int waited = 0; waited < CANCEL_WAIT_MS; waited += POLL_MS) {
            json_t *o;
            const char *st;
            sleep_ms(POLL_MS);
            if (gm_cli_control("cancel", config, json_pack("{s:s}", "cmd", "jobs"), &r) != 0)
                return GM_EXIT_RUNTIME;
            o = find_job(r, id);
            st = o != NULL ? s_of(o, "state") : "-";
            if (strcmp(st, "cancelled") == 0 || strcmp(st, "done") == 0 ||
                strcmp(st, "failed") == 0) {
                int rc = strcmp(st, "cancelled") == 0 ? GM_EXIT_OK : GM_EXIT_RUNTIME;
                printf("job %s %s (by its coordinator %s)\n", id, st, coord);
                json_decref(r);
                return rc;
            }
            json_decref(r);
        }
        printf("job %s: cancel sent to its coordinator %s; `gradmesh jobs` shows when it "
               "stops\n",
               id, coord);
        return GM_EXIT_OK;
    }
    printf("job %s cancelled\n", s_of(r, "id"));
    json_decref(r);
    return GM_EXIT_OK;
}
