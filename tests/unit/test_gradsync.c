/*
 * tests/unit/test_gradsync.c - train/gradsync.h: the job's [comm] as one strategy (auto
 * resolved), the summary's codec, doctor's estimates, and the per-rank logic driven through a
 * counting executor over a one-rank in-memory transport.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/comm/transport_mem.h"
#include "train/gradsync.h"
#include "train/nn/model.h"

GM_TEST_DEFINE_STATE;

static void test_from_job(void)
{
    static const struct {
        enum gm_job_codec codec;
        enum gm_gradsync_kind kind;
        enum gm_codec wire;
        const char *name;
    } cases[] = {
        {GM_JOB_CODEC_AUTO, GM_GRADSYNC_KIND_DENSE, GM_CODEC_FP32, "fp32"},
        {GM_JOB_CODEC_FP32, GM_GRADSYNC_KIND_DENSE, GM_CODEC_FP32, "fp32"},
        {GM_JOB_CODEC_FP16, GM_GRADSYNC_KIND_DENSE, GM_CODEC_FP16, "fp16"},
        {GM_JOB_CODEC_POWERSGD, GM_GRADSYNC_KIND_POWERSGD, GM_CODEC_FP16, "powersgd"},
        {GM_JOB_CODEC_DILOCO, GM_GRADSYNC_KIND_DILOCO, GM_CODEC_FP16, "diloco"},
    };
    struct gm_job job;
    struct gm_gradsync_strategy s;

    gm_job_defaults(&job);
    job.comm.rank = 3;
    job.comm.local_steps = 8;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        job.comm.codec = cases[i].codec;
        GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
        GM_CHECK_EQ(s.kind, cases[i].kind);
        GM_CHECK_EQ(s.codec, cases[i].wire);
        GM_CHECK_EQ(s.algo, GM_COLL_RING);
        GM_CHECK_STREQ(gm_job_codec_name(s.id), cases[i].name);
        GM_CHECK_EQ(s.rank, 3);
        GM_CHECK_EQ(s.local_steps, 8u);
        GM_CHECK(s.error_feedback);
        GM_CHECK_STREQ(gm_gradsync_summary_codec(&s, 2), cases[i].name);
        GM_CHECK_STREQ(gm_gradsync_summary_codec(&s, 1), "none");
    }
    job.comm.codec = (enum gm_job_codec)99;
    GM_CHECK_ERR(gm_gradsync_strategy_from_job(&job, &s), -EINVAL);
    GM_CHECK_STREQ(gm_gradsync_summary_codec(NULL, 1), "none");
}

static struct gm_model *small_model(void)
{
    struct gm_model_spec spec = {
        .name = "mlp", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 4, .hidden = {16}, .nhidden = 1};
    struct gm_model *m = NULL;

    GM_CHECK_OK(gm_model_new(&spec, 1, &m));
    return m;
}

static void test_estimate(void)
{
    struct gm_gradsync_strategy st[8];
    struct gm_gradsync_cost c[5];
    struct gm_model *m = small_model();
    size_t n = gm_gradsync_strategies(st, 8), params;
    char label[48];

    GM_CHECK_EQ(n, 5u);
    if (m == NULL)
        return;
    params = gm_model_num_params(m);
    for (size_t i = 0; i < 5; i++)
        GM_CHECK_OK(gm_gradsync_estimate(&st[i], m, 4, NULL, &c[i]));
    GM_CHECK_EQ(c[0].step_bytes, 4 * params);
    GM_CHECK_EQ(c[1].step_bytes, 2 * params);
    GM_CHECK(c[2].step_bytes < c[1].step_bytes); /* low rank */
    GM_CHECK_EQ(c[3].step_bytes, 2 * params / 16);
    GM_CHECK(c[1].seconds < c[0].seconds && c[3].seconds < c[1].seconds);
    GM_CHECK(c[0].seconds > 0);
    gm_gradsync_describe(&st[2], label, sizeof(label));
    GM_CHECK_STREQ(label, "powersgd rank 2 (fp16)");
    gm_gradsync_describe(&st[3], label, sizeof(label));
    GM_CHECK_STREQ(label, "diloco H=16 (fp16)");
    /* 8-bit deltas: a byte each and a 4-byte scale per 256, over DIRECT */
    GM_CHECK_EQ(c[4].step_bytes, (params + 4 * ((params + 255) / 256)) / 16);
    GM_CHECK_EQ(st[4].algo, GM_COLL_DIRECT);
    gm_gradsync_describe(&st[4], label, sizeof(label));
    GM_CHECK_STREQ(label, "diloco8 H=16 (q8)");
    gm_model_free(m);
}

/* Executor over one in-memory rank: start, run the transport, report; counts the calls. */
struct exec1 {
    struct gm_memnet *net;
    struct gm_coll *c;
    int counted, uncounted, status, calls;
};

static void done1(struct gm_coll *c, int status, void *arg)
{
    struct exec1 *e = arg;

    (void)c;
    e->status = status;
    e->calls++;
}

static int run1(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct exec1 *e = ctx;
    int err;

    e->calls = 0;
    if ((err = start(e->c, arg, done1, e)) < 0)
        return err;
    gm_memnet_run(e->net);
    *(counted ? &e->counted : &e->uncounted) += 1;
    return e->calls == 1 ? e->status : GM_ERR_ABORTED;
}

static void test_rank_logic(void)
{
    struct gm_coll_config cc = {0};
    struct exec1 e = {0};
    struct gm_gradsync_exec ex = {.run = run1, .ctx = &e};
    struct gm_gradsync_strategy s;
    struct gm_gradsync *g = NULL;
    struct gm_job job;
    struct gm_model *m = small_model();

    e.net = gm_memnet_new(1);
    GM_CHECK(e.net != NULL);
    if (e.net == NULL || m == NULL)
        goto out;
    e.c = gm_coll_new(gm_memnet_transport(e.net, 0), &cc);
    gm_job_defaults(&job);
    job.comm.codec = GM_JOB_CODEC_FP32;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
    GM_CHECK_ERR(gm_gradsync_new(&s, 1, 1, 1, &ex, &g), -EINVAL);
    GM_CHECK(g == NULL);
    GM_CHECK_OK(gm_gradsync_new(&s, 0, 1, 1, &ex, &g));
    if (g == NULL)
        goto out;
    for (long step = 0; step < 150; step++) {
        GM_CHECK_OK(gm_gradsync_reduce(g, m, step, 150));
        GM_CHECK_OK(gm_gradsync_after_step(g, m, step, 150));
    }
    { /* a dense codec's replicas are the model: nothing else to evaluate */
        size_t n = 1;
        GM_CHECK(gm_gradsync_outer_params(g, &n) == NULL);
        GM_CHECK_EQ(n, 0u);
    }
    GM_CHECK_EQ(e.counted, 150); /* one all-reduce a step */
    GM_CHECK_EQ(e.uncounted, 2); /* hash checks: after step 99 and the last */
    GM_CHECK_EQ(gm_gradsync_hash_checks(g), 2u);
    gm_gradsync_free(g);
    g = NULL;

    /* DiLoCo, H = 4, 10 steps: the first reduce anchors (no op), syncs after steps 3 and 7,
     * each followed by a hash check, and the mid-round end restores then checks. */
    e.counted = e.uncounted = 0;
    job.comm.codec = GM_JOB_CODEC_DILOCO;
    job.comm.local_steps = 4;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
    GM_CHECK_OK(gm_gradsync_new(&s, 0, 1, 1, &ex, &g));
    GM_CHECK_EQ(gm_gradsync_diloco_sync_s(g), 0.0); /* no sync yet */
    for (long step = 0; step < 10 && g != NULL; step++) {
        GM_CHECK_OK(gm_gradsync_reduce(g, m, step, 10));
        GM_CHECK_OK(gm_gradsync_after_step(g, m, step, 10));
        if (step == 5) { /* mid-round: the outer parameters are the anchor, not the replica's */
            size_t n = 0;
            const float *outer = gm_gradsync_outer_params(g, &n);
            float *p = gm_model_params(m);
            GM_CHECK(outer != NULL && outer != p);
            GM_CHECK_EQ(n, gm_model_num_trainable(m));
            GM_CHECK(outer != NULL && memcmp(outer, p, n * sizeof(float)) == 0);
            p[0] += 1.0f; /* a local step's move: the anchor does not follow it */
            GM_CHECK(outer != NULL && outer[0] != p[0]);
        }
    }
    GM_CHECK_EQ(e.counted, 2);
    GM_CHECK_EQ(e.uncounted, 3);
    GM_CHECK(gm_gradsync_diloco_sync_s(g) > 0); /* blocking: the trainer's waits */
    gm_gradsync_free(g);
    g = NULL;

    /* the same with overlap, on an executor without submit (run stands in): the same ops,
     * the syncs' and the outer parameters' hash checks handed over at the boundaries, the last
     * step's wait, flush and check of the params */
    e.counted = e.uncounted = 0;
    job.comm.overlap = true;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
    GM_CHECK(s.overlap);
    GM_CHECK_OK(gm_gradsync_new(&s, 0, 1, 1, &ex, &g));
    for (long step = 0; step < 10 && g != NULL; step++) {
        GM_CHECK_OK(gm_gradsync_reduce(g, m, step, 10));
        GM_CHECK_OK(gm_gradsync_after_step(g, m, step, 10));
    }
    GM_CHECK_EQ(e.counted, 2);
    GM_CHECK_EQ(e.uncounted, 3);
    GM_CHECK_EQ(gm_gradsync_hash_checks(g), 3u);
    GM_CHECK(gm_gradsync_diloco_sync_s(g) > 0); /* both syncs timed, boundary to done */
out:
    gm_gradsync_free(g);
    if (e.net != NULL)
        gm_memnet_run(e.net);
    gm_coll_free(e.c);
    gm_memnet_free(e.net);
    gm_model_free(m);
}

