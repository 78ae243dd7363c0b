/*
 * tests/unit/test_autocodec.c - agent/jobs/autocodec.c: codec = auto on the coordinator, with a
 * real timed step of LeNet-5 (its time varies with the build and the load, so every link below is
 * far from a threshold) and synthetic link matrices: a slow tunnel gets DiLoCo with H in range, a
 * fast LAN fp32, nothing measured fp32 with the reason said, a pair nobody measured priced as
 * the slowest measured link, a job that is not auto left alone, names parsed.
 */
#include <errno.h>
#include <string.h>

#include "agent/jobs/autocodec.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void job_init(struct gm_job *job, int world)
{
    gm_job_defaults(job);
    job->model = GM_JOB_MODEL_LENET5;
    job->data.kind = GM_JOB_DATA_KIND_IDX;
    job->optim.global_batch = 64 * world;
    job->comm.codec = GM_JOB_CODEC_AUTO;
}

static void uniform(struct gm_coll_link *l, int world, double alpha, double mbps)
{
    for (int i = 0; i < world * world; i++)
        l[i] = (struct gm_coll_link){alpha, mbps * 1e6 / 8};
}

static void test_resolve(void)
{
    struct gm_job job;
    struct gm_coll_link l[9];
    struct gm_gradsync_auto_out o, o2;
    char why[200];

    /* a 1 Mbit/s, 500 ms tunnel: DiLoCo (per-step exchange costs >= 1 s, more than 20% of a
     * LeNet-5 step even under sanitizers), H sized and written into the job */
    job_init(&job, 2);
    uniform(l, 2, 0.25, 1);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 2, l, NULL, &o, why, sizeof(why)));
    /* 16-bit deltas when some H up to the cap fits (a slow step: sanitizers), else 8-bit */
    GM_CHECK_EQ(job.comm.codec, o.cand[3].fits ? GM_JOB_CODEC_DILOCO : GM_JOB_CODEC_DILOCO8);
    GM_CHECK(o.cand[3].fits || o.cand[3].s.local_steps == GM_GRADSYNC_AUTO_MAX_H);
    GM_CHECK(job.comm.local_steps >= GM_GRADSYNC_AUTO_MIN_H &&
             job.comm.local_steps <= GM_GRADSYNC_AUTO_MAX_H);
    GM_CHECK_EQ((uint32_t)job.comm.local_steps, o.pick.local_steps);
    GM_CHECK(strncmp(why, o.cand[3].fits ? "diloco H=" : "diloco8 H=", o.cand[3].fits ? 9 : 10) ==
             0);

    /* a 10 Gbit/s, 10 us LAN: fp32 */
    job_init(&job, 2);
    uniform(l, 2, 10e-6, 10000);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 2, l, NULL, &o, why, sizeof(why)));
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_FP32);
    GM_CHECK(strncmp(why, "fp32: ", 6) == 0);

    /* nothing measured, or one rank: fp32, and the reason says so */
    job_init(&job, 2);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 2, NULL, NULL, &o, why, sizeof(why)));
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_FP32);
    GM_CHECK(strstr(why, "measured") != NULL);
    job_init(&job, 1);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 1, NULL, NULL, &o, why, sizeof(why)));
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_FP32);

    /* 3 ranks, the pair 1-2 unmeasured: priced as the slowest measured link, so the same
     * strategy family as when every pair is that slow */
    job_init(&job, 3);
    uniform(l, 3, 0.25, 1);
    l[1 * 3 + 2] = l[2 * 3 + 1] = (struct gm_coll_link){0, 0};
    GM_CHECK_OK(gm_autocodec_resolve(&job, 3, l, NULL, &o, why, sizeof(why)));
    job_init(&job, 3);
    uniform(l, 3, 0.25, 1);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 3, l, NULL, &o2, why, sizeof(why)));
    /* the family: each call times the step afresh, and whether 16-bit DiLoCo's sync hides
     * behind the cap's lag may differ between two timings of a loaded (or sanitized) step */
    GM_CHECK_EQ(o.pick.kind, o2.pick.kind);
    GM_CHECK_NEAR(o.cand[0].comm_s, o2.cand[0].comm_s, 1e-12, 1e-9);

    /* not auto: untouched */
    job_init(&job, 2);
    job.comm.codec = GM_JOB_CODEC_POWERSGD;
    job.comm.local_steps = 5;
    uniform(l, 2, 0.025, 20);
    GM_CHECK_OK(gm_autocodec_resolve(&job, 2, l, NULL, &o, why, sizeof(why)));
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_POWERSGD);
    GM_CHECK_EQ(job.comm.local_steps, 5);
    GM_CHECK_STREQ(why, "");
}

