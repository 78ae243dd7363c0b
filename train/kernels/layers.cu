/*
 * train/kernels/layers.cu - the layer kernels the CUDA op table (train/nn/ops_cuda.c) needs where
 * the op table's contract leaves no library call that fits: max pooling with the CPU's argmax bytes
 * and fused ReLU (the table's backward gets dy and the argmax only, while cuDNN's pooling backward
 * needs x and y); dropout with the CPU's counter-based mask (same seed, same mask on every device);
 *   ResNet's option-A shortcut (strided subsample + channel zero-padding).
 * One thread per output element (backward: per input element, so every dx element is
 * written and nothing needs atomics); 64-bit indices; 256 threads a block, grid-stride
 * loops.  Semantics are train/kernels/maxpool.h, act.h and resid.h; tests/unit/test_cuda_ops.c
 * checks them against the CPU table where a GPU answers.  The torchvision families' layers
 * (ReLU6, padded/strided max pooling, adaptive average pooling) call per-element bodies from
 * kfn_layers.h, whose host twins CI checks bit for bit against the CPU.
 */
#include "train/kernels/cuda_ctx.h"
#include "train/kernels/kfn_bn.h"
#include "train/kernels/kfn_layers.h"
#include "train/kernels/layers_cuda.h"
#include "train/kernels/maxpool.h"

namespace
{

constexpr unsigned kThreads = 256;

unsigned blocks_for(size_t n)
{
    return gm_cuda_blocks(n, kThreads, 8192);
}

/* Position of flat index i in an (N, H, W, C) array. */
struct nhwc {
    int b, y, x, q;
};

__device__ inline nhwc nhwc_at(size_t i, int h, int w, int c)
{
    nhwc p;
    p.q = (int)(i % c);
    i /= c;
    p.x = (int)(i % w);
    i /= w;
    p.y = (int)(i % h);
    p.b = (int)(i / h);
    return p;
}

#define GRID_LOOP(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void k_maxpool_fwd(int n, int h, int w, int c, int k, int relu, const float *x, float *y,
                              uint8_t *arg)
{
    const int oh = h / k, ow = w / k;
    const size_t total = (size_t)n * oh * ow * c;
    const float floor_v = relu ? 0.0f : -INFINITY;

    GRID_LOOP(i, total)
    {
        const nhwc o = nhwc_at(i, oh, ow, c);
        const int q = o.q, ox = o.x, oy = o.y, b = o.b;
        float m = -INFINITY;
        int best = 0;
        for (int dy = 0; dy < k; dy++)
            for (int dx = 0; dx < k; dx++) {
                const float v =
                    x[(((size_t)b * h + (size_t)oy * k + dy) * w + (size_t)ox * k + dx) * c + q];
                if ((dy == 0 && dx == 0) || v > m) { /* first maximum on ties */
                    m = v;
                    best = dy * k + dx;
                }
            }
        const int keep = m > floor_v;
        y[i] = relu ? (m > 0.0f ? m : 0.0f) : m;
        arg[i] = keep ? (uint8_t)best : (uint8_t)GM_MAXPOOL_NONE;
    }
}

__global__ void k_maxpool_bwd(int n, int h, int w, int c, int k, const float *dy,
                              const uint8_t *arg, float *dx)
{
    const int oh = h / k, ow = w / k;
    const size_t total = (size_t)n * h * w * c;

    GRID_LOOP(i, total)
    {
        const nhwc o = nhwc_at(i, h, w, c);
        const int q = o.q, xx = o.x, yy = o.y, b = o.b;
        const int oy = yy / k, ox = xx / k;
        float v = 0.0f;
        if (oy < oh && ox < ow) {
            const size_t o = (((size_t)b * oh + oy) * ow + ox) * c + q;
            if (arg[o] == (uint8_t)((yy - oy * k) * k + (xx - ox * k)))
                v = dy[o];
        }
        dx[i] = v;
    }
}

__device__ inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void k_dropout_fwd(size_t n, float keep_scale, uint32_t threshold, uint64_t seed,
                              const float *x, float *mask, float *y)
{
    GRID_LOOP(i, n)
    {
        const uint32_t r = (uint32_t)(mix64(seed ^ (i * 0xd1b54a32d192ed03ull)) >> 40);
        const float mk = r >= threshold ? keep_scale : 0.0f;
        mask[i] = mk;
        y[i] = x[i] * mk;
    }
}

__global__ void k_mul(size_t n, const float *a, const float *b, float *y)
{
    GRID_LOOP(i, n)
    y[i] = a[i] * b[i];
}

