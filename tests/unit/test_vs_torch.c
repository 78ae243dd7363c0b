/*
 * tests/unit/test_vs_torch.c - gradmesh trains exactly like PyTorch.
 *
 * Same initial weights (ours, exported in PyTorch layout), same batches of
 * the same bytes, same optimizer: the per-step losses and the final weights
 * of gradmesh and of torch (Debian's python3-torch, tests/unit/torch_ref.py)
 * must agree.  The MLP stays within float rounding for the whole run; LeNet-5
 * is compared over fewer steps, since ReLU/max-pool decisions amplify
 * rounding differences between two correct implementations (measured: equal
 * to 1e-7 at step 10, ~1e-2 in the loss by step 100).
 * Skips (77) when /usr/bin/python3 cannot import torch.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"
#include "train/data/data.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"
#include "train/nn/rng.h"

GM_TEST_DEFINE_STATE;

static char dir[] = "/tmp/gm-vs-torch-XXXXXX";

static int write_file(const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int read_file(const char *name, void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t r = fread(p, 1, n, f);
    fclose(f);
    return r == n ? 0 : -1;
}

/* model, optimizer, steps, loss tolerance (absolute, every step), weight tolerance */
static void run_case(const char *model, const char *optim, int steps, double loss_tol, double w_tol)
{
    const int B = 32, N = 2048;
    struct gm_dataset ds = {.n = N, .c = 1, .h = 28, .w = 28, .classes = 10};
    struct gm_model_spec ms = {.name = model,
                               .in_c = 1,
                               .in_h = 28,
                               .in_w = 28,
                               .classes = 10,
                               .hidden = {64},
                               .nhidden = 1};
    struct gm_model *m = NULL;
    struct gm_optim o;
    struct gm_optim_config oc;
    struct gm_rng rng;
    uint32_t idx[32];
    int32_t y[32];
    double *losses = calloc((size_t)steps, sizeof(double));
    double *ref = calloc((size_t)steps, sizeof(double));
    char cmd[1024];

    /* images: smooth blobs plus noise, label = brightest quadrant (learnable) */
    ds.images = malloc((size_t)N * 784);
    ds.labels = malloc(N);
    gm_rng_init(&rng, 7, 0);
    for (int i = 0; i < N; i++) {
        int lab = (int)gm_rng_below(&rng, 10);
        for (int p = 0; p < 784; p++) {
            int r = p / 28, c = p % 28;
            int on = ((r / 7) * 4 + c / 7) % 10 == lab;
            ds.images[(size_t)i * 784 + p] = (uint8_t)(on * 150 + gm_rng_below(&rng, 100));
        }
        ds.labels[i] = (uint8_t)lab;
    }
    GM_CHECK_OK(gm_model_new(&ms, B, &m));
    if (m == NULL)
        goto out;
    gm_model_init_params(m, 5);
    gm_optim_config_default(&oc, strcmp(optim, "adam") == 0 ? GM_OPTIM_ADAM : GM_OPTIM_SGD);
    if (oc.kind == GM_OPTIM_SGD) {
        oc.momentum = 0.9f;
        oc.nesterov = 1;
        oc.weight_decay = 1e-4f;
    }
    GM_CHECK_OK(gm_optim_init(&o, &oc, gm_model_num_params(m)));
    GM_CHECK(write_file("images.u8", ds.images, (size_t)N * 784) == 0);
    GM_CHECK(write_file("labels.u8", ds.labels, N) == 0);
    float *tmp = malloc(gm_model_num_params(m) * sizeof(float));
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        const struct gm_param_info *ti = gm_model_tensor(m, t);
        char name[64];
        gm_model_export_tensor(m, t, gm_model_params(m), tmp);
        snprintf(name, sizeof(name), "init_%s.f32", ti->name);
        GM_CHECK(write_file(name, tmp, ti->numel * sizeof(float)) == 0);
    }
    const float lr = oc.kind == GM_OPTIM_ADAM ? 1e-3f : 0.05f;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B; i++) /* a fixed order that revisits samples */
            idx[i] = (uint32_t)(((long)s * B + i) * 37 % N);
        gm_dataset_batch(&ds, idx, B, gm_model_input(m), y);
        GM_CHECK_OK(gm_model_forward(m, B, 1, 0));
        losses[s] = gm_model_loss(m, B, y, NULL);
        GM_CHECK_OK(gm_model_backward(m, B));
        gm_optim_step(&o, gm_model_params(m), gm_model_grads(m), lr);
    }
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/unit/torch_ref.py %s %s %s %d %d %g", dir,
             model, optim, steps, B, (double)lr);
    GM_CHECK(system(cmd) == 0);
    GM_CHECK(read_file("ref_losses.f64", ref, (size_t)steps * sizeof(double)) == 0);
    double worst = 0;
    for (int s = 0; s < steps; s++)
        worst = fmax(worst, fabs(losses[s] - ref[s]));
    fprintf(stderr, "%s/%s: %d steps, loss %.4f -> %.4f, worst |loss - torch| %.3g\n", model, optim,
            steps, losses[0], losses[steps - 1], worst);
    GM_CHECK_NEAR(worst, 0, loss_tol, 0);
    GM_CHECK(losses[steps - 1] < 0.7 * losses[0]); /* it did learn */
    for (size_t t = 0; t < gm_model_num_tensors(m); t++) {
        const struct gm_param_info *ti = gm_model_tensor(m, t);
        float *want = malloc(ti->numel * sizeof(float));
        char name[64];
        double d = 0, sc = 0;
        gm_model_export_tensor(m, t, gm_model_params(m), tmp);
        snprintf(name, sizeof(name), "final_%s.f32", ti->name);
        GM_CHECK(read_file(name, want, ti->numel * sizeof(float)) == 0);
        for (size_t i = 0; i < ti->numel; i++) {
            d = fmax(d, fabs((double)tmp[i] - want[i]));
            sc = fmax(sc, fabs((double)want[i]));
        }
        gm_test_state.checks++;
        if (!(d <= w_tol * sc))
            GM_TEST_FAIL_("%s/%s %s: max |w - torch| %.3g (scale %.3g)", model, optim, ti->name, d,
                          sc);
        free(want);
    }
    free(tmp);
    gm_optim_free(&o);
out:
    gm_model_free(m);
    gm_dataset_free(&ds);
    free(losses);
    free(ref);
}

static void test_mlp_adam(void)
{
    run_case("mlp", "adam", 200, 1e-5, 1e-4);
}

static void test_mlp_sgd(void)
{
    run_case("mlp", "sgd", 200, 1e-5, 1e-4);
}

static void test_lenet_adam(void)
{
    run_case("lenet5", "adam", 25, 1e-4, 1e-3);
}

int main(void)
{
    char cmd[128];

    if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
        printf("skip: /usr/bin/python3 cannot import torch (Debian: python3-torch)\n");
        return GM_EXIT_SKIP;
    }
    if (mkdtemp(dir) == NULL)
        return 1;
    GM_TEST_RUN(test_mlp_adam);
    GM_TEST_RUN(test_mlp_sgd);
    GM_TEST_RUN(test_lenet_adam);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return gm_test_finish("test_vs_torch");
}
