/*
 * train/kernels/kfn_bn.h - batch normalization's kernel bodies (train/kernels/batchnorm.h's
 * semantics), written once for the GPU kernels of train/kernels/layers.cu and their host twins
 * (train/kernels/layers_host.c), under kfn.h's rules.
 *
 * Why not cuDNN: its batch norm sees NHWC activations as (rows, C, 1, 1), and for that shape
 * it runs its NCHW "C11" kernels.  On an H200, ResNet-20 at batch 128 (131,072 rows of 16
 * channels) spent 4.9 ms in each of them forward and 2.4 ms backward (timed one kernel at a
 * time by Nsight Compute): 87% of the GPU's time; the job trained at 1,437 samples/s, 0.11x
 * PyTorch on the same GPU.  With these kernels: 18,989 samples/s (docs/BENCHMARKS.md).
 *
 * Here every per-channel sum is a tree of fixed shape, in double like the CPU's:
 * - gm_kbody_bn_sum: thread t = (part p, channel ch) adds rows p*GM_KBN_CHUNK ..
 *   (p+1)*GM_KBN_CHUNK - 1 of one quantity (x; (x - mean)^2; dy; dy * xhat; or the partial
 *   sums of the level below) in order;
 * - the levels repeat until one part is left (gm_kbn_parts), so the order of the additions
 *   depends on rows alone: deterministic, whatever the grid;
 * - per-channel finishing bodies and an element-wise apply, with the CPU's formulas and
 *   roundings (batchnorm_cpu.c), so the result equals the CPU's but for the order of the
 *   double additions (bit for bit in practice: tests/unit/test_kernels_host.c).
 * The driver that strings them together (gm_kbn_forward, gm_kbn_backward, below) is shared;
 * it hands each step to a runner, written twice: kernel launches in layers.cu, loops over a
 * simulated grid in layers_host.c.  Its scratch layout is gm_kbn_scratch_doubles's.
 */
#ifndef GM_TRAIN_KERNELS_KFN_BN_H
#define GM_TRAIN_KERNELS_KFN_BN_H

#include "train/kernels/kfn.h"

#define GM_KBN_CHUNK 32 /* rows (or partial sums) one thread adds */

/* what gm_kbody_bn_sum adds */
enum { GM_KBN_X, GM_KBN_SQ, GM_KBN_DY, GM_KBN_DYXHAT, GM_KBN_PART };

struct gm_kbn_in {
    const float *x, *dy;
    const double *dmean;     /* GM_KBN_SQ: the mean in double */
    const float *mean, *inv; /* GM_KBN_DYXHAT: the saved mean and inverse deviation */
    const double *part;      /* GM_KBN_PART: the level below, (rows, c) */
};

/* Parts of rows at one level. */
GM_KFN size_t gm_kbn_parts(size_t rows)
{
    return (rows + GM_KBN_CHUNK - 1) / GM_KBN_CHUNK;
}

/* Scratch for rows x c, in doubles: level buffers A (parts(rows) x c) and B
 * (parts(parts(rows)) x c; later levels alternate between the two, each smaller than the
 * one before), two sums and the double mean (c each), then 3c floats of per-channel
 * factors (2c doubles). */
GM_KFN size_t gm_kbn_scratch_doubles(size_t rows, int c)
{
    return (gm_kbn_parts(rows) + gm_kbn_parts(gm_kbn_parts(rows)) + 5) * (size_t)c;
}

