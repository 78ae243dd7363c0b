/*
 * bench/model_step.c - times whole training steps of one gradmesh model: forward (train
 * mode), softmax cross-entropy, backward, SGD with momentum 0.9, fp32, as the trainer runs
 * them (train/trainer.c), on a fixed random batch, on the CPU or a GPU.  Driven by
 * bench/models_vs_torch.py, which times torchvision's model the same way in the same run.
 *
 *   model_step FAMILY THREADS SIZE BATCH WARMUP STEPS [cpu|cuda]
 * Prints, per timed step, "step WALL_MS CPU_MS" (CPU: the process's CPU time, all threads),
 * then "peak_rss_kib N" (getrusage's maxrss) and "blas_core NAME".  On the GPU each step ends
 * when the device has finished it (gm_cuda_sync), and it includes the batch's upload from its
 * pinned staging buffer, as in training.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "train/kernels/cuda.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"

static double now_ms(clockid_t clock_id)
{
    struct timespec t;
    clock_gettime(clock_id, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    struct gm_model *m = NULL;
    struct gm_optim opt = {0};
    struct gm_optim_config oc;
    char why[256] = "";
    int rc = 1;

    if (argc != 7 && !(argc == 8 && (strcmp(argv[7], "cpu") == 0 || strcmp(argv[7], "cuda") == 0))) {
        fprintf(stderr, "usage: model_step FAMILY THREADS SIZE BATCH WARMUP STEPS [cpu|cuda]\n");
        return 2;
    }
    const enum gm_device dev = argc == 8 && strcmp(argv[7], "cuda") == 0 ? GM_DEVICE_CUDA
                                                                        : GM_DEVICE_CPU;
    const int threads = atoi(argv[2]), size = atoi(argv[3]), batch = atoi(argv[4]);
    const int warmup = atoi(argv[5]), steps = atoi(argv[6]);
    openblas_set_num_threads(threads);
    struct gm_model_spec spec = {.name = argv[1],
                                 .in_c = 3,
                                 .in_h = size,
                                 .in_w = size,
                                 .classes = 1000,
                                 .device = dev,
                                 .why = why,
                                 .why_len = sizeof(why)};
    struct gm_cuda *cu = NULL;
    int err = 0;

    /* the trainer makes its thread's GPU context first (gm_trainer_run): so does this */
    if (dev == GM_DEVICE_CUDA && (err = gm_cuda_new(0, &cu)) < 0) {
        fprintf(stderr, "model_step: no GPU context: %d\n", err);
        return 1;
    }
    err = gm_model_new(&spec, batch, &m);
    if (err < 0) {
        fprintf(stderr, "model_step: %s: %s\n", argv[1], why[0] ? why : "cannot build");
        gm_cuda_free(cu);
        return 1;
    }
    gm_model_init_params(m, 1);
    gm_optim_config_default(&oc, GM_OPTIM_SGD);
    oc.momentum = 0.9f;
    oc.device = dev;
    if ((err = gm_optim_init(&opt, &oc, gm_model_num_trainable(m))) < 0) {
        fprintf(stderr, "model_step: optimizer: %d\n", err);
        goto out;
    }
    int32_t *labels = calloc((size_t)batch, sizeof(*labels));
    if (labels == NULL)
        goto out;
    float *in = gm_model_input(m);
    const size_t nin = (size_t)batch * 3 * (size_t)size * (size_t)size;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < nin; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (float)((r >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < batch; i++)
        labels[i] = (i * 37) % 1000;
    for (int s = 0; s < warmup + steps; s++) {
        const double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        if ((err = gm_model_forward(m, batch, 1, (uint64_t)s)) < 0)
            goto out_labels;
        (void)gm_model_loss(m, batch, labels, NULL);
        if ((err = gm_model_backward(m, batch)) < 0)
            goto out_labels;
        gm_optim_step(&opt, gm_model_params_device(m), gm_model_grads_device(m), 0.01f);
        if (dev == GM_DEVICE_CUDA && (err = gm_cuda_sync(gm_cuda_current())) < 0)
            goto out_labels;
        const double w1 = now_ms(CLOCK_MONOTONIC), c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        if (s >= warmup)
            printf("step %.3f %.3f\n", w1 - w0, c1 - c0);
        fflush(stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak_rss_kib %ld\n", ru.ru_maxrss);
    printf("blas_core %s\n", openblas_get_corename());
    rc = 0;
out_labels:
    free(labels);
out:
    if (err < 0)
        fprintf(stderr, "model_step: step failed: %d\n", err);
    gm_optim_free(&opt);
    gm_model_free(m);
    gm_cuda_free(cu);
    return rc;
}
