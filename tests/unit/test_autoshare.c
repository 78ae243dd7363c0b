/*
 * tests/unit/test_autoshare.c - [job] shares = auto (agent/jobs/autoshare.c): the balanced
 * split against speeds (proportional, whole batch, at least one sample each), the predicted
 * step, the hysteresis (a gain below GM_AUTOSHARE_HYST never switches; a real one switches only
 * after GM_AUTOSHARE_CONFIRM decisions in a row and not within GM_AUTOSHARE_DWELL steps of a
 * group); the speeds from the ranks' steps (waiting is not work); and the wire
 * (agent/jobs/jobmsg.c): JOB_GROUP "shares" and JOB_REPORT "speed" round-trip, and every
 * malformed one is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/jobs/autoshare.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/proto.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void test_balance(void)
{
    const double fast_slow[2] = {14500, 2900}; /* a whole core and a fifth of one */
    const double three[3] = {1000, 1000, 2000};
    const double crawl[2] = {100000, 1};
    int c[3], sum;

    GM_CHECK_EQ(gm_autoshare_balance(fast_slow, 2, 120, c), 0);
    GM_CHECK_EQ(c[0], 100);
    GM_CHECK_EQ(c[1], 20);
    /* balanced: both ranks' compute equally long, and shorter than with equal shares */
    GM_CHECK_NEAR(gm_autoshare_step_s(fast_slow, 2, c), 100.0 / 14500, 1e-12, 0);
    int eq[2] = {60, 60};
    GM_CHECK(gm_autoshare_step_s(fast_slow, 2, eq) > 2.5 * gm_autoshare_step_s(fast_slow, 2, c));

    GM_CHECK_EQ(gm_autoshare_balance(three, 3, 96, c), 0);
    GM_CHECK_EQ(c[0], 24);
    GM_CHECK_EQ(c[1], 24);
    GM_CHECK_EQ(c[2], 48);

    /* a rank too slow for one sample still takes one, and says so */
    GM_CHECK_EQ(gm_autoshare_balance(crawl, 2, 64, c), 1);
    GM_CHECK_EQ(c[0], 63);
    GM_CHECK_EQ(c[1], 1);

    /* any speeds: the whole batch, each at least one */
    uint64_t s = 11;
    for (int t = 0; t < 1000; t++) {
        double sp[3];
        int g = 3 + t % 200;
        for (int r = 0; r < 3; r++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            sp[r] = 1 + (double)((s >> 33) % 100000);
        }
        gm_autoshare_balance(sp, 3, g, c);
        sum = 0;
        for (int r = 0; r < 3; r++) {
            GM_CHECK(c[r] >= 1);
            sum += c[r];
        }
        GM_CHECK_EQ(sum, g);
    }
}

static void test_decide(void)
{
    struct gm_autoshare a = {0};
    const double sp[2] = {14500, 2900}, near[2] = {1000, 900};
    int cur[2] = {60, 60}, out[2];
    char why[320];
    long step = 0;
    int k;

    gm_autoshare_group(&a, 0);
    /* within the dwell: nothing, however large the gain */
    for (step = 0; step < GM_AUTOSHARE_DWELL; step++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, step, out, why, sizeof(why)), 0);
    /* a rank not measured yet: nothing */
    const double half[2] = {14500, 0};
    GM_CHECK_EQ(gm_autoshare_decide(&a, half, 2, 120, cur, step, out, why, sizeof(why)), 0);
    /* then only after CONFIRM decisions in a row */
    for (k = 1; k < GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, step + k, out, why, sizeof(why)), 0);
    GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, step + k, out, why, sizeof(why)), 1);
    GM_CHECK_EQ(out[0], 100);
    GM_CHECK_EQ(out[1], 20);
    GM_CHECK(strstr(why, "balanced") != NULL);

    /* a gain below the hysteresis never switches (1000:900 balanced is 63:57 of 120: the
     * equal split's step is 5% longer, below GM_AUTOSHARE_HYST) */
    gm_autoshare_group(&a, 0);
    for (k = 0; k < 10 * GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, near, 2, 120, cur, 1000 + k, out, why, sizeof(why)), 0);
    /* an interrupted streak starts again */
    gm_autoshare_group(&a, 0);
    for (k = 1; k < GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, 1000 + k, out, why, sizeof(why)), 0);
    GM_CHECK_EQ(gm_autoshare_decide(&a, near, 2, 120, cur, 2000, out, why, sizeof(why)), 0);
    for (k = 1; k < GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, 2000 + k, out, why, sizeof(why)), 0);
    GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, cur, 2000 + k, out, why, sizeof(why)), 1);
    /* the running shares already balanced: stay */
    int bal[2] = {100, 20};
    gm_autoshare_group(&a, 0);
    for (k = 0; k < 10 * GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 120, bal, 1000 + k, out, why, sizeof(why)), 0);
    /* a global batch smaller than the world: never */
    GM_CHECK_EQ(gm_autoshare_decide(&a, sp, 2, 1, cur, 5000, out, why, sizeof(why)), 0);
}