__global__ void k_shortcut_fwd(int n, int h, int w, int c, int oc, int stride, const float *x,
                               float *y)
{
    const int oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride, p = (oc - c) / 2;
    const size_t total = (size_t)n * oh * ow * oc;

    GRID_LOOP(i, total)
    {
        const nhwc o = nhwc_at(i, oh, ow, oc);
        const int q = o.q, ox = o.x, oy = o.y, b = o.b;
        const int ch = q - p;
        y[i] = ch >= 0 && ch < c
                   ? x[(((size_t)b * h + (size_t)oy * stride) * w + (size_t)ox * stride) * c + ch]
                   : 0.0f;
    }
}

__global__ void k_shortcut_bwd(int n, int h, int w, int c, int oc, int stride, const float *dy,
                               float *dx)
{
    const int oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride, p = (oc - c) / 2;
    const size_t total = (size_t)n * h * w * c;

    GRID_LOOP(i, total)
    {
        const nhwc o = nhwc_at(i, h, w, c);
        const int q = o.q, xx = o.x, yy = o.y, b = o.b;
        float v = 0.0f;
        if (yy % stride == 0 && xx % stride == 0)
            v = dy[(((size_t)b * oh + yy / stride) * ow + xx / stride) * oc + q + p];
        dx[i] = v;
    }
}

/* ---- the torchvision families' layers: bodies in kfn_layers.h (host twins tested in CI) ---- */

__device__ inline gm_kgrid here()
{
    gm_kgrid g;
    g.block = blockIdx.x;
    g.blocks = gridDim.x;
    g.thread = threadIdx.x;
    g.threads = blockDim.x;
    return g;
}

__global__ void k_relu6_fwd(size_t n, const float *x, float *y)
{
    gm_kbody_relu6_fwd(here(), n, x, y);
}

__global__ void k_relu6_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    gm_kbody_relu6_bwd(here(), n, y, dy, dx);
}

__global__ void k_maxpool2d_fwd(gm_pool2d_shape s, int relu, const float *x, float *y, uint8_t *arg)
{
    gm_kbody_maxpool2d_fwd(here(), s.n, s.h, s.w, s.c, s.k, s.stride, s.pad, s.oh, s.ow, relu, x, y,
                           arg);
}

__global__ void k_maxpool2d_bwd(gm_pool2d_shape s, const float *dy, const uint8_t *arg, float *dx)
{
    gm_kbody_maxpool2d_bwd(here(), s.n, s.h, s.w, s.c, s.k, s.stride, s.pad, s.oh, s.ow, dy, arg,
                           dx);
}

__global__ void k_adapool_fwd(int n, int h, int w, int c, int oh, int ow, const float *x, float *y)
{
    gm_kbody_adapool_fwd(here(), n, h, w, c, oh, ow, x, y);
}

__global__ void k_adapool_bwd(int n, int h, int w, int c, int oh, int ow, const float *dy,
                              float *dx)
{
    gm_kbody_adapool_bwd(here(), n, h, w, c, oh, ow, dy, dx);
}

/* ---- batch norm: bodies and driver in kfn_bn.h (host twins tested in CI) ---- */

__global__ void k_bn_sum(size_t rows, int c, int mode, gm_kbn_in in, double *out)
{
    gm_kbody_bn_sum(here(), rows, c, mode, in, out);
}

__global__ void k_bn_mean(size_t rows, int c, const double *sum, double *dmean)
{
    gm_kbody_bn_mean(here(), rows, c, sum, dmean);
}

__global__ void k_bn_stats(gm_kbn b, const double *dmean, const double *sq, float *scale,
                           float *shift)
{
    gm_kbody_bn_stats(here(), b.rows, b.c, b.momentum, b.eps, dmean, sq, b.gamma, b.beta,
                      b.running_mean, b.running_var, b.save_mean, b.save_invstd, scale, shift);
}

__global__ void k_bn_eval(gm_kbn b, float *scale, float *shift)
{
    gm_kbody_bn_eval(here(), b.c, b.eps, b.gamma, b.beta, b.running_mean, b.running_var, scale,
                     shift);
}

__global__ void k_bn_apply(gm_kbn b, const float *scale, const float *shift)
{
    gm_kbody_bn_apply(here(), b.rows, b.c, b.x, scale, shift, b.y);
}

__global__ void k_bn_grads(gm_kbn b, const double *sdy, const double *sdyx, float *k, float *fa,
                           float *fb)
{
    gm_kbody_bn_grads(here(), b.rows, b.c, b.gamma, b.save_invstd, sdy, sdyx, b.dgamma, b.dbeta, k,
                      fa, fb);
}

