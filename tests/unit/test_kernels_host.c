/*
 * tests/unit/test_kernels_host.c - the host build of the CUDA custom kernels
 * (train/kernels/custom.h: the same per-thread bodies as the __global__ kernels, run
 * over a simulated grid) against the CPU implementations they must equal, bit for bit:
 *   softmax cross-entropy   vs gm_xent_cpu (train/kernels/xent_cpu.c)
 *   SGD (every variant)     vs gm_optim_step (train/nn/optim.c), several steps
 *   Adam (with/without wd)  vs gm_optim_step, several steps
 *   fp16, bf16 pack/unpack  vs gm_codec_encode / gm_codec_decode_add (F16C for fp16)
 *   parameter hash          vs gm_coll_hash
 *   ReLU6, max pooling with stride/padding, adaptive average pooling (kfn_layers.h)
 *                           vs act_cpu.c, maxpool_cpu.c, avgpool_cpu.c
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
#include "train/kernels/custom.h"
#include "train/kernels/act.h"
#include "train/kernels/avgpool.h"
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
    for (int s = 0; s < 4; s++) {
        fill(g, n, -0.5f, 0.5f);
        gm_optim_step(&o, p0, g, lr);
        gm_ksgd_host(l, n, p1, g, buf, lr, wd, mu, flags);
        GM_CHECK_EQ(bits_differ(p0, p1, n, sizeof(float)), 0);
        if (mu != 0.0f)
            GM_CHECK_EQ(bits_differ(gm_optim_state(&o), buf, n, sizeof(float)), 0);
    }
    gm_optim_free(&o);
    free(p0);
    free(p1);
    free(g);
    free(buf);
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
    const float lr = 1e-3f;

    gm_optim_config_default(&cfg, GM_OPTIM_ADAM);
    cfg.weight_decay = wd;
    GM_CHECK_OK(gm_optim_init(&o, &cfg, n));
    fill(p0, n, -1.0f, 1.0f);
    memcpy(p1, p0, n * sizeof(float));
    for (long t = 1; t <= 5; t++) {
        struct gm_kadam a;
        fill(g, n, -0.5f, 0.5f);
        gm_optim_step(&o, p0, g, lr);
        gm_kadam_prepare(cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, t, lr, &a);
        gm_kadam_host(l, n, p1, g, m, v, &a);
        GM_CHECK_EQ(bits_differ(p0, p1, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o), m, n, sizeof(float)), 0);
        GM_CHECK_EQ(bits_differ(gm_optim_state(&o) + n, v, n, sizeof(float)), 0);
    }
    gm_optim_free(&o);
    free(p0);
    free(p1);
    free(g);
    free(m);
    free(v);
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
    GM_TEST_RUN(test_layers);
    GM_TEST_RUN(test_cuda_stubs);
    return gm_test_finish("test_kernels_host");
}