/* An executor whose submitted ops start only at the wait (as late as the contract allows). */
struct exec_late {
    struct exec1 e;
    gm_gradsync_start_fn start[8];
    void *arg[8];
    bool counted[8];
    int n, submits, waits;
    /* wait_one's: calls, how many ran a counted op (the sync), submits that found an op of
     * the round before still queued */
    int ones, ones_counted, behind;
};

static void submit_late(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct exec_late *l = ctx;

    GM_ASSERT(l->n < 8);
    if (l->n > 0 && counted) /* a boundary's sync, with the last round's hash check queued */
        l->behind++;
    l->start[l->n] = start;
    l->arg[l->n] = arg;
    l->counted[l->n] = counted;
    l->n++;
    l->submits++;
}

static int wait_late(void *ctx)
{
    struct exec_late *l = ctx;
    int err = 0, e;

    l->waits++;
    for (int i = 0; i < l->n; i++)
        if ((e = run1(&l->e, l->start[i], l->arg[i], l->counted[i])) < 0 && err == 0)
            err = e;
    l->n = 0;
    return err;
}

/* The oldest queued op only (overlapped DiLoCo's lag step: the sync; its hash check stays). */
static int wait_one_late(void *ctx)
{
    struct exec_late *l = ctx;
    int err;

    l->ones++;
    if (l->n == 0)
        return 0;
    l->ones_counted += l->counted[0];
    err = run1(&l->e, l->start[0], l->arg[0], l->counted[0]);
    for (int i = 1; i < l->n; i++) {
        l->start[i - 1] = l->start[i];
        l->arg[i - 1] = l->arg[i];
        l->counted[i - 1] = l->counted[i];
    }
    l->n--;
    return err;
}

static int run_late(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct exec_late *l = ctx;

    GM_CHECK_EQ(l->n, 0); /* gradsync waits before it runs anything else */
    return run1(&l->e, start, arg, counted);
}

/* Overlapped DiLoCo: the weights do not depend on when a sync completes: an executor that
 * completes each op inside submit (run), one that starts them only at the next wait, and one
 * that also has wait_one (the lag step waits for the sync alone, the hash check is waited
 * for at the next boundary) give the same bits; the late ones were handed 2 ops at each of 3
 * boundaries and every hash check passed.  gm_gradsync_eval_defer counts the steps from an
 * epoch's end to the update of the round in flight (H = 3 and 8). */
static void test_overlap_timing(void)
{
    struct gm_coll_config cc = {0};
    struct exec1 e = {0};
    struct exec_late l = {0}, o = {0};
    struct gm_gradsync_exec now = {.run = run1, .ctx = &e};
    struct gm_gradsync_exec late = {
        .run = run_late, .submit = submit_late, .wait = wait_late, .ctx = &l};
    struct gm_gradsync_exec one = {.run = run_late,
                                   .submit = submit_late,
                                   .wait = wait_late,
                                   .wait_one = wait_one_late,
                                   .ctx = &o};
    const struct gm_gradsync_exec *ex[3] = {&now, &late, &one};
    struct gm_gradsync_strategy s;
    struct gm_gradsync *g = NULL;
    struct gm_job job;
    struct gm_model *m[3] = {small_model(), small_model(), small_model()};
    size_t np;

    e.net = gm_memnet_new(1);
    l.e.net = gm_memnet_new(1);
    o.e.net = gm_memnet_new(1);
    if (e.net == NULL || l.e.net == NULL || o.e.net == NULL || m[0] == NULL || m[1] == NULL ||
        m[2] == NULL)
        goto out;
    e.c = gm_coll_new(gm_memnet_transport(e.net, 0), &cc);
    l.e.c = gm_coll_new(gm_memnet_transport(l.e.net, 0), &cc);
    o.e.c = gm_coll_new(gm_memnet_transport(o.e.net, 0), &cc);
    gm_job_defaults(&job);
    job.comm.codec = GM_JOB_CODEC_DILOCO;
    job.comm.local_steps = 3;
    job.comm.overlap = true;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
    np = gm_model_num_params(m[0]);
    for (int k = 0; k < 3; k++) {
        GM_CHECK_OK(gm_gradsync_new(&s, 0, 1, 1, ex[k], &g));
        for (long step = 0; step < 11 && g != NULL; step++) {
            float *p = gm_model_params(m[k]);
            GM_CHECK_OK(gm_gradsync_reduce(g, m[k], step, 11));
            for (size_t i = 0; i < np; i++) /* a local step: deterministic, step-dependent */
                p[i] -= 1e-3f * (float)((i + (size_t)step) % 7) - 2e-3f;
            GM_CHECK_OK(gm_gradsync_after_step(g, m[k], step, 11));
            /* an epoch ending here waits for the round's update: lag (1) steps after each
             * boundary (3, 6, 9 steps done), none elsewhere nor at the run's end */
            GM_CHECK_EQ(gm_gradsync_eval_defer(g, step + 1, 11),
                        (step + 1) % 3 == 0 && step + 1 < 11 ? 1 : 0);
        }
        if (g != NULL) /* each round's anchor, and the end's parameters */
            GM_CHECK_EQ(gm_gradsync_hash_checks(g), 4u);
        gm_gradsync_free(g);
        g = NULL;
    }
    GM_CHECK_EQ(l.submits, 6);
    GM_CHECK(l.waits >= 3);
    GM_CHECK_EQ(l.ones, 0);
    /* wait_one: each round's lag step (steps 3, 6 and 9) waited for its sync alone; each hash
     * check was still queued then and was waited for before the next boundary handed over
     * its ops (the last one by the run's end) */
    GM_CHECK_EQ(o.submits, 6);
    GM_CHECK_EQ(o.ones, 3);
    GM_CHECK_EQ(o.ones_counted, 3);
    GM_CHECK_EQ(o.behind, 0);
    GM_CHECK_EQ(o.n, 0);
    for (int k = 1; k < 3; k++)
        GM_CHECK(memcmp(gm_model_params(m[0]), gm_model_params(m[k]), np * sizeof(float)) == 0);
    /* H = 8, lag 2: an epoch ending 1 step after a boundary waits 1 more; none before the
     * first boundary (nothing in flight) */
    job.comm.local_steps = 8;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &s));
    GM_CHECK_OK(gm_gradsync_new(&s, 0, 1, 1, &now, &g));
    for (long step = 0; step < 20 && g != NULL; step++) {
        const long done = step + 1, pos = done % 8;
        GM_CHECK_OK(gm_gradsync_reduce(g, m[0], step, 20));
        gm_model_params(m[0])[0] += 1e-3f;
        GM_CHECK_OK(gm_gradsync_after_step(g, m[0], step, 20));
        GM_CHECK_EQ(gm_gradsync_eval_defer(g, done, 20), done >= 8 && pos < 2 ? 2 - pos : 0);
    }
    gm_gradsync_free(g);
    g = NULL;
out:
    for (int k = 0; k < 3; k++)
        gm_model_free(m[k]);
    if (e.net != NULL)
        gm_memnet_run(e.net);
    if (l.e.net != NULL)
        gm_memnet_run(l.e.net);
    if (o.e.net != NULL)
        gm_memnet_run(o.e.net);
    gm_coll_free(e.c);
    gm_coll_free(l.e.c);
    gm_coll_free(o.e.c);
    gm_memnet_free(e.net);
    gm_memnet_free(l.e.net);
    gm_memnet_free(o.e.net);
}

/* The alpha-beta fit: recovers a link from samples at two sizes; with one size only it passes
 * through the samples (the prior fixes the rest); garbage samples are ignored. */
