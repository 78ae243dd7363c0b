/*
 * tests/unit/test_kernels_host.c - the host build of the CUDA custom kernels
 * (train/kernels/custom.h: the same per-thread bodies as the __global__ kernels, run
 * over a simulated grid) against the CPU implementations they must equal, bit for bit:
 *   softmax cross-entropy   vs gm_xent_cpu (train/kernels/xent_cpu.c)
 *   SGD (every variant)     vs gm_optim_step (train/nn/optim.c), several steps
 *   Adam (with/without wd)  vs gm_optim_step, several steps
 *   the bf16 (mixed precision) SGD and Adam: the same fp32 masters and state, and their
 *                           bf16 copy equal to the bf16 cast of the fp32 optimizer's weights
 *   fp16, bf16 pack/unpack  vs gm_codec_encode / gm_codec_decode_add (F16C for fp16)
 *   parameter hash          vs gm_coll_hash
 *   ReLU6, max pooling with stride/padding, adaptive average pooling (kfn_layers.h)
 *                           vs act_cpu.c, maxpool_cpu.c, avgpool_cpu.c
 *   batch norm (kfn_bn.h)   vs batchnorm_cpu.c
 * Each runs over several grids, including ones whose grid-stride loops wrap several
 * times and ones larger than the work, so an indexing mistake in a body (a skipped or
 * doubled element, a thread past the end) shows up here, in CI, without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/comm/codec.h"
#include "train/comm/coll_wire.h"
#include "train/kernels/cuda_plan.h"
#include "train/kernels/custom.h"
#include "train/kernels/act.h"
#include "train/kernels/avgpool.h"
#include "train/kernels/batchnorm.h"
#include "train/kernels/kfn_bn.h"
#include "train/kernels/layers_host.h"
#include "train/kernels/xent.h"
#include "train/nn/optim.h"
#include "train/nn/rng.h"

GM_TEST_DEFINE_STATE;

static const struct gm_klaunch grids[] = {
    {1, 1}, {1, 32}, {3, 5}, {2, 7}, {4, 256}, {7, 3},
};
#define NGRIDS (sizeof(grids) / sizeof(grids[0]))

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float frand(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) & 0xffffff) / 16777216.0f;
}

static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand(lo, hi);
}

/* Number of positions where a and b differ as bit patterns. */
static long bits_differ(const void *a, const void *b, size_t n, size_t elem)
{
    const unsigned char *pa = a, *pb = b;
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(pa + i * elem, pb + i * elem, elem) != 0;
    return bad;
}

static void test_xent(void)
{
    const int shapes[][2] = {{1, 2}, {37, 10}, {64, 10}, {5, 1000}, {129, 3}};

    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        float *z = malloc(sizeof(float) * (size_t)(n * k));
        float *d_cpu = malloc(sizeof(float) * (size_t)(n * k));
        float *d_k = malloc(sizeof(float) * (size_t)(n * k));
        int32_t *y = malloc(sizeof(int32_t) * (size_t)n),
                *hit = malloc(sizeof(int32_t) * (size_t)n);
        double *rl = malloc(sizeof(double) * (size_t)n);
        long c_cpu = -1, c_k = -2;

        fill(z, (size_t)(n * k), -8.0f, 8.0f);
        for (int r = 0; r < n; r++)
            y[r] = (int32_t)(frand(0.0f, (float)k)) % k;
        const double l_cpu = gm_xent_cpu(n, k, z, y, d_cpu, &c_cpu);
        for (size_t g = 0; g < NGRIDS; g++) {
            memset(d_k, 0xff, sizeof(float) * (size_t)(n * k)); /* NaNs where nothing is written */
            const double l_k = gm_kxent_host(grids[g], n, k, z, y, d_k, &c_k, rl, hit);
            GM_CHECK(memcmp(&l_k, &l_cpu, sizeof(double)) == 0);
            GM_CHECK_EQ(c_k, c_cpu);
            GM_CHECK_EQ(bits_differ(d_k, d_cpu, (size_t)(n * k), sizeof(float)), 0);
            /* the loss alone (no gradient buffer) is the same */
            GM_CHECK(gm_kxent_host(grids[g], n, k, z, y, NULL, NULL, rl, hit) == l_cpu);
        }
        /* a label out of range: NaN loss, not a read past the row */
        y[n - 1] = k;
        GM_CHECK(isnan(gm_kxent_host(grids[2], n, k, z, y, d_k, &c_k, rl, hit)));
        y[n - 1] = -1;
        GM_CHECK(isnan(gm_kxent_host(grids[2], n, k, z, y, NULL, NULL, rl, hit)));
        free(z);
        free(d_cpu);
        free(d_k);
        free(y);
        free(hit);
        free(rl);
    }
}