__global__ void k_bn_dx(gm_kbn b, const float *k, const float *fa, const float *fb)
{
    gm_kbody_bn_dx(here(), b.rows, b.c, b.x, b.dy, b.save_mean, b.save_invstd, k, fa, fb, b.dx);
}

int launched(gm_cuda *cu, const char *what)
{
    return gm_cuda_check_rt(cu, cudaGetLastError(), what);
}

} // namespace

extern "C" int gm_maxpool_forward_cuda(gm_cuda *cu, int n, int h, int w, int c, int k, int relu,
                                       const float *x, float *y, uint8_t *arg)
{
    const size_t total = (size_t)n * (h / k) * (w / k) * c;
    if (total == 0)
        return 0;
    k_maxpool_fwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, k, relu, x, y, arg);
    return launched(cu, "kernel maxpool_forward");
}

extern "C" int gm_maxpool_backward_cuda(gm_cuda *cu, int n, int h, int w, int c, int k,
                                        const float *dy, const uint8_t *arg, float *dx)
{
    const size_t total = (size_t)n * h * w * c;
    if (total == 0)
        return 0;
    k_maxpool_bwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, k, dy, arg, dx);
    return launched(cu, "kernel maxpool_backward");
}

extern "C" int gm_dropout_forward_cuda(gm_cuda *cu, size_t n, float p, uint64_t seed,
                                       const float *x, float *mask, float *y)
{
    /* the CPU's scalars (act_cpu.c), computed the same way on the host */
    const float keep_scale = 1.0f / (1.0f - p);
    const uint32_t threshold = (uint32_t)((double)p * 16777216.0);
    if (n == 0)
        return 0;
    k_dropout_fwd<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, keep_scale, threshold, seed, x,
                                                               mask, y);
    return launched(cu, "kernel dropout_forward");
}

extern "C" int gm_dropout_backward_cuda(gm_cuda *cu, size_t n, const float *mask, const float *dy,
                                        float *dx)
{
    if (n == 0)
        return 0;
    k_mul<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, dy, mask, dx);
    return launched(cu, "kernel dropout_backward");
}

extern "C" int gm_shortcut_forward_cuda(gm_cuda *cu, int n, int h, int w, int c, int oc, int stride,
                                        const float *x, float *y)
{
    const size_t total = (size_t)n * ((h + stride - 1) / stride) * ((w + stride - 1) / stride) * oc;
    if (total == 0)
        return 0;
    k_shortcut_fwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, oc, stride, x, y);
    return launched(cu, "kernel shortcut_forward");
}

extern "C" int gm_shortcut_backward_cuda(gm_cuda *cu, int n, int h, int w, int c, int oc,
                                         int stride, const float *dy, float *dx)
{
    const size_t total = (size_t)n * h * w * c;
    if (total == 0)
        return 0;
    k_shortcut_bwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, oc, stride, dy, dx);
    return launched(cu, "kernel shortcut_backward");
}

extern "C" int gm_relu6_forward_cuda(gm_cuda *cu, size_t n, const float *x, float *y)
{
    if (n == 0)
        return 0;
    k_relu6_fwd<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, x, y);
    return launched(cu, "kernel relu6_forward");
}

extern "C" int gm_relu6_backward_cuda(gm_cuda *cu, size_t n, const float *y, const float *dy,
                                      float *dx)
{
    if (n == 0)
        return 0;
    k_relu6_bwd<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, y, dy, dx);
    return launched(cu, "kernel relu6_backward");
}

extern "C" int gm_maxpool2d_forward_cuda(gm_cuda *cu, const gm_pool2d_shape *s, int relu,
                                         const float *x, float *y, uint8_t *arg)
{
    const size_t total = (size_t)s->n * s->oh * s->ow * s->c;
    if (total == 0)
        return 0;
    k_maxpool2d_fwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(*s, relu, x, y, arg);
    return launched(cu, "kernel maxpool2d_forward");
}

extern "C" int gm_maxpool2d_backward_cuda(gm_cuda *cu, const gm_pool2d_shape *s, const float *dy,
                                          const uint8_t *arg, float *dx)
{
    const size_t total = (size_t)s->n * s->h * s->w * s->c;
    if (total == 0)
        return 0;
    k_maxpool2d_bwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(*s, dy, arg, dx);
    return launched(cu, "kernel maxpool2d_backward");
}

extern "C" int gm_adapool_forward_cuda(gm_cuda *cu, int n, int h, int w, int c, int oh, int ow,
                                       const float *x, float *y)
{
    const size_t total = (size_t)n * oh * ow * c;
    if (total == 0)
        return 0;
    k_adapool_fwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, oh, ow, x, y);
    return launched(cu, "kernel adaptive_avgpool_forward");
}

