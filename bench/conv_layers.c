/*
 * bench/conv_layers.c - times gradmesh's CPU convolution (the op table's conv2d entries,
 * tiled shapes from gm_conv2d_shape_init_groups) layer by layer: forward, then backward
 * (dW, and dx unless the layer is the first), as one training step runs them.  Driven by
 * bench/conv_vs_torch.py, which times the same layers with PyTorch in the same run.
 *
 *   conv_layers THREADS REPS < shapes
 * Each input line: name n h w c oc k stride pad groups need_dx.  Each output line:
 * name fwd_ms bwd_ms (medians of REPS after one warm-up), then "peak_ws_bytes B".
 * GM_BENCH_CLOCK=cpu times process CPU time instead of wall-clock time.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/nn/tensor.h"
#include "train/nn/ops.h"

/* GM_BENCH_CLOCK=cpu: process CPU time (all threads), which a loaded machine
 * inflates far less than wall-clock time; default wall */
static double now_ms(clockid_t clock_id)
{
    struct timespec t;
    clock_gettime(clock_id, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *alloc_floats(size_t n)
{
    float *p = NULL;
    if (gm_device_alloc(GM_DEVICE_CPU, (n + 16) * sizeof(float), (void **)&p) < 0) {
        fprintf(stderr, "conv_layers: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

int main(int argc, char **argv)
{
    const struct gm_ops *o = &gm_ops_cpu;
    char name[64];
    int n, h, w, c, oc, k, st, pad, g, need_dx;
    size_t peak_ws = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: conv_layers THREADS REPS < shapes\n");
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    openblas_set_num_threads(threads);
    const char *clk = getenv("GM_BENCH_CLOCK");
    const clockid_t clock_id =
        clk != NULL && strcmp(clk, "cpu") == 0 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    while (scanf("%63s %d %d %d %d %d %d %d %d %d %d", name, &n, &h, &w, &c, &oc, &k, &st, &pad, &g,
                 &need_dx) == 11) {
        struct gm_conv2d_shape s;
        if (gm_conv2d_shape_init_groups(&s, n, h, w, c, oc, k, pad, st, g) < 0) {
            fprintf(stderr, "conv_layers: bad shape %s\n", name);
            return 1;
        }
        const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * s.oh * s.ow * oc;
        const size_t nw = (size_t)oc * k * k * (c / g), nws = o->conv2d_ws_floats(&s, need_dx);
        float *x = alloc_floats(nx), *wt = alloc_floats(nw), *y = alloc_floats(ny);
        float *dy = alloc_floats(ny), *dw = alloc_floats(nw), *ws = alloc_floats(nws);
        float *dx = need_dx ? alloc_floats(nx) : NULL;
        double *fw = calloc((size_t)reps, sizeof(double)),
               *bw = calloc((size_t)reps, sizeof(double));
        if (nws * sizeof(float) > peak_ws)
            peak_ws = nws * sizeof(float);
        for (int r = -1; r < reps; r++) {
            const double t0 = now_ms(clock_id);
            o->conv2d_forward(&s, need_dx, x, wt, NULL, ws, y);
            const double t1 = now_ms(clock_id);
            o->conv2d_backward(&s, x, wt, dy, dw, NULL, dx, ws);
            const double t2 = now_ms(clock_id);
            if (r >= 0)
                fw[r] = t1 - t0, bw[r] = t2 - t1;
        }
        qsort(fw, (size_t)reps, sizeof(double), cmp_double);
        qsort(bw, (size_t)reps, sizeof(double), cmp_double);
        printf("%s %.3f %.3f\n", name, fw[reps / 2], bw[reps / 2]);
        fflush(stdout);
        gm_device_free(GM_DEVICE_CPU, x), gm_device_free(GM_DEVICE_CPU, wt);
        gm_device_free(GM_DEVICE_CPU, y), gm_device_free(GM_DEVICE_CPU, dy);
        gm_device_free(GM_DEVICE_CPU, dw), gm_device_free(GM_DEVICE_CPU, ws);
        gm_device_free(GM_DEVICE_CPU, dx);
        free(fw), free(bw);
    }
    printf("peak_ws_bytes %zu\n", peak_ws);
    printf("blas_core %s\n", openblas_get_corename());
    return 0;
}
