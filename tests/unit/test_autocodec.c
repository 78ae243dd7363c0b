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
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_DILOCO);
    GM_CHECK(job.comm.local_steps >= GM_GRADSYNC_AUTO_MIN_H &&
             job.comm.local_steps <= GM_GRADSYNC_AUTO_MAX_H);
    GM_CHECK_EQ((uint32_t)job.comm.local_steps, o.pick.local_steps);
    GM_CHECK(strncmp(why, "diloco H=", 9) == 0);

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
    GM_CHECK_STREQ(o.pick.name, o2.pick.name);
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

static void test_parse(void)
{
    enum gm_job_codec c;

    GM_CHECK_OK(gm_autocodec_parse("diloco", &c));
    GM_CHECK_EQ(c, GM_JOB_CODEC_DILOCO);
    GM_CHECK_OK(gm_autocodec_parse("fp16", &c));
    GM_CHECK_EQ(c, GM_JOB_CODEC_FP16);
    GM_CHECK_ERR(gm_autocodec_parse("auto", &c), -EINVAL);
    GM_CHECK_ERR(gm_autocodec_parse("", &c), -EINVAL);
}

int main(void)
{
    GM_TEST_RUN(test_resolve);
    GM_TEST_RUN(test_parse);
    return gm_test_finish("test_autocodec");
}