/* out[p*c + ch] = the sum over the rows of part p of the mode's quantity. */
GM_KFN void gm_kbody_bn_sum(struct gm_kgrid g, size_t rows, int c, int mode, struct gm_kbn_in in,
                            double *GM_KRESTRICT out)
{
    const size_t total = gm_kbn_parts(rows) * (size_t)c;

    for (size_t t = gm_kgrid_first(g); t < total; t += gm_kgrid_stride(g)) {
        const size_t p = t / (size_t)c, r0 = p * GM_KBN_CHUNK;
        const int ch = (int)(t % (size_t)c);
        const size_t r1 = r0 + GM_KBN_CHUNK < rows ? r0 + GM_KBN_CHUNK : rows;
        double acc = 0.0;

        for (size_t r = r0; r < r1; r++) {
            const size_t i = r * (size_t)c + (size_t)ch;
            double v;
            if (mode == GM_KBN_X) {
                v = (double)in.x[i];
            } else if (mode == GM_KBN_SQ) {
                const double d = (double)in.x[i] - in.dmean[ch];
                v = d * d;
            } else if (mode == GM_KBN_DY) {
                v = (double)in.dy[i];
            } else if (mode == GM_KBN_DYXHAT) {
                v = (double)in.dy[i] * (double)((in.x[i] - in.mean[ch]) * in.inv[ch]);
            } else {
                v = in.part[i];
            }
            acc += v;
        }
        out[t] = acc;
    }
}

/* dmean = sum / rows */
GM_KFN void gm_kbody_bn_mean(struct gm_kgrid g, size_t rows, int c, const double *GM_KRESTRICT sum,
                             double *GM_KRESTRICT dmean)
{
    for (size_t ch = gm_kgrid_first(g); ch < (size_t)c; ch += gm_kgrid_stride(g))
        dmean[ch] = sum[ch] / (double)rows;
}

/* Training statistics from the mean and the centred squares: saved values, running
 * averages, and y's per-channel scale and shift. */
GM_KFN void gm_kbody_bn_stats(struct gm_kgrid g, size_t rows, int c, float momentum, float eps,
                              const double *GM_KRESTRICT dmean, const double *GM_KRESTRICT sq,
                              const float *GM_KRESTRICT gamma, const float *GM_KRESTRICT beta,
                              float *GM_KRESTRICT running_mean, float *GM_KRESTRICT running_var,
                              float *GM_KRESTRICT save_mean, float *GM_KRESTRICT save_invstd,
                              float *GM_KRESTRICT scale, float *GM_KRESTRICT shift)
{
    for (size_t ch = gm_kgrid_first(g); ch < (size_t)c; ch += gm_kgrid_stride(g)) {
        const double mean = dmean[ch], var = sq[ch] / (double)rows;
        const double invstd = 1.0 / sqrt(var + (double)eps);
        save_mean[ch] = (float)mean;
        save_invstd[ch] = (float)invstd;
        running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
        if (rows > 1)
            running_var[ch] = (float)((1.0 - momentum) * running_var[ch] +
                                      momentum * var * (double)rows / (double)(rows - 1));
        scale[ch] = (float)(invstd * gamma[ch]);
        shift[ch] = (float)(beta[ch] - mean * invstd * gamma[ch]);
    }
}

/* Evaluation: scale and shift from the running statistics. */
GM_KFN void gm_kbody_bn_eval(struct gm_kgrid g, int c, float eps, const float *GM_KRESTRICT gamma,
                             const float *GM_KRESTRICT beta, const float *GM_KRESTRICT running_mean,
                             const float *GM_KRESTRICT running_var, float *GM_KRESTRICT scale,
                             float *GM_KRESTRICT shift)
{
    for (size_t ch = gm_kgrid_first(g); ch < (size_t)c; ch += gm_kgrid_stride(g)) {
        const double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
        scale[ch] = (float)(invstd * gamma[ch]);
        shift[ch] = (float)(beta[ch] - running_mean[ch] * invstd * gamma[ch]);
    }
}

/* y = x * scale + shift, element-wise (two roundings: no fused multiply-add). */
GM_KFN void gm_kbody_bn_apply(struct gm_kgrid g, size_t rows, int c, const float *GM_KRESTRICT x,
                              const float *GM_KRESTRICT scale, const float *GM_KRESTRICT shift,
                              float *GM_KRESTRICT y)
{
    const size_t total = rows * (size_t)c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const size_t ch = i % (size_t)c;
        y[i] = x[i] * scale[ch] + shift[ch];
    }
}