/* Runs `steps` steps of the CPU optimizer and of the host kernel from the same start and
 * compares parameters and state after every step. */
static void sgd_case(float mu, float wd, int nesterov, size_t n, struct gm_klaunch l)
{
    struct gm_optim_config cfg;
    struct gm_optim o;
    float *p0 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float)), *buf = calloc(n, sizeof(float));
    /* the mixed-precision update: master p2 and state buf2, its bf16 copy w16 */
    float *p2 = malloc(n * sizeof(float)), *buf2 = calloc(n, sizeof(float));
    uint16_t *w16 = malloc(n * sizeof(uint16_t)), *want16 = malloc(n * sizeof(uint16_t));
    const float lr = 0.05f;
    unsigned flags = (wd != 0.0f ? GM_KSGD_DECAY : 0u) | (mu != 0.0f ? GM_KSGD_MOMENTUM : 0u) |
                     (nesterov ? GM_KSGD_NESTEROV : 0u);

    gm_optim_config_default(&cfg, GM_OPTIM_SGD);
    cfg.momentum = mu;
    cfg.weight_decay = wd;
    cfg.nesterov = nesterov;
    GM_CHECK_OK(gm_optim_init(&o, &cfg, n));
    fill(p0, n, -1.0f, 1.0f);
    memcpy(p1, p0, n * sizeof(float));
    memcpy(p2, p0, n * sizeof(float));
    for (int s = 0; s < 4; s++) {
        fill(g, n, -0.5f, 0.5f);
        gm_optim_step(&o, p0, g, lr);
        gm_ksgd_host(l, n, p1, g, buf, lr, wd, mu, flags);
        GM_CHECK_EQ(bits_differ(p0, p1, n, sizeof(float)), 0);
        if (mu != 0.0f)
            GM_CHECK_EQ(bits_differ(gm_optim_state(&o), buf, n, sizeof(float)), 0);
        /* bf16: the fp32 masters and state are the fp32 optimizer's, the copy their cast */
        memset(w16, 0xff, n * sizeof(uint16_t));
        gm_ksgd_bf16_host(l, n, p2, g, buf2, w16, lr, wd, mu, flags);
        gm_kbf16_pack_host(grids[0], n, p0, want16);
        GM_CHECK_EQ(bits_differ(p0, p2, n, sizeof(float)), 0);
        if (mu != 0.0f)
            GM_CHECK_EQ(bits_differ(gm_optim_state(&o), buf2, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(want16, w16, n, sizeof(uint16_t)), 0);
    }
    gm_optim_free(&o);
    free(p0);
    free(p1);
    free(p2);
    free(g);
    free(buf);
    free(buf2);
    free(w16);
    free(want16);
}

static void test_sgd(void)
{
    for (size_t gi = 0; gi < NGRIDS; gi++) {
        const size_t n = 1000 + gi * 37;
        sgd_case(0.0f, 0.0f, 0, n, grids[gi]);
        sgd_case(0.0f, 5e-4f, 0, n, grids[gi]);
        sgd_case(0.9f, 0.0f, 0, n, grids[gi]);
        sgd_case(0.9f, 5e-4f, 0, n, grids[gi]);
        sgd_case(0.9f, 0.0f, 1, n, grids[gi]);
        sgd_case(0.9f, 5e-4f, 1, n, grids[gi]);
    }
}