static void test_wire(void)
{
    char ranks[3][GM_ID_NAME_MAX + 1] = {"a", "b", "c"};
    int sh[3] = {70, 20, 6};
    struct gm_jobmsg m = {.id = "0123456789abcdef",
                          .text = "[job]\n",
                          .text_len = 6,
                          .origin = "job.ini",
                          .gen = 3,
                          .ranks = ranks,
                          .nranks = 3,
                          .global_batch = 96,
                          .shares = sh},
                     d;
    char *txt = NULL, bad[512];
    size_t len = 0;
    static const char *const refused[] = {
        "\"shares\":[70,26]",      /* not one per rank */
        "\"shares\":[70,20,5]",    /* not the global batch */
        "\"shares\":[96,0,0]",     /* a rank with no sample */
        "\"shares\":[97,-1,0]",    /* negative */
        "\"shares\":[70,20,6.0]",  /* not an integer */
        "\"shares\":\"70:20:6\"",  /* not a list */
        "\"shares\":[70,20,\"6\"]" /* not a number */
    };

    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_GROUP, &m, &txt, &len));
    GM_CHECK_OK(gm_jobmsg_decode(GM_MSG_JOB_GROUP, (const uint8_t *)txt, len, &d));
    GM_CHECK(d.shares != NULL && d.shares[0] == 70 && d.shares[1] == 20 && d.shares[2] == 6);
    gm_jobmsg_free(&d);
    free(txt);
    m.shares = NULL; /* optional */
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_GROUP, &m, &txt, &len));
    GM_CHECK_OK(gm_jobmsg_decode(GM_MSG_JOB_GROUP, (const uint8_t *)txt, len, &d));
    GM_CHECK(d.shares == NULL);
    gm_jobmsg_free(&d);
    free(txt);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int n = snprintf(bad, sizeof(bad),
                         "{\"id\":\"0123456789abcdef\",\"text\":\"[job]\",\"origin\":\"j\","
                         "\"gen\":1,\"ranks\":[\"a\",\"b\",\"c\"],\"global_batch\":96,%s}",
                         refused[i]);
        GM_CHECK_ERR(gm_jobmsg_decode(GM_MSG_JOB_GROUP, (const uint8_t *)bad, (size_t)n, &d),
                     GM_ERR_PROTO);
    }

    /* a fit report with the rank's steps; without them, and malformed ones */
    struct gm_jobmsg r = {.id = "0123456789abcdef",
                          .gen = 2,
                          .event = "fit",
                          .have_fit = true,
                          .fit_alpha_s = 1e-4,
                          .fit_bytes_per_s = 1e8,
                          .fit_ops = 7,
                          .have_speed = true,
                          .speed_samples = 20,
                          .speed_step_s = 0.0125,
                          .speed_coll_s = 0.002};
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_REPORT, &r, &txt, &len));
    GM_CHECK_OK(gm_jobmsg_decode(GM_MSG_JOB_REPORT, (const uint8_t *)txt, len, &d));
    GM_CHECK(d.have_fit && d.have_speed);
    GM_CHECK_EQ(d.speed_samples, 20);
    GM_CHECK_NEAR(d.speed_step_s, 0.0125, 1e-12, 0);
    GM_CHECK_NEAR(d.speed_coll_s, 0.002, 1e-12, 0);
    gm_jobmsg_free(&d);
    free(txt);
    r.have_speed = false;
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_REPORT, &r, &txt, &len));
    GM_CHECK(strstr(txt, "speed") == NULL);
    GM_CHECK_OK(gm_jobmsg_decode(GM_MSG_JOB_REPORT, (const uint8_t *)txt, len, &d));
    GM_CHECK(!d.have_speed);
    gm_jobmsg_free(&d);
    free(txt);
    static const char *const bad_speed[] = {
        "{\"samples\":0,\"step_s\":0.01,\"coll_s\":0}",         /* no sample */
        "{\"samples\":5,\"step_s\":0,\"coll_s\":0}",            /* no time */
        "{\"samples\":5,\"step_s\":0.01,\"coll_s\":0.02}",      /* more wait than step */
        "{\"samples\":5,\"step_s\":0.01,\"coll_s\":-1}",        /* negative */
        "{\"samples\":5,\"step_s\":0.01}",                      /* a field missing */
        "{\"samples\":5,\"step_s\":0.01,\"coll_s\":0,\"x\":1}", /* one too many */
        "{\"samples\":1.5,\"step_s\":0.01,\"coll_s\":0}",       /* not an integer */
        "\"fast\"",
    };
    for (size_t i = 0; i < sizeof(bad_speed) / sizeof(bad_speed[0]); i++) {
        int n = snprintf(bad, sizeof(bad),
                         "{\"id\":\"0123456789abcdef\",\"gen\":2,\"event\":\"fit\",\"code\":0,"
                         "\"message\":\"\",\"fit\":{\"alpha_s\":0.001,\"bytes_per_s\":1e8,"
                         "\"ops\":3},\"speed\":%s}",
                         bad_speed[i]);
        GM_CHECK_ERR(gm_jobmsg_decode(GM_MSG_JOB_REPORT, (const uint8_t *)bad, (size_t)n, &d),
                     GM_ERR_PROTO);
    }
}