/* One table (GM_JOB_CODECS): each name parses to its enum and back, auto's candidates and
 * the strategies are every codec but auto, in the table's order. */
/* The re-sizing tests' job: 2 ranks, overlapped 16-bit DiLoCo at H=33. */
static void overlapped_diloco_job(struct gm_job *job)
{
    job_init(job, 2);
    job->comm.codec = GM_JOB_CODEC_DILOCO;
    job->comm.overlap = true;
    job->comm.local_steps = 33;
}

/* Re-sizing overlapped DiLoCo's H mid-run (gm_autoswitch_decide): rank 0's measured sync, not
 * the fitted link, sizes it; the new H is announced as a switch past the hysteresis (two
 * decisions on new samples); where the cap (at least GM_GRADSYNC_AUTO_MIN_ROUNDS rounds in the
 * run) makes both H equal there is nothing to announce. */
static void test_resize(void)
{
    struct gm_job job;
    struct gm_autoswitch *a;
    struct gm_gradsync_strategy cur;
    struct gm_autoswitch_decision d;
    const struct gm_coll_link fit = {0.050, 20e6 / 8}; /* 20 Mbit/s, 25 ms a hop (of 2) */
    const struct gm_coll_link links[4] = {{0, 0}};     /* no lan pair: the fit everywhere */

    overlapped_diloco_job(&job);
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &cur));
    GM_CHECK(cur.overlap && cur.local_steps == 33);
    for (int k = 0; k < 2; k++) {
        const long total = k == 0 ? 2340 : 100; /* 100: H at most 12 (8 rounds) */
        GM_CHECK_OK(gm_autoswitch_new(&job, 0.007, &a));
        gm_autoswitch_group(a, 2, 0);
        gm_autoswitch_fit(a, 0, &fit, 1);
        gm_autoswitch_fit(a, 1, &fit, 1);
        /* 180 ms syncs at 7 ms steps: H=33's lag (9 steps, 63 ms) covers under 1/1.5 */
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 20, 0.007, 0.180, total, &d), 0);
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 21, 0.007, 0.180, total, &d), 0);
        gm_autoswitch_fit(a, 0, &fit, 2); /* new samples: the second decision */
        /* 16 bits would not be hidden even at the cap (lag 16, 112 ms): 8-bit deltas, whose
         * sync (the measured one x the links' 8/16-bit ratio, about 90 ms) H=49 hides (lag
         * 13, 91 ms); in the 100-step run at H 12 all the same, waiting half as long */
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 22, 0.007, 0.180, total, &d), 1);
        GM_CHECK_EQ(d.to.kind, GM_GRADSYNC_KIND_DILOCO);
        GM_CHECK_EQ(d.to.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(d.to.codec, GM_CODEC_Q8);
        GM_CHECK_EQ(d.to.local_steps, k == 0 ? 49u : 12u);
        GM_CHECK(d.to.overlap);
        GM_CHECK(d.step > 22 && d.seq == 1);
        GM_CHECK(strstr(d.why, "(measured at the other width, scaled; rank 0's 180.0 ms)") != NULL);
        gm_autoswitch_free(a);
    }
}

