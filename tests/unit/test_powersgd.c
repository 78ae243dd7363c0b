/*
 * tests/unit/test_powersgd.c - PowerSGD over the in-memory transport: MGS
 * orthonormality, exact rank-r recovery within 3 warm-started steps, error
 * feedback telescoping, zero layers, payload formula against the bytes the
 * collective really sent, bitwise identity across ranks.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/compress/powersgd.h"
#include "train/comm/transport_mem.h"

GM_TEST_DEFINE_STATE;

#define MAXW 8

static uint64_t rng = 99;
static float urand(void)
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

struct slot {
    int status, calls;
};

static void done_cb(struct gm_coll *c, int status, void *arg)
{
    struct slot *s = arg;
    (void)c;
    s->status = status;
    s->calls++;
}

struct sim {
    int n;
    struct gm_memnet *net;
    struct gm_coll *c[MAXW];
    struct gm_psgd *p[MAXW];
    struct slot s[MAXW];
};

static void sim_init(struct sim *w, int n, const struct gm_psgd_config *cfg,
                     const struct gm_view *views, size_t nviews, size_t nelems)
{
    struct gm_coll_config cc = {.chunk_bytes = 512};

    memset(w, 0, sizeof(*w));
    w->n = n;
    w->net = gm_memnet_new(n);
    for (int r = 0; r < n; r++) {
        w->c[r] = gm_coll_new(gm_memnet_transport(w->net, r), &cc);
        GM_CHECK_OK(gm_psgd_new(cfg, views, nviews, nelems, &w->p[r]));
    }
}

static void sim_free(struct sim *w)
{
    gm_memnet_run(w->net);
    for (int r = 0; r < w->n; r++) {
        gm_psgd_free(w->p[r]);
        gm_coll_free(w->c[r]);
    }
    gm_memnet_free(w->net);
}

static void sim_step(struct sim *w, float **grads, uint64_t step)
{
    memset(w->s, 0, sizeof(w->s));
    for (int r = 0; r < w->n; r++)
        GM_CHECK_OK(gm_psgd_reduce_start(w->p[r], w->c[r], grads[r], step, done_cb, &w->s[r]));
    gm_memnet_run(w->net);
    for (int r = 0; r < w->n; r++) {
        GM_CHECK_EQ(w->s[r].calls, 1);
        GM_CHECK_OK(w->s[r].status);
    }
}

static void test_orthonormal(void)
{
    const size_t shapes[][2] = {{50, 4}, {6, 2}, {400, 2}, {33, 8}, {2, 2}};

    for (size_t s = 0; s < GM_ARRAY_SIZE(shapes); s++) {
        size_t n = shapes[s][0], r = shapes[s][1];
        float *m = malloc(n * r * sizeof(float));
        double worst = 0;
        for (size_t i = 0; i < n * r; i++)
            m[i] = urand() * 100.0f;
        gm_psgd_orthonormalize(m, n, r, 1e-8f);
        for (size_t a = 0; a < r; a++)
            for (size_t b = 0; b < r; b++) {
                double dot = 0;
                for (size_t i = 0; i < n; i++)
                    dot += (double)m[i * r + a] * m[i * r + b];
                dot -= a == b;
                if (fabs(dot) > worst)
                    worst = fabs(dot);
            }
        GM_CHECK(worst < 1e-5);
        free(m);
    }
    /* zero matrix: finite (zeros), no NaN */
    {
        float z[12] = {0};
        gm_psgd_orthonormalize(z, 6, 2, 1e-8f);
        for (int i = 0; i < 12; i++)
            GM_CHECK(z[i] == 0.0f);
    }
}

/* Layout used below: a 40x30 matrix, a 30-element bias (1-D), a 3x5 matrix
 * too small to gain at r=2 (2*(3+5) >= 15), and 7 floats no view covers. */
#define NEL (1200 + 30 + 15 + 7)
static const struct gm_view views[] = {{0, 40, 30}, {1200, 1, 30}, {1230, 3, 5}};

