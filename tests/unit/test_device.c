/*
 * tests/unit/test_device.c - the device setting (train/nn/device.h): every spelling and
 * the refusals; the canonical spelling round trip; and resolution on this machine: with no
 * GPU answering (no driver, or a build without the CUDA backend) auto takes the CPU and
 * says why, cuda and cuda:N fail with the reason, cuda:all is refused as not implemented.
 * Where a GPU answers, auto takes it only when the model can run there (cuda_ok).
 */
#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/test.h"
#include "train/kernels/cuda.h"
#include "train/nn/device.h"

GM_TEST_DEFINE_STATE;

static void test_parse(void)
{
    struct gm_device_spec d;
    char buf[GM_DEVICE_SPEC_LEN];
    const char *good[] = {"auto", "cpu", "cuda:0", "cuda:7", "cuda:63", "cuda:all"};
    const char *bad[] = {"",        "gpu",     "CUDA",     "cuda:",   "cuda:01",
                         "cuda:-1", "cuda:64", "cuda:100", "cuda:1x", "cuda:ALL",
                         " cpu",    "cpu ",    "cuda0",    "auto:0"};

    GM_CHECK_OK(gm_device_spec_parse("cuda", &d));
    GM_CHECK_EQ(d.want, GM_DEVICE_WANT_CUDA);
    GM_CHECK_EQ(d.index, 0);
    gm_device_spec_format(&d, buf, sizeof(buf));
    GM_CHECK_STREQ(buf, "cuda:0");
    GM_CHECK_OK(gm_device_spec_parse("cuda:12", &d));
    GM_CHECK_EQ(d.want, GM_DEVICE_WANT_CUDA);
    GM_CHECK_EQ(d.index, 12);
    GM_CHECK_OK(gm_device_spec_parse("cuda:all", &d));
    GM_CHECK_EQ(d.want, GM_DEVICE_WANT_CUDA_ALL);
    GM_CHECK_OK(gm_device_spec_parse("cpu", &d));
    GM_CHECK_EQ(d.want, GM_DEVICE_WANT_CPU);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        GM_CHECK_OK(gm_device_spec_parse(good[i], &d));
        gm_device_spec_format(&d, buf, sizeof(buf));
        GM_CHECK_STREQ(buf, good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d.want = GM_DEVICE_WANT_CPU;
        GM_CHECK_ERR(gm_device_spec_parse(bad[i], &d), -EINVAL);
        GM_CHECK_EQ(d.want, GM_DEVICE_WANT_AUTO);
    }
    GM_CHECK_ERR(gm_device_spec_parse(NULL, &d), -EINVAL);
}

static void test_choose(void)
{
    struct gm_device_spec d;
    struct gm_device_choice c;
    char why[400], probe[200];
    const int gpus = gm_cuda_device_count(probe, sizeof(probe));

    GM_CHECK_OK(gm_device_spec_parse("cpu", &d));
    GM_CHECK_OK(gm_device_choose(&d, 1, &c, why, sizeof(why)));
    GM_CHECK_EQ(c.device, GM_DEVICE_CPU);
    GM_CHECK_EQ(c.index, -1);

    GM_CHECK_OK(gm_device_spec_parse("cuda:all", &d));
    GM_CHECK_ERR(gm_device_choose(&d, 1, &c, why, sizeof(why)), -ENOTSUP);
    GM_CHECK(strstr(why, "not implemented") != NULL);
    GM_CHECK_EQ(c.device, GM_DEVICE_CPU);

    /* GPU 63 exists on no machine this runs on */
    GM_CHECK_OK(gm_device_spec_parse("cuda:63", &d));
    GM_CHECK_ERR(gm_device_choose(&d, 1, &c, why, sizeof(why)), -ENOTSUP);
    GM_CHECK(strncmp(why, "device = cuda:63: ", 18) == 0);

    GM_CHECK_OK(gm_device_spec_parse("auto", &d));
    if (gpus < 1) {
        /* the no-GPU fallback: the CPU, and the probe's reason */
        GM_CHECK(!gm_cuda_built() || strstr(probe, "no usable CUDA driver") != NULL ||
                 strstr(probe, "no NVIDIA driver") != NULL ||
                 strstr(probe, "no NVIDIA GPU") != NULL || strstr(probe, "no device") != NULL);
        /* the runtime's words for "no driver" read like a version problem */
        GM_CHECK(strstr(probe, "driver version is insufficient") == NULL);
        GM_CHECK_OK(gm_device_choose(&d, 1, &c, why, sizeof(why)));
        GM_CHECK_EQ(c.device, GM_DEVICE_CPU);
        GM_CHECK_STREQ(why, probe);
        GM_CHECK_OK(gm_device_spec_parse("cuda", &d));
        GM_CHECK_ERR(gm_device_choose(&d, 1, &c, why, sizeof(why)), -ENOTSUP);
        GM_CHECK(strstr(why, probe) != NULL);
        fprintf(stderr, "(no GPU here: %s)\n", probe);
        return;
    }
    /* a GPU answers: auto takes it when the model can use it, and only then */
    GM_CHECK_OK(gm_device_choose(&d, 1, &c, why, sizeof(why)));
    GM_CHECK_EQ(c.device, GM_DEVICE_CUDA);
    GM_CHECK_EQ(c.index, 0);
    GM_CHECK_OK(gm_device_choose(&d, 0, &c, why, sizeof(why)));
    GM_CHECK_EQ(c.device, GM_DEVICE_CPU);
    GM_CHECK(strstr(why, "no CUDA implementation") != NULL);
    GM_CHECK_OK(gm_device_spec_parse("cuda", &d));
    GM_CHECK_OK(gm_device_choose(&d, 1, &c, why, sizeof(why)));
    GM_CHECK_EQ(c.device, GM_DEVICE_CUDA);
}

int main(void)
{
    GM_TEST_RUN(test_parse);
    GM_TEST_RUN(test_choose);
    return gm_test_finish("test_device");
}