/* A width left for its measured sync is judged on that measure (gm_autoswitch_decide's
 * width_sync): 16-bit deltas measured at 180 ms go to 8 bits (test_resize); the 8-bit sync
 * then measures 30 ms, which scaled by the links would price 16 bits at about 60 ms, hidden
 * at H's cap with 1.5x to spare: without the memory they would be announced again (k = 1,
 * a new group, which forgets), with it the 180 ms they took stands and 8 bits stay (re-sized
 * to the smaller H that their own 30 ms allow). */
static void test_width_memory(void)
{
    struct gm_job job;
    struct gm_autoswitch *a;
    struct gm_gradsync_strategy cur;
    struct gm_autoswitch_decision d;
    const struct gm_coll_link fit = {0.050, 20e6 / 8};
    const struct gm_coll_link links[4] = {{0, 0}};
    uint64_t ops = 1;
    long step = 20;

    overlapped_diloco_job(&job);
    for (int k = 0; k < 2; k++) {
        int got = 0;
        GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &cur));
        GM_CHECK_OK(gm_autoswitch_new(&job, 0.007, &a));
        gm_autoswitch_group(a, 2, 0);
        for (int i = 0; i < 3 && got == 0; i++, step++) {
            gm_autoswitch_fit(a, 0, &fit, ops++);
            gm_autoswitch_fit(a, 1, &fit, 1);
            got = gm_autoswitch_decide(a, &cur, links, NULL, step, 0.007, 0.180, 2340, &d);
        }
        GM_CHECK_EQ(got, 1);
        GM_CHECK_EQ(d.to.id, GM_JOB_CODEC_DILOCO8);
        GM_CHECK_EQ(gm_autoswitch_answer(a, 1, d.seq, true), 1);
        cur = d.to; /* every rank switched */
        step = d.step + 1000; /* past the dwell after the switch */
        if (k == 1)
            gm_autoswitch_group(a, 2, step); /* a new group: nothing measured in it */
        got = 0;
        for (int i = 0; i < 40 && got == 0; i++, step++) {
            gm_autoswitch_fit(a, 0, &fit, ops++);
            gm_autoswitch_fit(a, 1, &fit, 1);
            got = gm_autoswitch_decide(a, &cur, links, NULL, step, 0.007, 0.030, 2340, &d);
        }
        GM_CHECK_EQ(got, 1);
        if (k == 0) { /* 8 bits stay, at the smaller H their 30 ms allow */
            GM_CHECK_EQ(d.to.id, GM_JOB_CODEC_DILOCO8);
            GM_CHECK(d.to.local_steps < cur.local_steps);
        } else {
            GM_CHECK_EQ(got, 1); /* the scaled 16-bit sync alone: back to 16 bits */
            GM_CHECK_EQ(d.to.id, GM_JOB_CODEC_DILOCO);
            GM_CHECK(strstr(d.why, "measured at the other width, scaled") != NULL);
        }
        gm_autoswitch_free(a);
    }
}

/* The longest of the ranks' syncs sizes H (gm_autoswitch_sync): rank 0 reached the boundary
 * last and timed 50 ms, the member, which waited for it, timed the exchange's 180 ms: as
 * test_resize's 180 ms, 8-bit deltas at H=49.  With rank 0's 180 ms and the member's 50 ms, the
 * same; a rank outside the group is ignored; with no member sync, rank 0's 50 ms moves
 * nothing. */