static void test_ab_fit(void)
{
    struct gm_gradsync_ab f;
    struct gm_coll_link l;

    gm_gradsync_ab_init(&f, 0.025, 2.5e6); /* the prior: 25 ms, 20 Mbit/s */
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK_NEAR(l.alpha_s, 0.025, 1e-9, 1e-6);
    GM_CHECK_NEAR(l.bytes_per_s, 2.5e6, 0, 1e-6);
    for (int i = 0; i < 400; i++) { /* the truth: 10 ms, 1 MB/s */
        double b = i % 2 ? 1e4 : 2e5;
        gm_gradsync_ab_add(&f, b, 0.010 + b / 1e6);
    }
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK_NEAR(l.alpha_s, 0.010, 0, 0.05);
    GM_CHECK_NEAR(l.bytes_per_s, 1e6, 0, 0.05);

    gm_gradsync_ab_init(&f, 0.025, 2.5e6);
    for (int i = 0; i < 400; i++) /* one size: 5 KB in 60 ms each time */
        gm_gradsync_ab_add(&f, 5000, 0.060);
    gm_gradsync_ab_add(&f, -1, 0.5);
    gm_gradsync_ab_add(&f, 5000, NAN);
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK_NEAR(l.alpha_s + 5000 / l.bytes_per_s, 0.060, 0, 0.03);
    GM_CHECK(l.alpha_s > 0 && l.bytes_per_s > 0);
    GM_CHECK_EQ(f.n, 400u);

    /* small messages only (a compressing codec), slower than the prior's latency says: with
     * the 1 Gbit/s placeholder the fit reads a free link, with the measured link as the prior
     * (gm_gradsync_ab_prior, samples kept) a 256 KiB message costs about what it measured */
    gm_gradsync_ab_init(&f, 0, 125e6);
    for (int i = 0; i < 30; i++)
        gm_gradsync_ab_add(&f, 4532, 0.0025);
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK(l.bytes_per_s > 1e9);             /* the failure the prior is for */
    gm_gradsync_ab_prior(&f, 0.00175, 22.5e6); /* measured: 3.5 ms RTT, 180 Mbit/s */
    GM_CHECK_EQ(f.n, 30u);
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK_NEAR(l.alpha_s + 4532 / l.bytes_per_s, 0.0025, 0, 0.05);
    GM_CHECK_NEAR(l.alpha_s + 262144 / l.bytes_per_s, 0.00175 + 262144 / 22.5e6, 0, 0.25);

    /* DiLoCo over a 51 ms tunnel: 123 KB in 35-40 ms every sync; the free fit would read no
     * latency at all, the floor keeps the measured one-way 25 ms */
    gm_gradsync_ab_init(&f, 0.0255, 2.5e6);
    for (int i = 0; i < 30; i++)
        gm_gradsync_ab_add(&f, 123412, 0.035 + 0.005 * (i % 2));
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK(l.alpha_s >= 0.0255 - 1e-12);
    GM_CHECK_NEAR(l.alpha_s + 123412 / l.bytes_per_s, 0.0375, 0, 0.05); /* still fits the samples */

    /* bigger messages went faster (a link that sped up between sizes): the slope reads as
     * "very fast" and the latency as the samples' mean, not the free fit's intercept above
     * every sample (0.63 s here) */
    gm_gradsync_ab_init(&f, 0.001, 1e9);
    for (int i = 0; i < 20; i++)
        gm_gradsync_ab_add(&f, i % 2 ? 1e6 : 4e6, i % 2 ? 0.5 : 0.1);
    gm_gradsync_ab_link(&f, &l);
    GM_CHECK(l.bytes_per_s >= 1e11);
    GM_CHECK(l.alpha_s <= 0.5 && l.alpha_s >= 0.1);
}

static struct gm_model *lenet(void)
{
    struct gm_model_spec spec = {
        .name = "lenet5", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    struct gm_model *m = NULL;

    GM_CHECK_OK(gm_model_new(&spec, 64, &m));
    return m;
}

static int pick_for(struct gm_model *m, double alpha, double mbps, double compute_s,
                    struct gm_gradsync_auto_out *o)
{
    struct gm_coll_link links[4];
    struct gm_gradsync_auto_in in = {.m = m, .world = 2, .links = links, .compute_s = compute_s};

