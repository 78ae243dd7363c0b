/*
 * agent/cli/cli_peers.c - `gradmesh peers` and `gradmesh doctor`: what the local
 * agent knows of its links, as tables (or --json).
 *
 * doctor adds the checks a user needs when a cluster does not come together:
 * both directions of every link, path MTU, clock skew, the multicast and
 * static-endpoint state, the RTT and throughput matrix every member reported,
 * and what each gradient codec would cost per step on the slowest link.
 * The codec list and estimates are train/gradsync.h's (communication only,
 * gm_coll_cost's ring over N members), for the model given with --model
 * (default lenet5 on 1x28x28, the Fashion-MNIST job).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/cli/cli.h"
#include "agent/jobs/autocodec.h"
#include "common/assert.h"
#include "common/err.h"
#include "train/nn/model.h"
#include "train/gradsync.h"

#define SKEW_WARN_MS 30000.0 /* beacons tolerate 300 s; TLS certificates minutes */
#define MTU_WARN 1280

static int parse_common(int argc, char **argv, const char *cmd, const char **config, int *as_json,
                        const char **model)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"model", required_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    int o;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'f')
            *config = optarg;
        else if (o == 'j')
            *as_json = 1;
        else if (o == 'm' && model != NULL)
            *model = optarg;
        else
            o = '?';
        if (o == '?')
            break;
    }
    if (o == '?' || optind != argc) {
        gm_cli_usage_hint(cmd);
        return -1;
    }
    return 0;
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return s ? s : "-";
}

/* A number with prec decimals (sign shown when sign) or "-", into buf. */
static const char *numf(json_t *v, int prec, int sign, char *buf, size_t cap)
{
    if (!json_is_number(v))
        return "-";
    snprintf(buf, cap, sign ? "%+.*f" : "%.*f", prec, json_number_value(v));
    return buf;
}

static const char *yesno(json_t *v)
{
    return json_is_true(v) ? "yes" : json_is_false(v) ? "NO" : "?";
}

static void print_json(json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT | GM_JSON_HUMAN);

    printf("%s\n", s ? s : "{}");
    free(s);
}

static void print_peers(json_t *r)
{
    json_t *m;
    size_t i;
    char b1[32], b2[32], b3[32];

    printf("%-20s %-22s %-7s %-5s %9s %10s %6s\n", "NODE", "ADDRESS", "CLASS", "STATE", "RTT_MS",
           "MBIT/S", "MTU");
    json_array_foreach(json_object_get(r, "members"), i, m)
    {
        printf("%-20s %-22s %-7s %-5s %9s %10s %6s\n", str(m, "node"), str(m, "address"),
               str(m, "link"), str(m, "state"),
               numf(json_object_get(m, "rtt_ms"), 3, 0, b1, sizeof(b1)),
               numf(json_object_get(m, "throughput_mbps"), 1, 0, b2, sizeof(b2)),
               numf(json_object_get(m, "mtu"), 0, 0, b3, sizeof(b3)));
    }
    if (json_array_size(json_object_get(r, "members")) == 0)
        printf("(no members yet)\n");
}

int gm_cli_peers(int argc, char **argv)
{
    const char *config = NULL;
    json_t *r = NULL;
    int as_json = 0, err;

    if (parse_common(argc, argv, "peers", &config, &as_json, NULL) != 0)
        return GM_EXIT_USAGE;
    err = gm_cli_control("peers", config, json_pack("{s:s}", "cmd", "status"), &r);
    if (err != 0)
        return gm_err_exit_code(err);
    if (as_json)
        print_json(json_object_get(r, "members"));
    else
        print_peers(r);
    json_decref(r);
    return GM_EXIT_OK;
}

/* --- doctor ------------------------------------------------------------------ */

/* Prints one check line; a failed one counts in *warnings. */
static void check(int *warnings, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int *warnings, int ok, const char *fmt, ...)
{
    va_list ap;

    printf("  [%s] ", ok ? " ok " : "WARN");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    *warnings += !ok;
}