static void test_resize_longest(void)
{
    struct gm_job job;
    struct gm_autoswitch *a;
    struct gm_gradsync_strategy cur;
    struct gm_autoswitch_decision d;
    const struct gm_coll_link fit = {0.050, 20e6 / 8};
    const struct gm_coll_link links[4] = {{0, 0}};

    overlapped_diloco_job(&job);
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &cur));
    for (int k = 0; k < 3; k++) {
        const double own = k == 1 ? 0.180 : 0.050, member = k == 0 ? 0.180 : k == 1 ? 0.050 : 0;
        GM_CHECK_OK(gm_autoswitch_new(&job, 0.007, &a));
        gm_autoswitch_group(a, 2, 0);
        gm_autoswitch_fit(a, 0, &fit, 1);
        gm_autoswitch_fit(a, 1, &fit, 1);
        gm_autoswitch_sync(a, 1, member);
        gm_autoswitch_sync(a, 2, 9.0); /* no rank 2 in a group of 2: ignored */
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 20, 0.007, own, 2340, &d), 0);
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 21, 0.007, own, 2340, &d), 0);
        gm_autoswitch_fit(a, 0, &fit, 2);
        int got = gm_autoswitch_decide(a, &cur, links, NULL, 22, 0.007, own, 2340, &d);
        if (k == 2) {
            GM_CHECK_EQ(got, 0); /* H=33's lag covers 50 ms */
        } else {
            GM_CHECK_EQ(got, 1);
            GM_CHECK_EQ(d.to.id, GM_JOB_CODEC_DILOCO8);
            GM_CHECK_EQ(d.to.local_steps, 49u);
        }
        gm_autoswitch_free(a);
    }
}

static void test_codec_table(void)
{
    struct gm_gradsync_strategy all[GM_JOB_CODEC_COUNT];
    enum gm_job_codec c = GM_JOB_CODEC_AUTO;
    size_t n;

    for (int i = 0; i < GM_JOB_CODEC_COUNT; i++) {
        GM_CHECK_OK(gm_job_codec_parse(gm_job_codec_name((enum gm_job_codec)i), &c));
        GM_CHECK_EQ((int)c, i);
    }
    GM_CHECK_OK(gm_job_codec_parse("diloco", &c));
    GM_CHECK_EQ(c, GM_JOB_CODEC_DILOCO);
    GM_CHECK_ERR(gm_job_codec_parse("", &c), -EINVAL);
    GM_CHECK_ERR(gm_job_codec_parse("FP16", &c), -EINVAL);
    GM_CHECK_ERR(gm_job_codec_parse(NULL, &c), -EINVAL);
    GM_CHECK_EQ(c, GM_JOB_CODEC_DILOCO); /* untouched by a failed parse */
    GM_CHECK_STREQ(gm_job_codec_name(GM_JOB_CODEC_COUNT), "?");
    n = gm_gradsync_strategies(all, GM_JOB_CODEC_COUNT);
    GM_CHECK_EQ(n, (size_t)GM_JOB_CODEC_COUNT - 1);
    GM_CHECK_EQ(n, (size_t)GM_GRADSYNC_AUTO_NCAND);
    for (size_t i = 0; i < n; i++) {
        struct gm_gradsync_strategy s;
        GM_CHECK_EQ((int)all[i].id, (int)(GM_JOB_CODEC_AUTO + 1 + i));
        GM_CHECK_OK(gm_gradsync_strategy_of(all[i].id, NULL, &s));
        GM_CHECK_EQ(s.kind, all[i].kind);
        GM_CHECK_EQ(s.codec, all[i].codec);
    }
    GM_CHECK_EQ(all[1].codec, GM_CODEC_FP16); /* fp16 sends fp16 */
    GM_CHECK_EQ(all[2].kind, GM_GRADSYNC_KIND_POWERSGD);
    GM_CHECK_ERR(gm_gradsync_strategy_of(GM_JOB_CODEC_AUTO, NULL, &all[0]), -EINVAL);
}