static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* mean over ranks of U_i V^T is exactly rank 2: PowerSGD must give it back. */
static void test_rank_r_recovery(void)
{
    for (int variant = 0; variant < 3; variant++) {
        const int n = 4;
        struct gm_psgd_config cfg;
        struct sim w;
        float *g[MAXW], *base[MAXW], target[NEL];
        float v[30 * 2];
        double err = 1;
        int steps_needed = -1;

        gm_psgd_config_default(&cfg);
        cfg.codec = variant == 1 ? GM_CODEC_FP16 : GM_CODEC_FP32;
        cfg.alternating = variant == 2;
        cfg.error_feedback = false;
        sim_init(&w, n, &cfg, views, GM_ARRAY_SIZE(views), NEL);
        for (size_t i = 0; i < 60; i++)
            v[i] = urand();
        memset(target, 0, sizeof(target));
        for (int r = 0; r < n; r++) {
            float u[40 * 2];
            base[r] = malloc(NEL * sizeof(float));
            g[r] = malloc(NEL * sizeof(float));
            for (size_t i = 0; i < 80; i++)
                u[i] = urand();
            for (size_t i = 0; i < 40; i++)
                for (size_t j = 0; j < 30; j++)
                    base[r][i * 30 + j] = u[i * 2] * v[j * 2] + u[i * 2 + 1] * v[j * 2 + 1];
            for (size_t i = 1200; i < NEL; i++)
                base[r][i] = urand();
            for (size_t i = 0; i < NEL; i++)
                target[i] += base[r][i] / n;
        }
        for (int step = 0; step < 4; step++) {
            for (int r = 0; r < n; r++)
                memcpy(g[r], base[r], NEL * sizeof(float));
            sim_step(&w, g, (uint64_t)step);
            for (int r = 1; r < n; r++)
                GM_CHECK(memcmp(g[0], g[r], NEL * sizeof(float)) == 0);
            err = rel_err(g[0], target, 1200);
            if (steps_needed < 0 && err < (variant == 1 ? 2e-3 : 1e-4))
                steps_needed = step + 1;
            /* dense parts: plain mean */
            GM_CHECK(rel_err(g[0] + 1200, target + 1200, NEL - 1200) < 2e-3);
        }
        GM_CHECK(steps_needed >= 1 && steps_needed <= 3);
        for (int r = 0; r < n; r++) {
            free(g[r]);
            free(base[r]);
        }
        sim_free(&w);
    }
}

/* Error feedback telescopes: sum_t out_t + E_T = sum_t G_t (matrix entries).
 * Per rank that holds for compressed steps; a dense warm-up step outputs the
 * mean, so over ranks: sum_t out_t + mean_i E_T^i = sum_t mean_i G_t^i. */
static void test_error_feedback_telescopes(void)
{
    for (int variant = 0; variant < 4; variant++) {
        const int n = 3, T = 6, alt = variant & 1, warm = variant >> 1;
        struct gm_psgd_config cfg;
        struct sim w;
        float *g[MAXW];
        double *sum_in[MAXW], *sum_out[MAXW];

        gm_psgd_config_default(&cfg);
        cfg.alternating = alt;
        /* a warm-up step's output is the wire-rounded mean: exact only in fp32 */
        cfg.warmup_steps = (uint64_t)warm;
        cfg.codec = warm ? GM_CODEC_FP32 : GM_CODEC_FP16;
        sim_init(&w, n, &cfg, views, GM_ARRAY_SIZE(views), NEL);
        for (int r = 0; r < n; r++) {
            g[r] = malloc(NEL * sizeof(float));
            sum_in[r] = calloc(NEL, sizeof(double));
            sum_out[r] = calloc(NEL, sizeof(double));
        }
        for (int t = 0; t < T; t++) {
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < NEL; i++) {
                    g[r][i] = urand();
                    sum_in[r][i] += g[r][i];
                }
            sim_step(&w, g, (uint64_t)t);
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < NEL; i++)
                    sum_out[r][i] += g[r][i];
        }
        {
            double worst = 0;
            for (size_t i = 0; i < 1200; i++) {
                double lhs = sum_out[0][i], rhs = 0;
                for (int r = 0; r < n; r++) {
                    lhs += gm_psgd_error(w.p[r])[i] / n;
                    rhs += sum_in[r][i] / n;
                }
                if (fabs(lhs - rhs) > worst)
                    worst = fabs(lhs - rhs);
            }
            GM_CHECK_NEAR(worst, 0, 1e-5, 0);
        }
        for (int r = 0; r < n && !warm; r++) { /* and per rank */
            double worst = 0;
            for (size_t i = 0; i < 1200; i++) {
                double d = fabs(sum_out[r][i] + gm_psgd_error(w.p[r])[i] - sum_in[r][i]);
                if (d > worst)
                    worst = d;
            }
            GM_CHECK_NEAR(worst, 0, 1e-5, 0);
        }
        for (int r = 0; r < n; r++) {
            free(g[r]);
            free(sum_in[r]);
            free(sum_out[r]);
        }
        sim_free(&w);
    }
}

/* An all-zero layer: finite (zero) output, and the next real gradient still
 * gets through (zero factors are redrawn, not kept). */
static void test_zero_layer(void)
{
    const int n = 2;
    struct gm_psgd_config cfg;
    struct sim w;
    float *g[MAXW];

    gm_psgd_config_default(&cfg);
    sim_init(&w, n, &cfg, views, GM_ARRAY_SIZE(views), NEL);
    for (int r = 0; r < n; r++)
        g[r] = calloc(NEL, sizeof(float));
    for (int t = 0; t < 3; t++) {
        for (int r = 0; r < n; r++)
            memset(g[r], 0, NEL * sizeof(float));
        sim_step(&w, g, (uint64_t)t);
        for (size_t i = 0; i < NEL; i++)
            GM_CHECK(g[0][i] == 0.0f);
    }
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < NEL; i++)
            g[r][i] = 1.0f; /* rank 1: recovered exactly */
    sim_step(&w, g, 3);
    GM_CHECK_NEAR(g[0][0], 1.0f, 1e-2, 0);
    GM_CHECK_NEAR(g[1][1199], 1.0f, 1e-2, 0);
    for (int r = 0; r < n; r++)
        free(g[r]);
    sim_free(&w);
}