static void adam_case(float wd, size_t n, struct gm_klaunch l)
{
    struct gm_optim_config cfg;
    struct gm_optim o;
    float *p0 = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float));
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    float *p2 = malloc(n * sizeof(float));
    float *m2 = calloc(n, sizeof(float)), *v2 = calloc(n, sizeof(float));
    uint16_t *w16 = malloc(n * sizeof(uint16_t)), *want16 = malloc(n * sizeof(uint16_t));
    const float lr = 1e-3f;

    gm_optim_config_default(&cfg, GM_OPTIM_ADAM);
    cfg.weight_decay = wd;
    GM_CHECK_OK(gm_optim_init(&o, &cfg, n));
    fill(p0, n, -1.0f, 1.0f);
    memcpy(p1, p0, n * sizeof(float));
    memcpy(p2, p0, n * sizeof(float));
    for (long t = 1; t <= 5; t++) {
        struct gm_kadam a;
        fill(g, n, -0.5f, 0.5f);
        gm_optim_step(&o, p0, g, lr);
        gm_kadam_prepare(cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, t, lr, &a);
        gm_kadam_host(l, n, p1, g, m, v, &a);
        GM_CHECK_EQ(bits_differ(p0, p1, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o), m, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o) + n, v, n, sizeof(float)), 0);
        memset(w16, 0xff, n * sizeof(uint16_t));
        gm_kadam_bf16_host(l, n, p2, g, m2, v2, w16, &a);
        gm_kbf16_pack_host(grids[0], n, p0, want16);
        GM_CHECK_EQ(bits_differ(p0, p2, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o), m2, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o) + n, v2, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(want16, w16, n, sizeof(uint16_t)), 0);
    }
    gm_optim_free(&o);
    free(p0);
    free(p1);
    free(p2);
    free(g);
    free(m);
    free(v);
    free(m2);
    free(v2);
    free(w16);
    free(want16);
}

static void test_adam(void)
{
    for (size_t gi = 0; gi < NGRIDS; gi++) {
        adam_case(0.0f, 999 + gi * 41, grids[gi]);
        adam_case(1e-2f, 999 + gi * 41, grids[gi]);
    }
}

static void test_f16(void)
{
    const size_t n = 4133;
    float *x = malloc(n * sizeof(float)), *acc = malloc(n * sizeof(float));
    float *out_cpu = malloc(n * sizeof(float)), *out_k = malloc(n * sizeof(float));
    uint16_t *h_cpu = malloc(n * sizeof(uint16_t)), *h_k = malloc(n * sizeof(uint16_t));

    fill(x, n, -70000.0f, 70000.0f); /* beyond fp16's range too: +-Inf */
    for (size_t i = 0; i < 200; i++) /* small values: subnormal halves and ties */
        x[i] = frand(-1e-4f, 1e-4f);
    x[200] = NAN;
    x[201] = INFINITY;
    x[202] = -0.0f;
    x[203] = 65520.0f; /* rounds up to Inf */
    fill(acc, n, -1.0f, 1.0f);
    gm_codec_encode(GM_CODEC_FP16, x, n, h_cpu);
    for (size_t g = 0; g < NGRIDS; g++) {
        memset(h_k, 0xab, n * sizeof(uint16_t));
        gm_kf16_pack_host(grids[g], n, x, h_k);
        GM_CHECK_EQ(bits_differ(h_k, h_cpu, n, sizeof(uint16_t)), 0);
        gm_codec_decode_add(GM_CODEC_FP16, h_cpu, acc, n, out_cpu);
        gm_kf16_unpack_host(grids[g], n, h_k, acc, out_k);
        GM_CHECK_EQ(bits_differ(out_k, out_cpu, n, sizeof(float)), 0);
        gm_codec_decode(GM_CODEC_FP16, h_cpu, n, out_cpu);
        gm_kf16_unpack_host(grids[g], n, h_k, NULL, out_k);
        GM_CHECK_EQ(bits_differ(out_k, out_cpu, n, sizeof(float)), 0);
    }
    gm_codec_encode(GM_CODEC_BF16, x, n, h_cpu);
    for (size_t g = 0; g < NGRIDS; g++) {
        memset(h_k, 0xab, n * sizeof(uint16_t));
        gm_kbf16_pack_host(grids[g], n, x, h_k);
        GM_CHECK_EQ(bits_differ(h_k, h_cpu, n, sizeof(uint16_t)), 0);
        gm_codec_decode_add(GM_CODEC_BF16, h_cpu, acc, n, out_cpu);
        gm_kbf16_unpack_host(grids[g], n, h_k, acc, out_k);
        GM_CHECK_EQ(bits_differ(out_k, out_cpu, n, sizeof(float)), 0);
    }
    free(x);
    free(acc);
    free(out_cpu);
    free(out_k);
    free(h_cpu);
    free(h_k);
}