    for (int i = 0; i < 4; i++)
        links[i] = (struct gm_coll_link){.alpha_s = alpha, .bytes_per_s = mbps * 1e6 / 8};
    return gm_gradsync_auto_choose(&in, o);
}

/* auto on synthetic links: the LAN keeps fp32; a 20 Mbit/s 50 ms tunnel gets DiLoCo with the
 * smallest H that fits; the pick never gets more lossy as the link gets faster; a hopeless link
 * is flagged; bad input is refused. */
static void test_auto(void)
{
    struct gm_model *m = lenet();
    struct gm_gradsync_auto_out o, o2;
    int prev = 99;

    /* LAN: 1 Gbit/s, 50 us; 20 ms of compute: fp32 (4 x 61706 B twice over the ring, ~2 ms) */
    GM_CHECK_OK(pick_for(m, 50e-6, 1000, 0.020, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP32);
    GM_CHECK(o.cand[0].fits && !o.too_slow);
    GM_CHECK(o.speedup > 1.6 && o.speedup <= 2);
    GM_CHECK(strstr(o.reason, "fp32") != NULL);

    /* tunnel: 20 Mbit/s, 25 ms each way, 10 ms of compute */
    GM_CHECK_OK(pick_for(m, 0.025, 20, 0.010, &o));
    GM_CHECK_EQ(o.pick.kind, GM_GRADSYNC_KIND_DILOCO);
    GM_CHECK(!o.cand[0].fits && !o.cand[1].fits && !o.cand[2].fits && o.cand[3].fits);
    GM_CHECK(o.cand[3].comm_s <= 0.2 * 0.010 + 1e-12);
    GM_CHECK(o.pick.local_steps >= GM_GRADSYNC_AUTO_MIN_H &&
             o.pick.local_steps <= GM_GRADSYNC_AUTO_MAX_H);
    /* H is the smallest that fits: one sync over H-1 steps would not */
    GM_CHECK(o.cand[3].comm_s * o.pick.local_steps / (o.pick.local_steps - 1) > 0.2 * 0.010);
    GM_CHECK(o.speedup > 1.5 && !o.too_slow);
    /* 5 Mbit/s needs a larger H */
    GM_CHECK_OK(pick_for(m, 0.025, 5, 0.010, &o2));
    GM_CHECK_EQ(o2.pick.kind, GM_GRADSYNC_KIND_DILOCO);
    GM_CHECK(o2.pick.local_steps > o.pick.local_steps);

    /* faster links never pick a later (more lossy) candidate */
    for (double mbps = 1; mbps <= 100000; mbps *= 2) {
        int at = -1;
        GM_CHECK_OK(pick_for(m, 0.5e-3, mbps, 0.010, &o));
        for (int i = 0; i < GM_GRADSYNC_AUTO_NCAND; i++)
            if (o.cand[i].s.id == o.pick.id)
                at = i;
        GM_CHECK(at >= 0 && at <= prev);
        prev = at;
    }
    GM_CHECK_EQ(prev, 0); /* 100 Gbit/s, 0.5 ms: fp32 */

    /* hopeless: 10 kbit/s, 1 s each way: even H = max does not fit, and it is said */
    GM_CHECK_OK(pick_for(m, 1.0, 0.01, 0.010, &o));
    GM_CHECK(o.too_slow);
    GM_CHECK(strstr(o.reason, "nothing keeps") != NULL);
    GM_CHECK_EQ(o.pick.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);

    /* overlapped DiLoCo ([comm] overlap): the sync runs during the lag (a quarter of H)
     * steps after its boundary: H is the smallest whose lag steps cover one sync, below the
     * blocking H, and what shows per step is nothing */
    {
        struct gm_job job;
        struct gm_coll_link links[4];
        struct gm_gradsync_auto_in in = {
            .m = m, .world = 2, .links = links, .compute_s = 0.010, .job = &job};
        double sync;
        gm_job_defaults(&job);
        job.comm.overlap = true;
        for (int i = 0; i < 4; i++)
            links[i] = (struct gm_coll_link){.alpha_s = 0.025, .bytes_per_s = 20e6 / 8};
        GM_CHECK_OK(pick_for(m, 0.025, 20, 0.010, &o));
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.pick.kind, GM_GRADSYNC_KIND_DILOCO);
        GM_CHECK(o2.pick.overlap && !o.pick.overlap);
        sync = o.cand[3].comm_s * o.pick.local_steps; /* one sync, blocking model */
        GM_CHECK(gm_gradsync_diloco_lag(o2.pick.local_steps) * 0.010 >= sync * (1 - 1e-9));
        GM_CHECK(o2.pick.local_steps == GM_GRADSYNC_AUTO_MIN_H ||
                 gm_gradsync_diloco_lag(o2.pick.local_steps - 1) * 0.010 < sync);
        GM_CHECK(o2.pick.local_steps < o.pick.local_steps);
        GM_CHECK(o2.cand[3].comm_s == 0);
        GM_CHECK(o2.speedup > o.speedup);
        /* a link too slow for H = max: the uncovered part of the sync shows, per step */
        for (int i = 0; i < 4; i++)
            links[i] = (struct gm_coll_link){.alpha_s = 0.025, .bytes_per_s = 0.5e6 / 8};
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.cand[3].s.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
        GM_CHECK(o2.cand[3].comm_s > 0 && !o2.cand[3].fits);
        for (int c = 3; c < 5; c++) { /* 16- and 8-bit deltas, each at the cap */
            struct gm_gradsync_strategy one = o2.cand[c].s;
            struct gm_gradsync_cost c1;
            one.local_steps = 1;
            GM_CHECK_OK(gm_gradsync_estimate(&one, m, 2, links, &c1));
            GM_CHECK_NEAR(o2.cand[c].sync_s, c1.seconds, 0, 0);
            GM_CHECK_EQ(o2.cand[c].s.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
            GM_CHECK_NEAR(o2.cand[c].comm_s,
                          (c1.seconds - gm_gradsync_diloco_lag(GM_GRADSYNC_AUTO_MAX_H) * 0.010) /
                              GM_GRADSYNC_AUTO_MAX_H,
                          1e-12, 1e-9);
        }
        /* 8-bit deltas: about half the sync (0.51x the bytes, one hop instead of two), so
         * the cheaper step, and the pick: nothing fits */
        GM_CHECK(o2.cand[4].sync_s < 0.55 * o2.cand[3].sync_s);
        GM_CHECK(o2.cand[4].sync_s > 0.40 * o2.cand[3].sync_s);
        GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(o2.pick.codec, GM_CODEC_Q8);
        GM_CHECK_EQ(o2.pick.algo, GM_COLL_DIRECT);
        GM_CHECK(o2.too_slow);
        /* a measured sync (in.sync_s, while DiLoCo runs) sizes H, not the links (which
         * predict ~100 ms here): 80 ms at 7 ms of compute gets the smallest H whose lag steps
         * cover 80 ms; 180 ms (the tunnel's real sync, TCP and TLS included) the smallest
         * whose lag covers 180 ms, or the cap, and then the reason says how much is covered */
        for (int i = 0; i < 4; i++)
            links[i] = (struct gm_coll_link){.alpha_s = 0.025, .bytes_per_s = 20e6 / 8};
        in.compute_s = 0.007;
        for (int k = 0; k < 3; k++) {
            const double meas[3] = {0.080, 0.180, 0.600};
            const struct gm_gradsync_auto_cand *c16 = &o2.cand[3], *c8 = &o2.cand[4];
            uint32_t h, lag;
            in.sync_s = meas[k];
            GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
            h = c16->s.local_steps;
            lag = gm_gradsync_diloco_lag(h);
            GM_CHECK_EQ(o2.pick.kind, GM_GRADSYNC_KIND_DILOCO);
            GM_CHECK_NEAR(c16->sync_s, meas[k], 0, 0);
            /* the 8-bit sync is the measured 16-bit one x the links' ratio */
            GM_CHECK(c8->sync_s > 0.40 * meas[k] && c8->sync_s < 0.55 * meas[k]);
            if (lag * 0.007 >= meas[k]) { /* covered: by the smallest such H, at 16 bits */
                GM_CHECK(h == GM_GRADSYNC_AUTO_MIN_H ||
                         gm_gradsync_diloco_lag(h - 1) * 0.007 < meas[k]);
                GM_CHECK(c16->comm_s == 0 && c16->fits);
                GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO);
                GM_CHECK_NEAR(o2.sync_s, meas[k], 0, 0);
                GM_CHECK(strstr(o2.reason, "cap") == NULL);
            } else { /* not even at the cap: 16 bits do not fit; 8-bit deltas are next */
                uint32_t h8 = c8->s.local_steps, lag8 = gm_gradsync_diloco_lag(h8);
                GM_CHECK_EQ(h, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
                GM_CHECK_NEAR(c16->comm_s, (meas[k] - lag * 0.007) / h, 1e-12, 1e-9);
                GM_CHECK(!c16->fits);
                GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO8);
                GM_CHECK_NEAR(o2.sync_s, c8->sync_s, 0, 0);
                if (lag8 * 0.007 < c8->sync_s) { /* 8 bits at the cap too, and it is said */
                    char want[64];
                    GM_CHECK_EQ(h8, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
                    snprintf(want, sizeof(want),
                             "H at its cap: %u lag steps cover %.0f of a %.0f ms", lag8, lag8 * 7.0,
                             c8->sync_s * 1e3);
                    GM_CHECK(strstr(o2.reason, want) != NULL);
                } else {
                    GM_CHECK(h8 == GM_GRADSYNC_AUTO_MIN_H ||
                             gm_gradsync_diloco_lag(h8 - 1) * 0.007 < c8->sync_s);
                    GM_CHECK(c8->comm_s == 0);
                }
            }
            if (k == 0)
                GM_CHECK(lag * 0.007 >= meas[k]);
            if (k == 2)
                GM_CHECK(lag * 0.007 < meas[k]);
        }
        /* the 180 ms sync of LeNet-5 over the 20 Mbit/s tunnel at its 7 ms steps would need
         * 26 lag steps at 16 bits, H=101: at the cap of 64, 16 lag steps (112 ms) leave 68
         * ms uncovered; 8-bit deltas (a sync of about 90 ms) are hidden below the cap */
        in.sync_s = 0.180;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.cand[3].s.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
        GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK(o2.pick.local_steps < (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
        GM_CHECK(gm_gradsync_diloco_lag(o2.pick.local_steps) * 0.007 >= o2.sync_s);
        GM_CHECK(strstr(o2.reason, "cap") == NULL);
        /* the 5 Mbit/s tunnel's 600 ms: 8 bits at the cap as well, covering 112 of ~300 */
        in.sync_s = 0.600;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(o2.pick.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
        GM_CHECK(o2.cand[4].comm_s < o2.cand[3].comm_s / 2);
        GM_CHECK(strstr(o2.reason, "H at its cap: 16 lag steps cover 112 of a") != NULL);
        /* measured on the 8-bit deltas (sync_codec): the 16-bit sync is priced up from it */
        in.sync_codec = GM_CODEC_Q8;
        in.sync_s = 0.090;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_NEAR(o2.cand[4].sync_s, 0.090, 0, 0);
        GM_CHECK(o2.cand[3].sync_s > 0.090 / 0.55 && o2.cand[3].sync_s < 0.090 / 0.40);
        /* ... or at what 16 bits measured when they ran, where that is longer */
        in.other_sync_s = 0.300;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_NEAR(o2.cand[3].sync_s, 0.300, 0, 0);
        GM_CHECK_NEAR(o2.cand[4].sync_s, 0.090, 0, 0); /* the running width: its own measure */
        in.other_sync_s = 0.100;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK(o2.cand[3].sync_s > 0.090 / 0.55); /* the scaled one, longer */
        in.other_sync_s = 0;
        in.sync_codec = GM_CODEC_FP16;
        /* 80 ms is covered below the cap at 16 bits: H=45, lag 12 (84 ms); H=44's 11 (77 ms)
         * is not */
        in.sync_s = 0.080;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.pick.id, GM_JOB_CODEC_DILOCO);
        GM_CHECK_EQ(o2.pick.local_steps, 45u);
        GM_CHECK(strstr(o2.reason, "cap") == NULL);
        /* a measured sync is DiLoCo's alone: the blocking pick prices it per step too */
        job.comm.overlap = false;
        in.sync_s = 0.180;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o2));
        GM_CHECK_EQ(o2.pick.kind, GM_GRADSYNC_KIND_DILOCO);
        GM_CHECK_NEAR(o2.cand[3].comm_s, 0.180 / o2.pick.local_steps, 1e-12, 1e-9);
    }

    GM_CHECK_ERR(pick_for(m, 0.025, 20, 0, &o), -EINVAL);
    GM_CHECK_ERR(pick_for(NULL, 0.025, 20, 0.01, &o), -EINVAL);
    gm_model_free(m);
}

/* auto's DiLoCo over a run of known length (gm_gradsync_diloco_plan, as every rank runs it):
 * the LeNet-5 tunnel rows of bench/seed_table.sh (thousands of steps, H 52-64) run as auto
 * picked them; the 260-step fine-tune, where auto's H of 50-64 left 4 rounds, gets at least
 * GM_GRADSYNC_AUTO_MIN_ROUNDS and plain averaging below GM_GRADSYNC_AUTO_NESTEROV_ROUNDS, and
 * says so; an explicit codec = diloco is the user's, whatever the run's length. */
static void test_short_run(void)
{
    struct gm_model *m = lenet();
    struct gm_job job;
    struct gm_coll_link links[4];
    struct gm_gradsync_auto_in in = {.m = m, .world = 2, .links = links, .job = &job};
    struct gm_gradsync_auto_out o;
    struct gm_gradsync_strategy s;
    struct gm_gradsync_diloco_run r;

    gm_job_defaults(&job);
    job.comm.overlap = true;
    for (int i = 0; i < 4; i++)
        links[i] = (struct gm_coll_link){.alpha_s = 0.025, .bytes_per_s = 20e6 / 8};
    /* LeNet-5 over the 20 Mbit/s tunnel: a 180 ms sync at 16 bits, 7 ms steps; over 5
     * Mbit/s 600 ms: 16 bits at the cap both (the quarter-round lag's 16 steps cover 112 ms),
     * so 8-bit deltas: hidden at H=49 (lag 13: 91 ms), at the cap at 5 Mbit/s.  The table's
     * pair runs 5 epochs of 468 steps (--quick: 3): nothing changes */
    for (int k = 0; k < 2; k++) {
        const double sync[2] = {0.180, 0.600};
        const uint32_t want[2] = {49, GM_GRADSYNC_AUTO_MAX_H};
        in.compute_s = 0.007;
        in.sync_s = sync[k];
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(o.pick.local_steps, want[k]);
        /* as the ranks get it: the coordinator's codec and H, the job's outer step, capped */
        job.comm.local_steps = (int)o.pick.local_steps;
        job.comm.auto_resolved = true;
        GM_CHECK_OK(gm_gradsync_strategy_of(o.pick.id, &job, &s));
        GM_CHECK(s.cap_h);
        for (long total = 3 * 468; total <= 5 * 468; total += 2 * 468) {
            gm_gradsync_diloco_plan(&s, total, &r);
            GM_CHECK_EQ(r.h, want[k]);
            GM_CHECK_NEAR(r.outer_lr, 0.7, 0, 0);
            GM_CHECK_NEAR(r.outer_momentum, 0.9, 0, 0);
            GM_CHECK_EQ(r.rounds, total / (long)want[k]);
            GM_CHECK_EQ(r.lag, gm_gradsync_diloco_lag(want[k])); /* a quarter: below the cap */
            GM_CHECK_EQ(r.why[0], '\0');
        }
        job.comm.auto_resolved = false;
    }
    /* resnet18's fine-tune over the same tunnel: a 10.5 s sync of the fp16 model, 0.4 s
     * steps: 16 bits at the cap, 64 (lag 16, 6.4 s); 8 bits (about 5.2 s) hidden at H=52
     * (lag 13), 5 rounds in the run's 260 steps; cut to 32 (8 rounds), with plain averaging
     * for its outer step and, H at the run's cap, half of it as the lag (16 steps, 6.4 s: the
     * quarter's 8 would leave 2 s of each sync blocking) */
    in.compute_s = 0.40;
    in.sync_s = 10.5;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.cand[3].s.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
    GM_CHECK(o.pick.local_steps > 32 && o.pick.local_steps < (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
    job.comm.local_steps = (int)o.pick.local_steps;
    job.comm.auto_resolved = true;
    GM_CHECK_OK(gm_gradsync_strategy_of(o.pick.id, &job, &s));
    gm_gradsync_diloco_plan(&s, 260, &r);
    GM_CHECK_EQ(r.h, 32u);
    {
        char want[224];
        snprintf(want, sizeof(want),
                 "H %u -> 32: a run of 260 steps syncs at least 8 times; lag 16, half the "
                 "round: H is at the run's cap; outer step plain averaging: 8 rounds < 16",
                 o.pick.local_steps);
        GM_CHECK_STREQ(r.why, want);
    }
    GM_CHECK_EQ(gm_gradsync_diloco_lag(r.h), 8u);
    GM_CHECK_EQ(r.lag, 16u);
    /* the plan's rules, on a pick of H=54 (any H would do) */
    job.comm.local_steps = 54;
    job.comm.auto_resolved = true;
    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO, &job, &s));
    gm_gradsync_diloco_plan(&s, 260, &r);
    GM_CHECK_EQ(r.h, 260u / GM_GRADSYNC_AUTO_MIN_ROUNDS);
    GM_CHECK_EQ(r.h, 32u);
    GM_CHECK_EQ(r.rounds, 8);
    GM_CHECK_NEAR(r.outer_lr, 1.0, 0, 0);
    GM_CHECK_NEAR(r.outer_momentum, 0, 0, 0);
    GM_CHECK_STREQ(r.why, "H 54 -> 32: a run of 260 steps syncs at least 8 times; lag 16, half "
                          "the round: H is at the run's cap; outer step plain averaging: 8 "
                          "rounds < 16");
    GM_CHECK_EQ(gm_gradsync_diloco_h(&s, 260), r.h);
    /* 16 rounds of H: Nesterov's outer step kept; one step fewer: plain averaging, H kept */
    gm_gradsync_diloco_plan(&s, 54L * GM_GRADSYNC_AUTO_NESTEROV_ROUNDS, &r);
    GM_CHECK_EQ(r.h, 54u);
    GM_CHECK_NEAR(r.outer_lr, 0.7, 0, 0);
    GM_CHECK_NEAR(r.outer_momentum, 0.9, 0, 0);
    GM_CHECK_EQ(r.why[0], '\0');
    GM_CHECK_EQ(r.lag, 14u); /* a quarter of 54: below the run's cap (107) */
    gm_gradsync_diloco_plan(&s, 54L * GM_GRADSYNC_AUTO_NESTEROV_ROUNDS - 1, &r);
    GM_CHECK_EQ(r.h, 54u);
    GM_CHECK_EQ(r.rounds, (long)GM_GRADSYNC_AUTO_NESTEROV_ROUNDS - 1);
    GM_CHECK_NEAR(r.outer_momentum, 0, 0, 0);
    GM_CHECK_STREQ(r.why, "outer step plain averaging: 15 rounds < 16");
    /* the run just long enough for 8 rounds of H: H kept, at the cap (half lag); one step
     * shorter: cut by one; one round more: below the cap, a quarter */
    gm_gradsync_diloco_plan(&s, 54L * GM_GRADSYNC_AUTO_MIN_ROUNDS, &r);
    GM_CHECK_EQ(r.h, 54u);
    GM_CHECK_EQ(r.lag, 27u);
    gm_gradsync_diloco_plan(&s, 54L * GM_GRADSYNC_AUTO_MIN_ROUNDS - 1, &r);
    GM_CHECK_EQ(r.h, 53u);
    GM_CHECK_EQ(r.lag, 27u);
    gm_gradsync_diloco_plan(&s, 54L * (GM_GRADSYNC_AUTO_MIN_ROUNDS + 1), &r);
    GM_CHECK_EQ(r.lag, 14u);
    { /* blocking rounds: no lag, at the cap or not */
        struct gm_gradsync_strategy b = s;
        b.overlap = false;
        gm_gradsync_diloco_plan(&b, 260, &r);
        GM_CHECK_EQ(r.h, 32u);
        GM_CHECK_EQ(r.lag, 0u);
    }
    /* a job that asked for plain averaging itself (and blocking rounds): nothing to say */
    {
        struct gm_gradsync_strategy p = s;
        p.outer_lr = 1.0;
        p.outer_momentum = 0;
        p.overlap = false;
        gm_gradsync_diloco_plan(&p, 260, &r);
        GM_CHECK_STREQ(r.why, "H 54 -> 32: a run of 260 steps syncs at least 8 times");
    }
    /* shorter than the rounds wanted: H=1, a sync every step */
    gm_gradsync_diloco_plan(&s, GM_GRADSYNC_AUTO_MIN_ROUNDS - 1, &r);
    GM_CHECK_EQ(r.h, 1u);
    GM_CHECK_EQ(r.rounds, (long)GM_GRADSYNC_AUTO_MIN_ROUNDS - 1);
    GM_CHECK(strstr(r.why, "H 54 -> 1: ") != NULL);
    /* the run's length unknown: as picked */
    gm_gradsync_diloco_plan(&s, 0, &r);
    GM_CHECK_EQ(r.h, 54u);
    GM_CHECK_EQ(r.rounds, 0);
    GM_CHECK_EQ(r.why[0], '\0');
    /* codec = diloco, local_steps = 64 written by the user: run as written */
    job.comm.auto_resolved = false;
    job.comm.local_steps = 64;
    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO, &job, &s));
    GM_CHECK(!s.cap_h);
    gm_gradsync_diloco_plan(&s, 260, &r);
    GM_CHECK_EQ(r.h, 64u);
    GM_CHECK_EQ(r.lag, 16u);
    GM_CHECK_EQ(r.rounds, 4);
    GM_CHECK_NEAR(r.outer_momentum, 0.9, 0, 0);
    GM_CHECK_EQ(r.why[0], '\0');
    gm_model_free(m);
}