/* Payload per step by formula = floats handed to the collective, and the ring
 * really sent 2(N-1) * floats * 2 bytes (fp16) summed over ranks. */
static void test_payload_formula(void)
{
    /* LeNet-5-like: conv1 6x25, b6, conv2 16x150, b16, fc 120x400, b120,
     * 84x120, b84, 10x84, b10 */
    const struct gm_view lv[] = {
        {0, 6, 25},      {150, 6, 1},      {156, 16, 150}, {2556, 16, 1},   {2572, 120, 400},
        {50572, 120, 1}, {50692, 84, 120}, {60772, 84, 1}, {60856, 10, 84}, {61696, 10, 1}};
    const size_t nel = 61706;
    const size_t mats[][2] = {{6, 25}, {16, 150}, {120, 400}, {84, 120}, {10, 84}};
    const size_t dense = 6 + 16 + 120 + 84 + 10;

    for (int alt = 0; alt < 2; alt++) {
        const int n = 3;
        struct gm_psgd_config cfg;
        struct sim w;
        float *g[MAXW];
        size_t sp = 0, sq = 0;

        gm_psgd_config_default(&cfg);
        cfg.warmup_steps = 2;
        cfg.alternating = alt;
        cfg.algo = GM_COLL_RING;
        for (size_t i = 0; i < GM_ARRAY_SIZE(mats); i++) {
            sp += 2 * mats[i][0];
            sq += 2 * mats[i][1];
        }
        sim_init(&w, n, &cfg, lv, GM_ARRAY_SIZE(lv), nel);
        GM_CHECK_EQ(gm_psgd_matrices(w.p[0]), 5);
        GM_CHECK_EQ(gm_psgd_dense_floats(w.p[0]), dense);
        for (int r = 0; r < n; r++) {
            g[r] = malloc(nel * sizeof(float));
        }
        for (uint64_t t = 0; t < 6; t++) {
            size_t want = t < 2  ? nel
                          : !alt ? sp + sq + dense
                                 : ((t - 2) % 2 == 0 ? sp : sq) + dense;
            uint64_t bytes = 0;
            GM_CHECK_EQ(gm_psgd_payload_floats(w.p[0], t), want);
            for (int r = 0; r < n; r++) {
                for (size_t i = 0; i < nel; i++)
                    g[r][i] = urand() * 0.01f;
                gm_coll_traffic_reset(w.c[r]);
            }
            sim_step(&w, g, t);
            for (int r = 0; r < n; r++) {
                struct gm_coll_traffic s;
                GM_CHECK_EQ(gm_psgd_last_payload_floats(w.p[r]), want);
                gm_coll_traffic_codec(w.c[r], GM_CODEC_FP16, &s, NULL);
                bytes += s.payload_bytes;
                GM_CHECK(memcmp(g[0], g[r], nel * sizeof(float)) == 0);
            }
            GM_CHECK_EQ(bytes, 2 * (uint64_t)(n - 1) * want * 2);
        }
        /* steady state: >= 50x fewer floats than dense fp32 at rank 2 in fp16 */
        GM_CHECK(nel * 4 >= 50 * 2 * gm_psgd_payload_floats(w.p[0], 5));
        for (int r = 0; r < n; r++)
            free(g[r]);
        sim_free(&w);
    }
}

static void test_contracts(void)
{
    struct gm_psgd_config cfg;
    struct gm_psgd *p = (struct gm_psgd *)&cfg;
    const struct gm_view overlap[] = {{0, 4, 4}, {10, 4, 4}};
    const struct gm_view oob[] = {{90, 4, 4}};

    gm_psgd_config_default(&cfg);
    GM_CHECK_ERR(gm_psgd_new(&cfg, overlap, 2, 100, &p), -EINVAL);
    GM_CHECK(p == NULL);
    GM_CHECK_ERR(gm_psgd_new(&cfg, oob, 1, 100, &p), -EINVAL);
    cfg.rank = 0;
    GM_CHECK_ERR(gm_psgd_new(&cfg, NULL, 0, 100, &p), -EINVAL);
    gm_psgd_free(NULL);
}

int main(void)
{
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_orthonormal);
    GM_TEST_RUN(test_rank_r_recovery);
    GM_TEST_RUN(test_error_feedback_telescopes);
    GM_TEST_RUN(test_zero_layer);
    GM_TEST_RUN(test_payload_formula);
    return gm_test_finish("test_powersgd");
}