static void doctor_links(json_t *r, int *warnings)
{
    json_t *m;
    size_t i;
    char b1[32], b2[32];

    printf("links\n");
    json_array_foreach(json_object_get(r, "members"), i, m)
    {
        json_t *skew = json_object_get(m, "clock_skew_ms"), *mtu = json_object_get(m, "mtu");
        int up = strcmp(str(m, "state"), "up") == 0;
        check(warnings, up, "%s at %s: %s, %s via %s, rtt %s ms, %s Mbit/s out", str(m, "node"),
              str(m, "address"), up ? "up" : "DOWN", str(m, "link"), str(m, "iface"),
              numf(json_object_get(m, "rtt_ms"), 3, 0, b1, sizeof(b1)),
              numf(json_object_get(m, "throughput_mbps"), 1, 0, b2, sizeof(b2)));
        if (!up)
            continue;
        check(warnings,
              !json_is_false(json_object_get(m, "reach_out")) &&
                  !json_is_false(json_object_get(m, "reach_in")),
              "      reachable: from here %s, from there %s",
              yesno(json_object_get(m, "reach_out")), yesno(json_object_get(m, "reach_in")));
        check(warnings, !json_is_number(mtu) || json_number_value(mtu) >= MTU_WARN,
              "      path MTU %s", numf(mtu, 0, 0, b1, sizeof(b1)));
        check(warnings, !json_is_number(skew) || fabs(json_number_value(skew)) < SKEW_WARN_MS,
              "      clock skew %s ms", numf(skew, 1, 1, b1, sizeof(b1)));
    }
    if (json_array_size(json_object_get(r, "members")) == 0)
        check(warnings, 0, "no members: join another machine with a token (gradmesh token create)");
}

static void doctor_discovery(json_t *r, int *warnings)
{
    json_t *d = json_object_get(r, "discovery"), *e, *ib;
    size_t i;

    printf("discovery\n");
    if (json_is_null(d) || d == NULL) {
        check(warnings, 1, "multicast beacons off (multicast = off, or listening on loopback)");
    } else {
        ib = json_object_get(d, "ignored_by_reason");
        check(warnings, json_string_length(json_object_get(d, "interfaces")) > 0,
              "multicast %s on [%s]: sent %lld, received %lld, accepted %lld", str(d, "group"),
              str(d, "interfaces"), json_integer_value(json_object_get(d, "sent")),
              json_integer_value(json_object_get(d, "received")),
              json_integer_value(json_object_get(d, "accepted")));
        check(warnings, json_is_true(json_object_get(d, "member_beacons")), "member beacons %s",
              json_is_true(json_object_get(d, "member_beacons"))
                  ? "on"
                  : "off (no beacon.key: rejoin to get one)");
        if (json_integer_value(json_object_get(d, "ignored")) > 0)
            check(warnings, 1,
                  "ignored beacons: %lld malformed, %lld unauthenticated, %lld stale, %lld "
                  "replayed, %lld foreign",
                  json_integer_value(json_object_get(ib, "malformed")),
                  json_integer_value(json_object_get(ib, "unauthenticated")),
                  json_integer_value(json_object_get(ib, "stale")),
                  json_integer_value(json_object_get(ib, "replayed")),
                  json_integer_value(json_object_get(ib, "foreign")));
    }
    json_array_foreach(json_object_get(r, "endpoints"), i, e)
    {
        check(warnings, strcmp(str(e, "state"), "linked") == 0, "static peer %s: %s%s%s%s",
              str(e, "endpoint"), str(e, "state"),
              json_is_string(json_object_get(e, "node")) ? " to " : "",
              json_is_string(json_object_get(e, "node")) ? str(e, "node") : "",
              json_is_string(json_object_get(e, "last_error")) ? " (last error kept)" : "");
        if (json_is_string(json_object_get(e, "last_error")))
            printf("         last error: %s\n", str(e, "last_error"));
    }
}