/* Switching mid-run: the hysteresis of gm_gradsync_switch_decide (a pick must hold on
 * GM_GRADSYNC_SWITCH_CONFIRM decisions in a row, outside the dwell after a group or a switch,
 * and clear the budget by GM_GRADSYNC_SWITCH_HYST either way), the fit as a ring hop, and the
 * step a dense strategy can be left at. */
static void test_switch(void)
{
    struct gm_model *m = lenet();
    struct gm_gradsync_auto_out fast, slow, band;
    struct gm_gradsync_strategy fp32, fp16, diloco;
    struct gm_gradsync_switch sw = {0};
    struct gm_coll_link fit = {0.012, 1e6}, hop;
    const double compute = 0.020;

    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_FP32, NULL, &fp32));
    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_FP16, NULL, &fp16));
    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO, NULL, &diloco));
    GM_CHECK_EQ(gm_gradsync_auto_index(&fp32), 0);
    GM_CHECK_EQ(gm_gradsync_auto_index(&fp16), 1);
    GM_CHECK_EQ(gm_gradsync_auto_index(&diloco), 3);
    GM_CHECK_OK(pick_for(m, 50e-6, 1000, compute, &fast)); /* LAN: fp32 */
    GM_CHECK_OK(pick_for(m, 0.025, 1, compute, &slow));    /* 1 Mbit/s, 50 ms RTT: 8-bit DiLoCo */
    GM_CHECK_EQ(fast.pick.id, GM_JOB_CODEC_FP32);
    GM_CHECK_EQ(slow.pick.id, GM_JOB_CODEC_DILOCO8);
    GM_CHECK_EQ(gm_gradsync_auto_index(&slow.pick), 4);

    /* fp32 on a fast link stays, however often it is asked */
    for (long step = 0; step < 50; step++)
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &fast, &fp32, compute, 0, step), -1);
    /* the link turns slow: the first decision only starts a streak, the second switches */
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 50), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 51), 4);
    /* an interrupted streak starts again */
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 52), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &fast, &fp32, compute, 0, 53), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 54), -1);
    /* the dwell: nothing within GM_GRADSYNC_SWITCH_DWELL steps of a switch taking effect */
    gm_gradsync_switch_quiet(&sw, 60);
    for (long step = 60; step < 60 + GM_GRADSYNC_SWITCH_DWELL; step++)
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, step), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 80), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &fp32, compute, 0, 81), 4);
    /* back up: DiLoCo on a fast link goes to fp32 (its communication is far under budget/1.5) */
    GM_CHECK(fast.cand[0].comm_s < 0.2 * compute / GM_GRADSYNC_SWITCH_HYST);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &fast, &diloco, compute, 0, 90), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &fast, &diloco, compute, 0, 91), 0);
    /* DiLoCo on the slow link at the H auto picks there: nothing to change */
    {
        struct gm_gradsync_strategy at = slow.pick;
        for (long step = 100; step < 110; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &slow, &at, compute, 0, step), -1);
    }
    /* re-sizing H from a measured sync (overlapped DiLoCo, 7 ms of compute; a switch to
     * DiLoCo with the new H, past the same hysteresis) */
    {
        struct gm_job job;
        struct gm_coll_link links[4];
        struct gm_gradsync_auto_in in = {
            .m = m, .world = 2, .links = links, .compute_s = 0.007, .job = &job};
        struct gm_gradsync_auto_out o;
        struct gm_gradsync_strategy cur;
        gm_job_defaults(&job);
        job.comm.overlap = true;
        for (int i = 0; i < 4; i++)
            links[i] = (struct gm_coll_link){.alpha_s = 0.025, .bytes_per_s = 20e6 / 8};
        GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO, &job, &cur));
        GM_CHECK(cur.overlap);
        /* H=33 (lag 9: 63 ms) against a measured 180 ms sync: a larger H, on the second
         * decision in a row; 16 bits would not be hidden even at the cap (lag 16: 112 ms),
         * so it is 8-bit deltas, hidden at auto's H */
        cur.local_steps = 33;
        in.sync_s = 0.180;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK(o.pick.local_steps > 33);
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
        gm_gradsync_switch_quiet(&sw, 0);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 300), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 301), 4);
        /* 8-bit deltas running at H=48, their own measured sync 45 ms: 16 bits (about 90 ms)
         * would be hidden at H=53 (lag 14: 98 ms), but not with 1.5x to spare at the cap
         * (112 ms < 135): they stay; at 30 ms (16 bits ~60 ms, 90 <= 112) they go back */
        {
            struct gm_gradsync_strategy c8;
            GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO8, &job, &c8));
            c8.local_steps = 48;
            in.sync_codec = GM_CODEC_Q8;
            in.sync_s = 0.045;
            GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
            GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO);
            for (long step = 302; step < 308; step++)
                GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &c8, 0.007, 0, step), -1);
            /* at 30 ms, had 16 bits measured 120 ms when they ran: 112 < 180, auto keeps 8 bits
             * (at the smaller H their 30 ms allow) */
            in.sync_s = 0.030;
            in.other_sync_s = 0.120;
            GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
            GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
            GM_CHECK(o.cand[3].sync_s == 0.120);
            in.other_sync_s = 0;
            GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
            GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO);
            GM_CHECK(gm_gradsync_diloco_lag(GM_GRADSYNC_AUTO_MAX_H) * 0.007 >=
                     GM_GRADSYNC_SWITCH_HYST * o.cand[3].sync_s);
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &c8, 0.007, 0, 308), -1);
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &c8, 0.007, 0, 309), 3);
            in.sync_codec = GM_CODEC_FP16;
        }
        /* H=40 (lag 10: 70 ms) against 100 ms, over 1/1.5 of it covered: H stays although
         * auto would size it at 57 (lag 15: 105 ms) now */
        cur.local_steps = 40;
        in.sync_s = 0.100;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.pick.local_steps, 57u);
        for (long step = 310; step < 320; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, step), -1);
        /* H=64 against a 40 ms sync: auto's H (21, lag 6: 42 ms) is under 64 / 2: a smaller
         * H (more faithful) */
        cur.local_steps = 64;
        in.sync_s = 0.040;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK(o.pick.local_steps * GM_GRADSYNC_RESIZE_SHRINK <= 64);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 330), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 331), 3);
        /* ... but not against 70 ms (auto's H=37: under 64 / 1.5, not under 64 / 2) */
        in.sync_s = 0.070;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.pick.local_steps, 37u);
        for (long step = 334; step < 340; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, step), -1);
        /* against 150 ms, which H=64's lag (16 steps, 112 ms) covers over 1/1.5 of, 16 bits
         * stay although auto would take 8 now */
        in.sync_s = 0.150;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
        for (long step = 340; step < 346; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, step), -1);
        /* against 200 ms, covered under 1/1.5: H is at its cap already, so 8-bit deltas */
        in.sync_s = 0.200;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.cand[3].s.local_steps, (uint32_t)GM_GRADSYNC_AUTO_MAX_H);
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 348), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 349), 4);
        /* at the run's cap (256 steps: H 32 and half the round as lag, 16 steps: 112 ms),
         * 16 bits against 150 ms stay; judged by a quarter's lag (8 steps: 56 ms), as when the
         * run's steps are unknown, they would go to 8 bits */
        {
            struct gm_gradsync_switch capped = {.total_steps = 256};
            struct gm_gradsync_strategy c32 = cur;
            c32.cap_h = true;
            c32.local_steps = 32;
            in.sync_s = 0.150;
            GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
            GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8);
            GM_CHECK_EQ(gm_gradsync_run_lag(&c32, 256), 16u);
            GM_CHECK_EQ(gm_gradsync_run_lag(&c32, 0), 8u);
            for (long step = 350; step < 356; step++)
                GM_CHECK_EQ(gm_gradsync_switch_decide(&capped, &o, &c32, 0.007, 0, step), -1);
            capped.total_steps = 0;
            GM_CHECK_EQ(gm_gradsync_switch_decide(&capped, &o, &c32, 0.007, 0, 356), -1);
            GM_CHECK_EQ(gm_gradsync_switch_decide(&capped, &o, &c32, 0.007, 0, 357), 4);
        }
        /* blocking DiLoCo: a larger H when a sync per step is over 1.5x the budget */
        job.comm.overlap = false;
        GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_DILOCO, &job, &cur));
        cur.local_steps = 16;
        in.sync_s = 0.180; /* 11 ms a step against a budget of 1.4 */
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK(!o.pick.overlap && o.pick.local_steps > 16);
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO8); /* 16 bits: H=129 would fit */
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 360), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 361), 4);
        /* 40 ms: 16 bits fit at H=29 and the running 16 < 29: a larger H, 16 bits */
        in.sync_s = 0.040;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_DILOCO);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 370), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &cur, 0.007, 0, 371), 3);
    }

    /* the band between the dense codecs: fp32 under the budget stays; over it (by less than
     * GM_GRADSYNC_SWITCH_HYST too) it goes to fp16, where auto's first pick would; fp16 goes
     * back only once fp32 is under budget / GM_GRADSYNC_SWITCH_HYST */
    {
        double c;
        GM_CHECK_OK(pick_for(m, 0.5e-3, 100, compute, &band));
        c = band.cand[0].comm_s / (0.2 * 0.9); /* fp32 at 0.9x the budget of compute c */
        GM_CHECK_OK(pick_for(m, 0.5e-3, 100, c, &band));
        GM_CHECK_EQ(band.pick.id, GM_JOB_CODEC_FP32);
        for (long step = 200; step < 210; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp32, c, 0, step), -1);
        c = band.cand[0].comm_s / (0.2 * 1.2); /* 1.2x: inside the 1.5 margin, still a move */
        GM_CHECK_OK(pick_for(m, 0.5e-3, 100, c, &band));
        GM_CHECK_EQ(band.pick.id, GM_JOB_CODEC_FP16);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp32, c, 0, 210), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp32, c, 0, 211), 1);
        /* on fp16: fp32 at 0.9x (auto would pick it) is not under budget / 1.5: no way back */
        c = band.cand[0].comm_s / (0.2 * 0.9);
        GM_CHECK_OK(pick_for(m, 0.5e-3, 100, c, &band));
        GM_CHECK_EQ(band.pick.id, GM_JOB_CODEC_FP32);
        for (long step = 212; step < 222; step++)
            GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp16, c, 0, step), -1);
        c = band.cand[0].comm_s / (0.2 * 0.6); /* 0.6x: under 1/1.5, back on the second */
        GM_CHECK_OK(pick_for(m, 0.5e-3, 100, c, &band));
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp16, c, 0, 222), -1);
        GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &band, &fp16, c, 0, 223), 0);
    }

    /* a rank's fit over a ring of 3: the intercept is 4 hops' latency */
    gm_gradsync_ab_hop(&fit, 3, &hop);
    GM_CHECK_NEAR(hop.alpha_s, 0.003, 1e-12, 0);
    GM_CHECK_NEAR(hop.bytes_per_s, 1e6, 0, 0);
    /* no DiLoCo round to finish: a switch takes effect at the step announced */
    GM_CHECK_EQ(gm_gradsync_switch_step(NULL, 17), 17);
    GM_CHECK_EQ(gm_gradsync_diloco_h(&diloco, 1000), diloco.local_steps);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(1), 0u); /* nothing to overlap with */
    GM_CHECK_EQ(gm_gradsync_diloco_lag(2), 1u);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(3), 1u);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(4), 1u);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(5), 2u);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(52), 13u);
    GM_CHECK_EQ(gm_gradsync_diloco_lag(64), 16u);
    diloco.cap_h = true;
    diloco.local_steps = 64;
    GM_CHECK_EQ(gm_gradsync_diloco_h(&diloco, 100), (uint32_t)(100 / GM_GRADSYNC_AUTO_MIN_ROUNDS));
    gm_model_free(m);
}