/* Speeds from steps: the rank that waits least is the one waited for; every other rank's
 * extra collective time is waiting, not work. */
static void test_speeds(void)
{
    /* lockstep at 40 ms a step: rank 0 (100 samples) computes 10 ms and waits 28 ms of its
     * 30 ms collective; rank 1 (28 samples) is busy the whole 40 ms, 2 ms of it the
     * collective's own cost */
    const struct gm_autoshare_obs o[2] = {{100, 0.040, 0.030}, {28, 0.040, 0.002}};
    const struct gm_autoshare_obs unknown[2] = {{100, 0.040, 0.030}, {0, 0, 0}};
    double sps[2];

    GM_CHECK_EQ(gm_autoshare_speeds(o, 2, sps), 2);
    GM_CHECK_NEAR(sps[0], 100 / 0.012, 1e-6, 1e-12);
    GM_CHECK_NEAR(sps[1], 28 / 0.040, 1e-6, 1e-12);
    GM_CHECK_EQ(gm_autoshare_speeds(unknown, 2, sps), 1);
    GM_CHECK_EQ(sps[1], 0.0);
}

/* The spare rule: a rank whose balanced share saves the others less time than a step's
 * collective costs is left out, after CONFIRM calls in a row; one that helps stays. */
static void test_spare(void)
{
    struct gm_autoshare a = {0};
    const double sp3[3] = {10000, 8000, 500}, sp2[2] = {2709, 1572};
    const struct gm_autoshare_obs o3[3] = {{69, .01, .006}, {55, .01, .005}, {4, .01, .003}};
    const struct gm_autoshare_obs o2[2] = {{81, .03, .01}, {47, .03, .005}};
    const int c3[3] = {69, 55, 4}, c2[2] = {81, 47};
    char why[320];
    int k;

    gm_autoshare_group(&a, 0);
    GM_CHECK_EQ(gm_autoshare_spare(&a, sp3, o3, 3, c3, 1, why, sizeof(why)), -1); /* dwell */
    for (k = 1; k < GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_spare(&a, sp3, o3, 3, c3, 100 + k, why, sizeof(why)), -1);
    GM_CHECK_EQ(gm_autoshare_spare(&a, sp3, o3, 3, c3, 100 + k, why, sizeof(why)), 2);
    GM_CHECK(strstr(why, "too slow to help") != NULL);
    /* 47 samples at 1572/s beside 2709/s save 17 ms, far more than a 5 ms collective */
    for (k = 0; k < 10 * GM_AUTOSHARE_CONFIRM; k++)
        GM_CHECK_EQ(gm_autoshare_spare(&a, sp2, o2, 2, c2, 200 + k, why, sizeof(why)), -1);
}

int main(void)
{
    GM_TEST_RUN(test_balance);
    GM_TEST_RUN(test_decide);
    GM_TEST_RUN(test_wire);
    GM_TEST_RUN(test_speeds);
    GM_TEST_RUN(test_spare);
    return gm_test_finish("test_autoshare");
}