static void test_hash(void)
{
    unsigned char buf[4099 + 8];
    long bad = 0;

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(frand(0.0f, 256.0f));
    for (size_t g = 0; g < NGRIDS; g++) {
        for (size_t n = 0; n <= 100; n++)
            bad += gm_khash_host(grids[g], buf, n) != gm_coll_hash(buf, n);
        bad += gm_khash_host(grids[g], buf, 4099) != gm_coll_hash(buf, 4099);
        bad += gm_khash_host(grids[g], buf + 3, 4096) != gm_coll_hash(buf + 3, 4096);
    }
    GM_CHECK_EQ(bad, 0);
    /* and the hash still sees every byte: one flipped bit in a stripe and in the tail */
    const uint64_t before = gm_khash_host(grids[2], buf, 100);
    buf[40] ^= 1;
    const uint64_t stripe = gm_khash_host(grids[2], buf, 100);
    buf[97] ^= 4;
    const uint64_t tail = gm_khash_host(grids[2], buf, 100);
    GM_CHECK(before != stripe);
    GM_CHECK(stripe != tail);
}

/* Batch norm (kfn_bn.h): the CUDA bodies and their driver give the CPU's bits, forward
 * (training and evaluation) and backward (with and without dx), at row counts that take
 * one to four levels of partial sums. */