/* A star VPN: found from RTTs when the spokes' RTT to each other is the sum of their legs to
 * the hub (within the tolerance), not in a full mesh, not with a pair unmeasured or fewer than 3
 * ranks; its groups run the hierarchical all-reduce, priced as a reduce to the hub and a
 * broadcast. */
static void test_star(void)
{
    double rtt[16];
    int g[4] = {2, 2, 2, 2};
    struct gm_model *m = lenet();
    struct gm_coll_link links[16];
    struct gm_gradsync_auto_out ring, star;
    struct gm_gradsync_auto_in in = {.m = m, .world = 4, .links = links, .compute_s = 0.05};

    for (int a = 0; a < 4; a++) /* hub 2, legs of 20, 25, -, 30 ms */
        for (int b = 0; b < 4; b++) {
            static const double leg[4] = {20, 25, 0, 30};
            rtt[a * 4 + b] = a == b ? 0 : a == 2 ? leg[b] : b == 2 ? leg[a] : leg[a] + leg[b] + 1;
        }
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 4, 0), 2);
    rtt[0 * 4 + 1] = 0.85 * (20 + 25); /* a bit under the legs' sum: within the tolerance */
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 4, 0), 2);
    rtt[0 * 4 + 1] = rtt[1 * 4 + 0] = 0; /* unknown both ways */
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 4, 0), -1);
    rtt[0 * 4 + 1] = 25; /* a direct link between two spokes: not a star */
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 4, 0), -1);
    for (int i = 0; i < 16; i++) /* a full mesh of equal RTTs */
        rtt[i] = i / 4 == i % 4 ? 0 : 30;
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 4, 0), -1);
    GM_CHECK_EQ(gm_gradsync_star_hub(rtt, 2, 0), -1);
    GM_CHECK_EQ(gm_gradsync_star_hub(NULL, 4, 0), -1);

    GM_CHECK(gm_gradsync_groups_hier(g, 4));
    GM_CHECK(!gm_gradsync_groups_hier(g, 2));
    GM_CHECK(!gm_gradsync_groups_hier(NULL, 4));
    /* a star of 10 Mbit/s legs: the ring's spoke-to-spoke hops cost two legs each */
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            links[a * 4 + b] = a == b             ? (struct gm_coll_link){0, 1e15}
                               : a == 2 || b == 2 ? (struct gm_coll_link){0.010, 1.25e6}
                                                  : (struct gm_coll_link){0.020, 0.625e6};
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &ring));
    in.groups = g;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &star));
    for (int i = 0; i < 4; i++) { /* all but 8-bit deltas: DIRECT around a star (diloco.h) */
        GM_CHECK_EQ(star.cand[i].s.algo, GM_COLL_HIER);
        GM_CHECK_EQ(ring.cand[i].s.algo, GM_COLL_RING);
    }
    GM_CHECK_EQ(star.cand[4].s.algo, GM_COLL_DIRECT);
    GM_CHECK_EQ(ring.cand[4].s.algo, GM_COLL_DIRECT);
    /* PowerSGD's small all-reduces pay latency: 2 rounds of one leg at the hub against the
     * ring's 6 hops, two of which cross the hub (the model does not price the hub's shared
     * uplink, which would favour the star further for large payloads) */
    GM_CHECK(star.cand[2].comm_s < ring.cand[2].comm_s);
    gm_model_free(m);
}