extern "C" int gm_adapool_backward_cuda(gm_cuda *cu, int n, int h, int w, int c, int oh, int ow,
                                        const float *dy, float *dx)
{
    const size_t total = (size_t)n * h * w * c;
    if (total == 0)
        return 0;
    k_adapool_bwd<<<blocks_for(total), kThreads, 0, cu->compute>>>(n, h, w, c, oh, ow, dy, dx);
    return launched(cu, "kernel adaptive_avgpool_backward");
}

/* One kfn_bn.h step as a kernel on the compute stream. */
static int bn_run(void *ctx, const gm_kbn *b, const gm_kbn_step *st)
{
    gm_cuda *cu = (gm_cuda *)ctx;
    const size_t cc = (size_t)b->c;

    switch (st->step) {
    case GM_KBN_STEP_SUM:
        k_bn_sum<<<blocks_for(gm_kbn_parts(st->rows) * cc), kThreads, 0, cu->compute>>>(
            st->rows, b->c, st->mode, st->in, st->out);
        break;
    case GM_KBN_STEP_MEAN:
        k_bn_mean<<<blocks_for(cc), kThreads, 0, cu->compute>>>(b->rows, b->c, st->s1, st->dmean);
        break;
    case GM_KBN_STEP_STATS:
        k_bn_stats<<<blocks_for(cc), kThreads, 0, cu->compute>>>(*b, st->s1, st->s2, st->f0,
                                                                 st->f1);
        break;
    case GM_KBN_STEP_EVAL:
        k_bn_eval<<<blocks_for(cc), kThreads, 0, cu->compute>>>(*b, st->f0, st->f1);
        break;
    case GM_KBN_STEP_APPLY:
        k_bn_apply<<<blocks_for(b->rows * cc), kThreads, 0, cu->compute>>>(*b, st->f0, st->f1);
        break;
    case GM_KBN_STEP_GRADS:
        k_bn_grads<<<blocks_for(cc), kThreads, 0, cu->compute>>>(*b, st->s1, st->s2, st->f0, st->f1,
                                                                 st->f2);
        break;
    default:
        k_bn_dx<<<blocks_for(b->rows * cc), kThreads, 0, cu->compute>>>(*b, st->f0, st->f1, st->f2);
        break;
    }
    return launched(cu, "kernel batchnorm");
}

/* The scratch in the context's workspace (kernels queued earlier on the stream are done
 * with it or wait for it: one stream). */
static int bn_scratch(gm_cuda *cu, gm_kbn *b)
{
    int err = gm_cuda_workspace(cu, gm_kbn_scratch_doubles(b->rows, b->c) * sizeof(double));
    b->scratch = (double *)cu->workspace;
    return err;
}

extern "C" int gm_batchnorm_forward_cuda(gm_cuda *cu, size_t rows, int c, int train, float momentum,
                                         float eps, const float *x, const float *gamma,
                                         const float *beta, float *running_mean, float *running_var,
                                         float *save_mean, float *save_invstd, float *y)
{
    gm_kbn b;
    int err;

    if (rows == 0 || c <= 0)
        return 0;
    memset(&b, 0, sizeof(b));
    b.rows = rows, b.c = c, b.train = train, b.momentum = momentum, b.eps = eps;
    b.x = x, b.gamma = gamma, b.beta = beta, b.running_mean = running_mean;
    b.running_var = running_var, b.save_mean = save_mean, b.save_invstd = save_invstd, b.y = y;
    if ((err = bn_scratch(cu, &b)) < 0)
        return err;
    return gm_kbn_forward(&b, bn_run, cu);
}

extern "C" int gm_batchnorm_backward_cuda(gm_cuda *cu, size_t rows, int c, const float *x,
                                          const float *gamma, const float *save_mean,
                                          const float *save_invstd, const float *dy, float *dgamma,
                                          float *dbeta, float *dx)
{
    gm_kbn b;
    int err;

    if (rows == 0 || c <= 0)
        return 0;
    memset(&b, 0, sizeof(b));
    b.rows = rows, b.c = c, b.train = 1;
    b.x = x, b.gamma = gamma, b.save_mean = (float *)save_mean;
    b.save_invstd = (float *)save_invstd, b.dy = dy, b.dgamma = dgamma, b.dbeta = dbeta, b.dx = dx;
    if ((err = bn_scratch(cu, &b)) < 0)
        return err;
    return gm_kbn_backward(&b, bn_run, cu);
}