/* Backward, per channel: dbeta, dgamma, and dx's factors k = gamma*invstd, a = sum dy / rows,
 * b = sum dy*xhat / rows. */
GM_KFN void gm_kbody_bn_grads(struct gm_kgrid g, size_t rows, int c,
                              const float *GM_KRESTRICT gamma, const float *GM_KRESTRICT inv,
                              const double *GM_KRESTRICT sdy, const double *GM_KRESTRICT sdyx,
                              float *GM_KRESTRICT dgamma, float *GM_KRESTRICT dbeta,
                              float *GM_KRESTRICT k, float *GM_KRESTRICT a, float *GM_KRESTRICT b)
{
    for (size_t ch = gm_kgrid_first(g); ch < (size_t)c; ch += gm_kgrid_stride(g)) {
        dbeta[ch] = (float)sdy[ch];
        dgamma[ch] = (float)sdyx[ch];
        k[ch] = gamma[ch] * inv[ch];
        a[ch] = (float)(sdy[ch] / (double)rows);
        b[ch] = (float)(sdyx[ch] / (double)rows);
    }
}

/* dx = k * (dy - a - xhat * b), element-wise. */
GM_KFN void gm_kbody_bn_dx(struct gm_kgrid g, size_t rows, int c, const float *GM_KRESTRICT x,
                           const float *GM_KRESTRICT dy, const float *GM_KRESTRICT mean,
                           const float *GM_KRESTRICT inv, const float *GM_KRESTRICT k,
                           const float *GM_KRESTRICT a, const float *GM_KRESTRICT b,
                           float *GM_KRESTRICT dx)
{
    const size_t total = rows * (size_t)c;

    for (size_t i = gm_kgrid_first(g); i < total; i += gm_kgrid_stride(g)) {
        const size_t ch = i % (size_t)c;
        const float xhat = (x[i] - mean[ch]) * inv[ch];
        dx[i] = k[ch] * (dy[i] - a[ch] - xhat * b[ch]);
    }
}

/* ---- the driver, shared by the GPU (layers.cu) and the host twins (layers_host.c) ---- */

/* One batch norm call: the op table's arguments and the scratch (gm_kbn_scratch_doubles). */
struct gm_kbn {
    size_t rows;
    int c, train;
    float momentum, eps;
    const float *x, *dy, *gamma, *beta;
    float *running_mean, *running_var, *save_mean, *save_invstd, *y;
    float *dgamma, *dbeta, *dx;
    double *scratch;
};

enum {
    GM_KBN_STEP_SUM,
    GM_KBN_STEP_MEAN,
    GM_KBN_STEP_STATS,
    GM_KBN_STEP_EVAL,
    GM_KBN_STEP_APPLY,
    GM_KBN_STEP_GRADS,
    GM_KBN_STEP_DX
};

/* A step's own arguments: a sum level (rows, mode, in, out) or the per-channel buffers. */
struct gm_kbn_step {
    int step, mode;
    size_t rows;
    struct gm_kbn_in in;
    double *out;
    const double *s1, *s2; /* MEAN: s1; STATS: dmean s1, sq s2; GRADS: sdy s1, sdyx s2 */
    double *dmean;
    float *f0, *f1, *f2; /* scale, shift (STATS, EVAL, APPLY); k, a, b (GRADS, DX) */
};

/* Runs one step on the device or the host: 0 or a negative error. */
typedef int (*gm_kbn_runner)(void *ctx, const struct gm_kbn *b, const struct gm_kbn_step *s);

/* Per-channel sum of mode's quantity over b->rows rows into dst (c doubles), level by level
 * through the scratch's A and B. */