/* Islands: components over LAN pairs labelled by their lowest rank; a split only when there is
 * more than one island and not one per rank; auto prices 2 LAN ranks + 1 behind a tunnel on
 * the hierarchical all-reduce, which sends the codec only between the two leaders. */
static void test_islands(void)
{
    bool lan[16] = {0};
    int g[4];
    struct gm_model *m = lenet();
    struct gm_coll_link links[9];
    struct gm_gradsync_auto_out flat, isl;
    struct gm_gradsync_auto_in in = {.m = m, .world = 3, .links = links, .compute_s = 0.010};

    lan[0 * 4 + 2] = true; /* 0-2 on a LAN (one direction is enough), 1 and 3 alone */
    gm_gradsync_islands(lan, 4, g);
    GM_CHECK(g[0] == 0 && g[1] == 1 && g[2] == 0 && g[3] == 3);
    GM_CHECK(gm_gradsync_islands_split(g, 4));
    lan[1 * 4 + 3] = lan[3 * 4 + 1] = true;
    gm_gradsync_islands(lan, 4, g);
    GM_CHECK(g[0] == 0 && g[1] == 1 && g[2] == 0 && g[3] == 1);
    lan[2 * 4 + 3] = true; /* 2-3 joins them: one island */
    gm_gradsync_islands(lan, 4, g);
    GM_CHECK(g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0);
    GM_CHECK(!gm_gradsync_islands_split(g, 4));
    GM_CHECK(!gm_gradsync_islands_split(NULL, 4));
    memset(lan, 0, sizeof(lan));
    gm_gradsync_islands(lan, 3, g); /* nobody on a LAN: one island each, no split */
    GM_CHECK(!gm_gradsync_islands_split(g, 3));

    /* ranks 0, 1 on a 1 Gbit/s LAN; rank 2 behind a 20 Mbit/s, 50 ms tunnel */
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            links[a * 3 + b] = (a < 2 && b < 2) ? (struct gm_coll_link){50e-6, 125e6}
                                                : (struct gm_coll_link){0.025, 2.5e6};
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &flat));
    g[0] = 0, g[1] = 0, g[2] = 2;
    in.groups = g;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &isl));
    GM_CHECK_EQ(isl.cand[3].s.algo, GM_COLL_HIER);
    GM_CHECK_EQ(flat.cand[3].s.algo, GM_COLL_RING);
    /* 8-bit deltas: HIER too, one encoding of the island's sum over the tunnel each way
     * (diloco.h), against DIRECT's two (each LAN rank's to rank 2, rank 2's to each) */
    GM_CHECK_EQ(isl.cand[4].s.algo, GM_COLL_HIER);
    GM_CHECK_EQ(flat.cand[4].s.algo, GM_COLL_DIRECT);
    GM_CHECK(isl.cand[4].sync_s > 0 && isl.cand[4].sync_s < flat.cand[4].sync_s);
    /* resnet18's 11.2 M: 0.58x DIRECT (the tunnel's half, plus the LAN's fp32 legs; LeNet-5's
     * 62 KB above pay mostly the 25 ms latency) */
    GM_CHECK(gm_coll_cost(GM_COLL_HIER, 3, links, g, 11200000, GM_CODEC_Q8) <
             0.6 * gm_coll_cost(GM_COLL_DIRECT, 3, links, g, 11200000, GM_CODEC_Q8));
    for (int i = 0; i < GM_GRADSYNC_AUTO_NCAND; i++) /* never worse than the ring here */
        GM_CHECK(isl.cand[i].comm_s * isl.cand[i].s.local_steps <=
                 flat.cand[i].comm_s * flat.cand[i].s.local_steps * 1.0001);
    GM_CHECK_EQ(isl.pick.kind, GM_GRADSYNC_KIND_DILOCO);
    GM_CHECK(isl.cand[3].s.local_steps <= flat.cand[3].s.local_steps);
    gm_model_free(m);
}