static void bn_case(struct gm_klaunch l, size_t rows, int c)
{
    const size_t n = rows * (size_t)c;
    float *x = malloc(n * sizeof(float)), *dy = malloc(n * sizeof(float));
    float *y[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    float *dx[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    float *pc[2][8]; /* gamma beta rmean rvar smean sinv dgamma dbeta, CPU and twin */

    GM_CHECK(x != NULL && dy != NULL && y[0] != NULL && y[1] != NULL && dx[0] != NULL &&
             dx[1] != NULL);
    fill(x, n, 0.5f, 3.0f);
    fill(dy, n, -1.0f, 1.0f);
    for (int k = 0; k < 8; k++) {
        pc[0][k] = malloc((size_t)c * sizeof(float));
        pc[1][k] = malloc((size_t)c * sizeof(float));
        fill(pc[0][k], (size_t)c, 0.5f, 1.5f);
        memcpy(pc[1][k], pc[0][k], (size_t)c * sizeof(float));
    }
    for (int train = 1; train >= 0; train--) {
        gm_batchnorm_forward_cpu(rows, c, train, 0.1f, 1e-5f, x, pc[0][0], pc[0][1], pc[0][2],
                                 pc[0][3], pc[0][4], pc[0][5], y[0]);
        GM_CHECK_OK(gm_kbatchnorm_forward_host(l, rows, c, train, 0.1f, 1e-5f, x, pc[1][0],
                                               pc[1][1], pc[1][2], pc[1][3], pc[1][4], pc[1][5],
                                               y[1]));
        GM_CHECK_EQ(bits_differ(y[0], y[1], n, sizeof(float)), 0);
        for (int k = 2; k < 6; k++)
            GM_CHECK_EQ(bits_differ(pc[0][k], pc[1][k], (size_t)c, sizeof(float)), 0);
    }
    for (int with_dx = 1; with_dx >= 0; with_dx--) {
        gm_batchnorm_backward_cpu(rows, c, x, pc[0][0], pc[0][4], pc[0][5], dy, pc[0][6], pc[0][7],
                                  with_dx ? dx[0] : NULL);
        GM_CHECK_OK(gm_kbatchnorm_backward_host(l, rows, c, x, pc[1][0], pc[1][4], pc[1][5], dy,
                                                pc[1][6], pc[1][7], with_dx ? dx[1] : NULL));
        GM_CHECK_EQ(bits_differ(pc[0][6], pc[1][6], (size_t)c, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(pc[0][7], pc[1][7], (size_t)c, sizeof(float)), 0);
        if (with_dx)
            GM_CHECK_EQ(bits_differ(dx[0], dx[1], n, sizeof(float)), 0);
    }
    for (int k = 0; k < 8; k++)
        free(pc[0][k]), free(pc[1][k]);
    free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]);
}

static void test_batchnorm(void)
{
    static const size_t shapes[][2] = {
        {1, 3}, {5, 7}, {32, 16}, {33, 16}, {1000, 3}, {2100, 5}, {40000, 16}, {4096, 64},
    };
    char name[128];

    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t g = 0; g < NGRIDS; g++)
            if (shapes[s][0] * shapes[s][1] <= 20000 || g == 4)
                bn_case(grids[g], shapes[s][0], (int)shapes[s][1]);
    /* the levels: 40,000 rows take 1,250, 40 and 2 partial sums before the last */
    GM_CHECK_EQ(gm_kbn_parts(40000), 1250);
    GM_CHECK_EQ(gm_kbn_parts(gm_kbn_parts(gm_kbn_parts(40000))), 2);

    gm_cuda_conv_name(name, sizeof(name), 2, 3, 8, 8, 4, 3, 1, 1);
    GM_CHECK_STREQ(name, "n=2 c=3 h=8 w=8 oc=4 k=3 stride=1 pad=1");
}

/* ReLU6, padded/strided max pooling and adaptive average pooling: the CUDA bodies
 * (gather backward, one thread per element) give the CPU's bits. */