static void print_matrix(json_t *mx, const char *key, int prec)
{
    json_t *nodes = json_object_get(mx, "nodes"), *rows = json_object_get(mx, key), *row, *n;
    size_t i, j;
    char b[32];

    printf("  %-16s", "from \\ to");
    json_array_foreach(nodes, j, n) printf(" %12.12s", json_string_value(n));
    printf("\n");
    json_array_foreach(rows, i, row)
    {
        printf("  %-16.16s", json_string_value(json_array_get(nodes, i)));
        for (j = 0; j < json_array_size(row); j++)
            printf(" %12s", i == j ? "." : numf(json_array_get(row, j), prec, 0, b, sizeof(b)));
        printf("\n");
    }
}

/* Slowest throughput and largest RTT anywhere in the matrix; 0 when none. */
static void matrix_extremes(json_t *mx, double *min_mbps, double *max_rtt)
{
    json_t *row, *v;
    size_t i, j;

    *min_mbps = 0;
    *max_rtt = 0;
    json_array_foreach(json_object_get(mx, "throughput_mbps"), i, row) json_array_foreach(
        row, j, v) if (json_is_number(v) && json_number_value(v) > 0 &&
                       (*min_mbps == 0 || json_number_value(v) < *min_mbps)) *min_mbps =
        json_number_value(v);
    json_array_foreach(json_object_get(mx, "rtt_ms"), i, row) json_array_foreach(
        row, j, v) if (json_is_number(v) && json_number_value(v) > *max_rtt) *max_rtt =
        json_number_value(v);
}

#define DOCTOR_BATCH 64

/* The model named name as a job of the defaults would build it (train/trainer.h), on the
 * input shape of the default data kind (Fashion-MNIST's 28x28x1). */
static int model_new(const char *name, struct gm_model **m)
{
    struct gm_model_spec spec;
    struct gm_job job;
    int c, h, w, err;

    *m = NULL;
    gm_job_defaults(&job);
    if (gm_job_model_parse(name, &job.model) < 0)
        return -EINVAL;
    gm_job_input_shape(&job, &c, &h, &w);
    if ((err = gm_job_model_spec(&job, c, h, w, 10, &spec)) < 0)
        return err;
    return gm_model_new(&spec, DOCTOR_BATCH, m);
}

/* codec = auto's view of the current links, through the coordinator's own code path
 * (agent/jobs/autocodec.h gm_autocodec_resolve: the same gap filling, timing and rule), so the
 * pick shown is the one a job of this model would start with: the links as measured between
 * each pair (the matrix; a pair nobody measured takes the slowest, as for a job), a job of the
 * defaults with codec = auto at batch 64 per member, its compute timed here.  Then every
 * candidate's bytes and projected communication and step time; a link too slow to help is a
 * warning. */