/* The compute timer returns a positive time and refuses a batch the model cannot hold. */
static void test_time_compute(void)
{
    struct gm_model *m = lenet();
    double t = gm_gradsync_time_compute(m, 28 * 28, 16, 3, 0.05);

    GM_CHECK(t > 0 && t < 10);
    GM_CHECK(gm_gradsync_time_compute(m, 28 * 28, 65, 3, 0) < 0);
    GM_CHECK(gm_gradsync_time_compute(m, 0, 16, 3, 0) < 0);
    GM_CHECK(gm_gradsync_time_compute(m, 28 * 28, 16, 3, -1) < 0);
    gm_model_free(m);
}

/* The collective's CPU work on a capped host (issue 21): gm_gradsync_cpu_taken turns one
 * rank's scheduler readings into the compute the loop took from the trainer, and auto prices
 * that measured cost on every candidate by its bytes.  The links say fp32 is free; the ranks
 * say it costs 7 ms of a 20 ms step: fp16 (half the bytes) is picked and, past the
 * hysteresis, switched to; with nothing taken (a spare core ran the loop) fp32 stays, and
 * between the budget and 1.5 x it the running fp32 stays too. */
static void test_measured_cost(void)
{
    struct gm_model *m = lenet();
    struct gm_coll_link links[4];
    struct gm_gradsync_strategy fp32;
    struct gm_gradsync_auto_out o;
    struct gm_gradsync_switch sw = {0};
    struct gm_gradsync_auto_in in = {
        .m = m, .world = 2, .links = links, .compute_s = 0.020, .meas_of = &fp32};

    /* 0.5 core: the trainer ran 190 ms of CPU in a 500 ms step, the loop 60 ms outside the
     * waits: (190 + 60) / 500 = 0.5 cores, so the loop's 60 ms cost the trainer 120 ms */
    GM_CHECK_NEAR(gm_gradsync_cpu_taken(0.060, 0.190, 0.310), 0.120, 1e-12, 1e-9);
    /* uncapped, a spare core: never held off a core, nothing taken */
    GM_CHECK_EQ(gm_gradsync_cpu_taken(0.060, 0.190, 0), 0.0);
    /* at most the trainer's run delay */
    GM_CHECK_NEAR(gm_gradsync_cpu_taken(0.060, 0.190, 0.010), 0.010, 1e-12, 1e-9);
    GM_CHECK_EQ(gm_gradsync_cpu_taken(0, 0.190, 0.310), 0.0);
    GM_CHECK_EQ(gm_gradsync_cpu_taken(0.06, 0.190, NAN), 0.0);
    GM_CHECK_EQ(gm_gradsync_cpu_taken(-1, 0.190, 0.3), 0.0);

    GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_FP32, NULL, &fp32));
    for (int i = 0; i < 4; i++) /* the probe: 10 Gbit/s, no latency: fp32 free on the links */
        links[i] = (struct gm_coll_link){0, 10e9 / 8};
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP32);
    GM_CHECK(o.cand[0].comm_s < 0.001);

    in.meas_s = 0.007; /* measured: 7 ms a step for fp32, over 1.5 x the 4 ms budget */
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_NEAR(o.cand[0].meas_s, 0.007, 1e-12, 1e-9);
    GM_CHECK_NEAR(o.cand[1].meas_s, 0.0035, 1e-12, 1e-6); /* half the bytes */
    GM_CHECK(!o.cand[0].fits && o.cand[1].fits);
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP16);
    GM_CHECK(strstr(o.reason, "measured on the ranks") != NULL);
    gm_gradsync_switch_quiet(&sw, 0);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 20), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 21), 1);

    /* 5 ms: over the budget, not over 1.5 x it: fp32 -> fp16 needs no margin
     * (GM_GRADSYNC_SWITCH_HYST_DENSE), so the running fp32 goes as auto's pick at submit would;
     * 3.5 ms, under the budget: it stays */
    in.meas_s = 0.005;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP16);
    gm_gradsync_switch_quiet(&sw, 0);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 20), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 21), 1);
    in.meas_s = 0.0035;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP32);
    gm_gradsync_switch_quiet(&sw, 0);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 20), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 21), -1);

    /* 20 ms measured: even fp16 (10 ms) is over the budget, so PowerSGD would be picked;
     * dense_only (one LAN island): fp16, the cheapest dense codec, and never another */
    in.meas_s = 0.020;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK(o.pick.kind != GM_GRADSYNC_KIND_DENSE);
    in.dense_only = true;
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP16);
    for (int i = 2; i < GM_GRADSYNC_AUTO_NCAND; i++)
        GM_CHECK(!o.cand[i].fits);
    in.dense_only = false;

    /* measured on PowerSGD (7 ms: its compression, the loop's baseline): its own cost, not
     * scaled to fp32's bytes (which would price fp32 at seconds) */
    {
        struct gm_gradsync_strategy ps;
        GM_CHECK_OK(gm_gradsync_strategy_of(GM_JOB_CODEC_POWERSGD, NULL, &ps));
        in.meas_of = &ps;
        in.meas_s = 0.007;
        GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
        GM_CHECK_NEAR(o.cand[2].meas_s, 0.007, 1e-12, 1e-9);
        GM_CHECK_EQ(o.cand[0].meas_s, 0.0);
        GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP32);
        in.meas_of = &fp32;
    }

    /* uncapped: nothing taken, a small wait: fp32 */
    in.meas_s = gm_gradsync_cpu_taken(0.060, 0.190, 0);
    GM_CHECK_OK(gm_gradsync_auto_choose(&in, &o));
    GM_CHECK_EQ(o.pick.id, GM_JOB_CODEC_FP32);
    gm_gradsync_switch_quiet(&sw, 0);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 20), -1);
    GM_CHECK_EQ(gm_gradsync_switch_decide(&sw, &o, &fp32, in.compute_s, 0, 21), -1);
    gm_model_free(m);
}

int main(void)
{
    GM_TEST_RUN(test_ab_fit);
    GM_TEST_RUN(test_measured_cost);
    GM_TEST_RUN(test_auto);
    GM_TEST_RUN(test_switch);
    GM_TEST_RUN(test_short_run);
    GM_TEST_RUN(test_star);
    GM_TEST_RUN(test_time_compute);
    GM_TEST_RUN(test_islands);
    GM_TEST_RUN(test_from_job);
    GM_TEST_RUN(test_estimate);
    GM_TEST_RUN(test_rank_logic);
    GM_TEST_RUN(test_overlap_timing);
    return gm_test_finish("test_gradsync");
}