static inline int gm_kbn_sum(const struct gm_kbn *b, gm_kbn_runner run, void *ctx, int mode,
                             struct gm_kbn_in in, double *dst)
{
    double *lv[2];
    struct gm_kbn_step s;
    int err, which = 0;

    lv[0] = b->scratch;
    lv[1] = b->scratch + gm_kbn_parts(b->rows) * (size_t)b->c;
    memset(&s, 0, sizeof(s));
    s.step = GM_KBN_STEP_SUM;
    s.mode = mode;
    s.rows = b->rows;
    s.in = in;
    for (;;) {
        const size_t parts = gm_kbn_parts(s.rows);
        s.out = parts == 1 ? dst : lv[which];
        if ((err = run(ctx, b, &s)) < 0 || parts == 1)
            return err;
        s.mode = GM_KBN_PART;
        s.in.part = s.out;
        s.rows = parts;
        which ^= 1;
    }
}

/* The scratch's regions after the level buffers. */
static inline double *gm_kbn_tail(const struct gm_kbn *b)
{
    return b->scratch +
           (gm_kbn_parts(b->rows) + gm_kbn_parts(gm_kbn_parts(b->rows))) * (size_t)b->c;
}

/* batchnorm.h's forward: rows > 0. */
static inline int gm_kbn_forward(const struct gm_kbn *b, gm_kbn_runner run, void *ctx)
{
    double *t = gm_kbn_tail(b), *s1 = t, *s2 = t + b->c, *dmean = t + 2 * b->c;
    float *scale = (float *)(t + 3 * b->c), *shift = scale + b->c;
    struct gm_kbn_in in;
    struct gm_kbn_step s;
    int err;

    memset(&in, 0, sizeof(in));
    memset(&s, 0, sizeof(s));
    in.x = b->x;
    s.f0 = scale;
    s.f1 = shift;
    if (b->train) {
        if ((err = gm_kbn_sum(b, run, ctx, GM_KBN_X, in, s1)) < 0)
            return err;
        s.step = GM_KBN_STEP_MEAN;
        s.s1 = s1;
        s.dmean = dmean;
        if ((err = run(ctx, b, &s)) < 0)
            return err;
        in.dmean = dmean;
        if ((err = gm_kbn_sum(b, run, ctx, GM_KBN_SQ, in, s2)) < 0)
            return err;
        s.step = GM_KBN_STEP_STATS;
        s.s1 = dmean;
        s.s2 = s2;
    } else {
        s.step = GM_KBN_STEP_EVAL;
    }
    if ((err = run(ctx, b, &s)) < 0)
        return err;
    s.step = GM_KBN_STEP_APPLY;
    return run(ctx, b, &s);
}

/* batchnorm.h's backward (dx may be NULL): rows > 0. */
static inline int gm_kbn_backward(const struct gm_kbn *b, gm_kbn_runner run, void *ctx)
{
    double *t = gm_kbn_tail(b), *s1 = t, *s2 = t + b->c;
    float *k = (float *)(t + 3 * b->c), *fa = k + b->c, *fb = fa + b->c;
    struct gm_kbn_in in;
    struct gm_kbn_step s;
    int err;

    memset(&in, 0, sizeof(in));
    memset(&s, 0, sizeof(s));
    in.x = b->x;
    in.dy = b->dy;
    in.mean = b->save_mean;
    in.inv = b->save_invstd;
    if ((err = gm_kbn_sum(b, run, ctx, GM_KBN_DY, in, s1)) < 0 ||
        (err = gm_kbn_sum(b, run, ctx, GM_KBN_DYXHAT, in, s2)) < 0)
        return err;
    s.step = GM_KBN_STEP_GRADS;
    s.s1 = s1;
    s.s2 = s2;
    s.f0 = k;
    s.f1 = fa;
    s.f2 = fb;
    if ((err = run(ctx, b, &s)) < 0 || b->dx == NULL)
        return err;
    s.step = GM_KBN_STEP_DX;
    return run(ctx, b, &s);
}

#endif