static void doctor_codecs(json_t *r, const char *model, int *warnings)
{
    json_t *mx = json_object_get(r, "matrix");
    json_t *rtt_m = json_object_get(mx, "rtt_ms"), *bw_m = json_object_get(mx, "throughput_mbps");
    int n = (int)json_array_size(json_object_get(mx, "nodes"));
    struct gm_gradsync_auto_out o;
    struct gm_coll_link *links = NULL;
    struct gm_model *m = NULL;
    struct gm_job job;
    char reason[256] = "", pick[48];
    double mbps, rtt;

    printf("gradient codecs (communication per step, %s, %d members)\n", model, n);
    matrix_extremes(mx, &mbps, &rtt);
    gm_job_defaults(&job);
    if (gm_job_model_parse(model, &job.model) < 0 || model_new(model, &m) != 0) {
        check(warnings, 0, "unknown model %s", model);
        return;
    }
    if (n < 2 || mbps <= 0) {
        check(warnings, 1, "no measured links yet: nothing to estimate");
        goto out;
    }
    links = calloc((size_t)n * (size_t)n, sizeof(*links));
    if (links == NULL) {
        check(warnings, 0, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            json_t *rt = json_array_get(json_array_get(rtt_m, (size_t)i), (size_t)j);
            json_t *bw = json_array_get(json_array_get(bw_m, (size_t)i), (size_t)j);
            if (json_is_number(bw) && json_number_value(bw) > 0)
                links[i * n + j] = (struct gm_coll_link){
                    .alpha_s = json_is_number(rt) ? json_number_value(rt) / 2e3 : 0,
                    .bytes_per_s = json_number_value(bw) * 1e6 / 8};
        }
    job.comm.codec = GM_JOB_CODEC_AUTO;
    job.optim.batch = 0;
    job.optim.global_batch = DOCTOR_BATCH * n;
    if (gm_autocodec_resolve(&job, n, links, NULL, &o, reason, sizeof(reason)) != 0) {
        check(warnings, 0, "no projection: %s", reason);
        goto out;
    }
    printf("  slowest link %.1f Mbit/s, largest RTT %.3f ms; %zu parameters; compute %.2f ms a "
           "step (batch %d a member, timed here)\n",
           mbps, rtt, gm_model_num_params(m), o.compute_s * 1e3, DOCTOR_BATCH);
    printf("  %-22s %12s %14s %14s\n", "codec", "bytes/step", "ms per step", "projected step");
    for (size_t i = 0; i < GM_GRADSYNC_AUTO_NCAND; i++) {
        struct gm_gradsync_cost c;
        char label[48];

        gm_gradsync_describe(&o.cand[i].s, label, sizeof(label));
        if (gm_gradsync_estimate(&o.cand[i].s, m, n, links, &c) != 0) {
            check(warnings, 0, "%s: no estimate", label);
            continue;
        }
        printf("  %-22s %12llu %14.2f %11.2f ms%s\n", label, (unsigned long long)c.step_bytes,
               c.seconds * 1e3, o.cand[i].step_s * 1e3,
               o.cand[i].s.id == o.pick.id ? "  <- auto" : "");
    }
    gm_gradsync_describe(&o.pick, pick, sizeof(pick));
    printf("  codec = auto would pick %s: %s; %d members at %.2fx one's speed\n", pick, o.reason, n,
           o.speedup);
    check(warnings, !o.too_slow, "the links are %s",
          o.too_slow ? "too slow to help: one agent "
                       "alone would train as fast"
                     : "fast enough");
out:
    free(links);
    gm_model_free(m);
}

/* [job] shares = auto's view of the running job this node coordinates: each rank's share, its
 * measured samples/s and its fitted model (busy = n/s + o), and the shares auto would choose
 * from them now: the coordinator's own computation (agent/jobs/job_control.c, the tick's
 * gm_autoshare_balance over jobs_shares_models), so the same code path as the job; it switches
 * to them only past its hysteresis.  jobs is the control answer to "jobs"; NULL: none. */
static void doctor_shares(json_t *jobs, int *warnings)
{
    json_t *o, *sh, *bal, *e;
    size_t i, k;
    int shown = 0;

    printf("shares of the global batch (shares = auto: busy = n/s + o per rank)\n");
    json_array_foreach(json_object_get(jobs, "jobs"), i, o)
    {
        const char *st = str(o, "state"), *mode = str(o, "shares_mode");
        sh = json_object_get(o, "shares");
        bal = json_object_get(o, "shares_balanced");
        if (strcmp(st, "running") != 0 || json_array_size(sh) == 0)
            continue;
        shown++;
        printf("  job %s (%s), shares = %s, global batch %lld\n", str(o, "id"), str(o, "name"),
               mode, (long long)json_integer_value(json_object_get(o, "global_batch")));
        printf("  %-16s %8s %12s %12s %12s %8s\n", "node", "samples", "samples/s", "fit s/s",
               "fit o (ms)", "would");
        json_array_foreach(sh, k, e)
        {
            char b1[32], b2[32], b3[32], b4[16] = "-";
            json_t *fo = json_object_get(e, "fit_overhead_s");
            if (json_is_array(bal))
                snprintf(b4, sizeof(b4), "%lld",
                         (long long)json_integer_value(json_array_get(bal, k)));
            snprintf(b3, sizeof(b3), "-");
            if (json_is_number(fo))
                snprintf(b3, sizeof(b3), "%.2f", json_number_value(fo) * 1e3);
            printf("  %-16.16s %8lld %12s %12s %12s %8s\n", str(e, "node"),
                   (long long)json_integer_value(json_object_get(e, "samples")),
                   numf(json_object_get(e, "samples_per_s"), 0, 0, b1, sizeof(b1)),
                   numf(json_object_get(e, "fit_samples_per_s"), 0, 0, b2, sizeof(b2)), b3, b4);
        }
        if (strcmp(mode, "auto") != 0)
            check(warnings, 1, "shares = %s: the split stays as configured", mode);
        else if (!json_is_array(bal))
            check(warnings, 1, "not every rank measured yet (or not coordinated here): equal "
                               "until then");
        else
            check(warnings, 1, "auto would choose the \"would\" column (it switches past its "
                               "hysteresis; last change: %s)",
                  json_is_string(json_object_get(o, "shares_reason")) ? str(o, "shares_reason")
                                                                      : "none yet");
    }
    if (shown == 0)
        check(warnings, 1, "no job running here: shares = auto starts equal and balances from "
                           "each rank's timed steps");
}

int gm_cli_doctor(int argc, char **argv)
{
    const char *config = NULL, *model = "lenet5";
    json_t *r = NULL, *jobs = NULL;
    int as_json = 0, warnings = 0, err;

    if (parse_common(argc, argv, "doctor", &config, &as_json, &model) != 0)
        return GM_EXIT_USAGE;
    err = gm_cli_control("doctor", config, json_pack("{s:s}", "cmd", "doctor"), &r);
    if (err != 0)
        return gm_err_exit_code(err);
    if (gm_cli_control("jobs", config, json_pack("{s:s}", "cmd", "jobs"), &jobs) != 0)
        jobs = NULL; /* said on stderr; the rest of the checks still help */
    if (as_json) {
        json_t *o, *arr = json_array();
        size_t i;
        json_array_foreach(json_object_get(jobs, "jobs"), i, o)
            if (strcmp(str(o, "state"), "running") == 0)
                json_array_append_new(
                    arr, json_pack("{s:O?,s:O?,s:O?,s:O?}", "id", json_object_get(o, "id"),
                                   "shares_mode", json_object_get(o, "shares_mode"), "shares",
                                   json_object_get(o, "shares"), "shares_balanced",
                                   json_object_get(o, "shares_balanced")));
        json_object_set_new(r, "shares", arr);
        json_decref(jobs);
        print_json(r);
        json_decref(r);
        return GM_EXIT_OK;
    }
    printf("node %s of cluster %s (%s)\n", str(r, "node"), str(r, "cluster"), str(r, "role"));
    printf("ports\n");
    check(&warnings, 1, "listening for members on %s (TCP, TLS 1.3)", str(r, "listen"));
    check(&warnings, 1, "control socket %s", str(r, "control"));
    doctor_discovery(r, &warnings);
    doctor_links(r, &warnings);
    printf("round-trip time, ms (each row as that node measured it)\n");
    print_matrix(json_object_get(r, "matrix"), "rtt_ms", 3);
    printf("throughput, Mbit/s\n");
    print_matrix(json_object_get(r, "matrix"), "throughput_mbps", 1);
    doctor_codecs(r, model, &warnings);
    doctor_shares(jobs, &warnings);
    printf("%d warning%s\n", warnings, warnings == 1 ? "" : "s");
    json_decref(jobs);
    json_decref(r);
    return GM_EXIT_OK;
}