static void test_layers(void)
{
    static const int pools[][7] = {
        /* n, h, w, c, k, stride, pad */
        {2, 9, 8, 12, 3, 2, 1}, {1, 7, 9, 3, 3, 1, 1}, {2, 6, 7, 10, 2, 2, 0},
        {1, 5, 5, 3, 2, 1, 1},  {1, 9, 9, 4, 3, 3, 0},
    };
    static const int adas[][6] = {
        {2, 4, 4, 9, 7, 7},
        {2, 5, 7, 3, 3, 2},
        {1, 14, 14, 4, 7, 7},
        {3, 4, 6, 10, 1, 1},
    };
    enum { MAXN = 4096 };
    float *x = calloc(MAXN, 4), *y = calloc(MAXN, 4), *y2 = calloc(MAXN, 4);
    float *dy = calloc(MAXN, 4), *dx = calloc(MAXN, 4), *dx2 = calloc(MAXN, 4);
    uint8_t *arg = calloc(MAXN, 1), *arg2 = calloc(MAXN, 1);

    fill(x, MAXN, -8, 8);
    fill(dy, MAXN, -1, 1);
    gm_relu6_forward_cpu(MAXN, x, y);
    gm_relu6_backward_cpu(MAXN, y, dy, dx);
    for (size_t gi = 0; gi < NGRIDS; gi++) {
        gm_krelu6_forward_host(grids[gi], MAXN, x, y2);
        gm_krelu6_backward_host(grids[gi], MAXN, y, dy, dx2);
        GM_CHECK_EQ(bits_differ(y, y2, MAXN, 4), 0);
        GM_CHECK_EQ(bits_differ(dx, dx2, MAXN, 4), 0);
    }
    for (size_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++) {
        const int *p = pools[pi];
        struct gm_pool2d_shape s;
        GM_CHECK_OK(gm_pool2d_shape_init(&s, p[0], p[1], p[2], p[3], p[4], p[5], p[6]));
        const size_t nx = (size_t)s.n * s.h * s.w * s.c, ny = (size_t)s.n * s.oh * s.ow * s.c;
        GM_CHECK(nx <= MAXN && ny <= MAXN);
        for (int relu = 0; relu < 2; relu++) {
            gm_maxpool2d_forward_cpu(&s, relu, x, y, arg);
            gm_maxpool2d_backward_cpu(&s, dy, arg, dx);
            for (size_t gi = 0; gi < NGRIDS; gi++) {
                gm_kmaxpool2d_forward_host(grids[gi], &s, relu, x, y2, arg2);
                gm_kmaxpool2d_backward_host(grids[gi], &s, dy, arg, dx2);
                GM_CHECK_EQ(bits_differ(y, y2, ny, 4), 0);
                GM_CHECK_EQ(memcmp(arg, arg2, ny), 0);
                /* values, not bits: the CPU's plain k x k path writes g * 0 = -0 for a
                 * negative gradient where the body adds nothing to +0 */
                long bad = 0;
                for (size_t i = 0; i < nx; i++)
                    bad += dx[i] != dx2[i];
                GM_CHECK_EQ(bad, 0);
            }
        }
    }
    for (size_t ai = 0; ai < sizeof(adas) / sizeof(adas[0]); ai++) {
        const int *a = adas[ai];
        const size_t nx = (size_t)a[0] * a[1] * a[2] * a[3], ny = (size_t)a[0] * a[4] * a[5] * a[3];
        GM_CHECK(nx <= MAXN && ny <= MAXN);
        gm_adaptive_avgpool_forward_cpu(a[0], a[1], a[2], a[3], a[4], a[5], x, y);
        gm_adaptive_avgpool_backward_cpu(a[0], a[1], a[2], a[3], a[4], a[5], dy, dx);
        for (size_t gi = 0; gi < NGRIDS; gi++) {
            gm_kadapool_forward_host(grids[gi], a[0], a[1], a[2], a[3], a[4], a[5], x, y2);
            gm_kadapool_backward_host(grids[gi], a[0], a[1], a[2], a[3], a[4], a[5], dy, dx2);
            GM_CHECK_EQ(bits_differ(y, y2, ny, 4), 0);
            GM_CHECK_EQ(bits_differ(dx, dx2, nx, 4), 0);
        }
    }
    free(x), free(y), free(y2), free(dy), free(dx), free(dx2), free(arg), free(arg2);
}

/* In a build without the CUDA backend the _cuda entry points refuse; with it they need a
 * context, which tests/unit/test_cuda_ops.c makes where a GPU answers. */
static void test_cuda_stubs(void)
{
    if (gm_cuda_built()) {
        GM_CHECK(gm_cuda_built() == 1);
        return;
    }
    GM_CHECK_ERR(gm_ksgd_cuda(NULL, 1, NULL, NULL, NULL, 0.1f, 0, 0, 0), -ENOTSUP);
    GM_CHECK_ERR(gm_kf16_pack_cuda(NULL, 1, NULL, NULL), -ENOTSUP);
    struct gm_cuda *cu = (struct gm_cuda *)1;
    GM_CHECK_ERR(gm_cuda_new(0, &cu), -ENOTSUP);
    GM_CHECK(cu == NULL);
}

int main(void)
{
    GM_TEST_RUN(test_xent);
    GM_TEST_RUN(test_sgd);
    GM_TEST_RUN(test_adam);
    GM_TEST_RUN(test_f16);
    GM_TEST_RUN(test_hash);
    GM_TEST_RUN(test_batchnorm);
    GM_TEST_RUN(test_layers);
    GM_TEST_RUN(test_cuda_stubs);
    return gm_test_finish("test_kernels_host");
}