/* The measured cost mid-run (issue 21): a capped pair on one LAN island starts at fp32 (no
 * timing at submit); rank 0 measures 500 ms a step of compute of which its collective took
 * 100 ms, rank 1 lost 130 ms, the least wait is 10 ms: fp32 costs 140 ms a step against a
 * budget of 80 (20% of the trainer's own 400): a switch to fp16 (70 ms) past the hysteresis.
 * The same with the probe's LAN links given (free) and not one island: the CPU taken alone
 * moves it.  Uncapped (nothing taken, 10 ms of wait): fp32 stays.  In one island a cost that
 * fp16 would not fit either (400 ms taken of 900: fp16 200 ms against a budget of 100) still
 * moves only to fp16, never to PowerSGD or DiLoCo, whose costs the dense one's does not
 * predict; not one island, to PowerSGD. */
static void test_measured_switch(void)
{
    struct gm_job job;
    struct gm_autoswitch *a;
    struct gm_gradsync_strategy cur;
    struct gm_autoswitch_decision d;
    const struct gm_coll_link fit = {0.0002, 1e9 / 8};
    struct gm_coll_link links[4];
    static const struct {
        double cpu0, cpu1, compute;
        bool one_island;
        int switches;
        enum gm_job_codec to;
    } cases[] = {
        {0.100, 0.130, 0.500, true, 1, GM_JOB_CODEC_FP16},
        {0.100, 0.130, 0.500, false, 1, GM_JOB_CODEC_FP16},
        {0, 0, 0.500, true, 0, GM_JOB_CODEC_FP32},
        {0.400, 0.400, 0.900, true, 1, GM_JOB_CODEC_FP16},
        {0.400, 0.400, 0.900, false, 1, GM_JOB_CODEC_POWERSGD},
    };

    job_init(&job, 2);
    job.comm.codec = GM_JOB_CODEC_FP32;
    GM_CHECK_OK(gm_gradsync_strategy_from_job(&job, &cur));
    uniform(links, 2, 0, 10000); /* the probe: 10 Gbit/s, fp32 free on the links */
    GM_CHECK_ERR(gm_autoswitch_new(&job, -1, &a), -EINVAL);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const double c = cases[k].compute;
        GM_CHECK_OK(gm_autoswitch_new(&job, 0, &a)); /* one island: nothing timed */
        gm_autoswitch_group(a, 2, 0);
        gm_autoswitch_one_island(a, cases[k].one_island);
        /* no measured step yet: no decision */
        gm_autoswitch_fit(a, 0, &fit, 1);
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 20, 0, 0, 1000, &d), 0);
        gm_autoswitch_cost(a, 0, 0.010, cases[k].cpu0);
        gm_autoswitch_cost(a, 1, 0.060, cases[k].cpu1);
        gm_autoswitch_cost(a, 1, NAN, 0.5); /* refused: kept as it was */
        gm_autoswitch_fit(a, 1, &fit, 1);
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 21, c, 0, 1000, &d), 0);
        gm_autoswitch_fit(a, 0, &fit, 2);
        GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, 22, c, 0, 1000, &d),
                    cases[k].switches);
        if (cases[k].switches) {
            GM_CHECK_EQ(d.to.id, cases[k].to);
            GM_CHECK(d.step > 22 && d.seq == 1);
            GM_CHECK(strstr(d.why, cases[k].one_island ? "one LAN island"
                                                       : "taken by the collective") != NULL);
        }
        for (int s = 23; !cases[k].switches && s < 30; s++) { /* uncapped: never */
            gm_autoswitch_fit(a, 0, &fit, (uint64_t)s);
            GM_CHECK_EQ(gm_autoswitch_decide(a, &cur, links, NULL, s, c, 0, 1000, &d), 0);
        }
        gm_autoswitch_free(a);
    }
}

int main(void)
{
    GM_TEST_RUN(test_resolve);
    GM_TEST_RUN(test_resize);
    GM_TEST_RUN(test_resize_longest);
    GM_TEST_RUN(test_width_memory);
    GM_TEST_RUN(test_measured_switch);
    GM_TEST_RUN(test_codec_table);
    return gm_test_finish("test_autocodec");
}
