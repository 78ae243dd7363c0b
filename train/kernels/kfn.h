/*
 * train/kernels/kfn.h - the per-element (per-thread) bodies of gradmesh's own kernels,
 * written once and compiled twice: by nvcc into the __global__ kernels of
 * train/kernels/custom.cu, and by the C compiler into their host twins
 * (train/kernels/custom_host.c), which CI runs on the CPU.  The same file also holds the
 * scalar fp16 conversions and the hash lane step that the CPU code itself uses
 * (train/comm/codec.c, train/comm/coll_wire.c), so there is one copy of each.
 *
 * Only what no library offers lives here: softmax cross-entropy (loss and gradient), the
 * SGD and Adam updates, fp32 <-> fp16 packing for the wire, and the parameter hash.
 *
 * Rules that keep the two builds equal:
 * - C11 and C++17 at once: no restrict (GM_KRESTRICT), no designated initializers, no
 *   VLAs; bit casts through GM_KFN helpers (memcpy on the host, intrinsics on the device).
 * - No fused multiply-add: nvcc runs with -fmad=false and gcc at -std=c11 does not
 *   contract, so every a*b+c rounds twice on both sides, in the order written here.
 * - Each body takes a struct gm_kgrid (block, blocks, thread, threads) and walks its
 *   elements with a grid-stride loop: the host twin calls the body for every
 *   (block, thread) of a small grid, so the indexing, not just the arithmetic, is what
 *   the CPU test checks.
 *
 * Pure functions; thread-safe.
 */
#ifndef GM_TRAIN_KERNELS_KFN_H
#define GM_TRAIN_KERNELS_KFN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define GM_KFN static inline __host__ __device__
#define GM_KRESTRICT __restrict__
#else
#define GM_KFN static inline
#define GM_KRESTRICT restrict
#endif

/* One thread's place in a 1-D launch. */
struct gm_kgrid {
    unsigned block, blocks;   /* blockIdx.x, gridDim.x */
    unsigned thread, threads; /* threadIdx.x, blockDim.x */
};

GM_KFN size_t gm_kgrid_first(struct gm_kgrid g)
{
    return (size_t)g.block * g.threads + g.thread;
}

GM_KFN size_t gm_kgrid_stride(struct gm_kgrid g)
{
    return (size_t)g.blocks * g.threads;
}

GM_KFN uint32_t gm_kf2u(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

GM_KFN float gm_ku2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* fp32 -> fp16 bits, round to nearest even; overflow to +-Inf, subnormals kept, NaN stays
 * a quiet NaN with the payload's top bits. */
GM_KFN uint16_t gm_kf32_to_f16(float f)
{
    uint32_t u = gm_kf2u(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    int e;
    uint32_t hv, rem;

    if (exp == 0xffu) /* Inf or NaN (NaN made quiet, payload top bits kept) */
        return (uint16_t)(sign | 0x7c00u | (man != 0 ? 0x200u | (man >> 13) : 0));
    e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* subnormal half (or zero) */
        int shift;
        uint32_t mid;
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        shift = 14 - e; /* 14..24 */
        hv = man >> shift;
        rem = man & ((1u << shift) - 1);
        mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (hv & 1u)))
            hv++;
        return (uint16_t)(sign | hv);
    }
    hv = ((uint32_t)e << 10) | (man >> 13);
    rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (hv & 1u)))
        hv++; /* may carry into the exponent, up to Inf: correct */
    return (uint16_t)(sign | hv);
}

/* fp16 bits -> fp32 (exact). */
GM_KFN float gm_kf16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1fu)
        return gm_ku2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v;
        if (man == 0)
            return gm_ku2f(sign);
        v = (float)man * 0x1p-24f; /* subnormal: exact in fp32 */
        return sign ? -v : v;
    }
    return gm_ku2f(sign | ((exp + 112u) << 23) | (man << 13));
}

/* fp32 -> bf16 bits: the top half, rounded to nearest even; NaN stays a quiet NaN. */
GM_KFN uint16_t gm_kf32_to_bf16(float f)
{
    uint32_t u = gm_kf2u(f);

    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu) != 0)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

GM_KFN float gm_kbf16_to_f32(uint16_t h)
{
    return gm_ku2f((uint32_t)h << 16);
}

/* ---- wire packing: in (n floats) -> out (n halves); back, optionally adding x ---- */

GM_KFN void gm_kbody_bf16_pack(struct gm_kgrid g, size_t n, const float *GM_KRESTRICT in,
                               uint16_t *GM_KRESTRICT out)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        out[i] = gm_kf32_to_bf16(in[i]);
}

/* out[i] = bf16(in[i]) (+ x[i] when x != NULL); out may alias x. */
GM_KFN void gm_kbody_bf16_unpack(struct gm_kgrid g, size_t n, const uint16_t *in, const float *x,
                                 float *out)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        out[i] = x != NULL ? gm_kbf16_to_f32(in[i]) + x[i] : gm_kbf16_to_f32(in[i]);
}

GM_KFN void gm_kbody_f16_pack(struct gm_kgrid g, size_t n, const float *GM_KRESTRICT in,
                              uint16_t *GM_KRESTRICT out)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        out[i] = gm_kf32_to_f16(in[i]);
}

/* out[i] = f16(in[i]) (+ x[i] when x != NULL); out may alias x. */
GM_KFN void gm_kbody_f16_unpack(struct gm_kgrid g, size_t n, const uint16_t *in, const float *x,
                                float *out)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        out[i] = x != NULL ? gm_kf16_to_f32(in[i]) + x[i] : gm_kf16_to_f32(in[i]);
}

/* ---- optimizers: the arithmetic and order of train/nn/optim.c ---- */

/* SGD flags (bit set): weight decay, momentum, Nesterov. */
#define GM_KSGD_DECAY 1u
#define GM_KSGD_MOMENTUM 2u
#define GM_KSGD_NESTEROV 4u

/* One element of the SGD update: returns the new p; *b is buf[i] (momentum only, else
 * unused).  d = g + wd*p; b = b*mu + d; d = nesterov ? d + mu*b : b; p = p + (-lr)*d. */
GM_KFN float gm_ksgd_elem(float p, float g, float *b, float neg_lr, float wd, float mu,
                          unsigned flags)
{
    float d = g;
    if (flags & GM_KSGD_DECAY)
        d = d + wd * p;
    if (flags & GM_KSGD_MOMENTUM) {
        float nb = *b * mu + d;
        *b = nb;
        d = (flags & GM_KSGD_NESTEROV) ? d + mu * nb : nb;
    }
    return p + neg_lr * d;
}

/* p[n], g[n], buf[n] (momentum only): gm_ksgd_elem for each element. */
GM_KFN void gm_kbody_sgd(struct gm_kgrid g, size_t n, float *GM_KRESTRICT p,
                         const float *GM_KRESTRICT grad, float *GM_KRESTRICT buf, float neg_lr,
                         float wd, float mu, unsigned flags)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        p[i] = gm_ksgd_elem(p[i], grad[i], (flags & GM_KSGD_MOMENTUM) ? &buf[i] : (float *)0,
                            neg_lr, wd, mu, flags);
}

/* Mixed precision ([optim] precision = bf16): the same update of the fp32 master weights
 * p (and fp32 buf), then the bf16 copy the bf16 convolutions and products read,
 * w16[i] = bf16(p[i]) rounded to nearest even: one pass instead of an update and a cast. */
GM_KFN void gm_kbody_sgd_bf16(struct gm_kgrid g, size_t n, float *GM_KRESTRICT p,
                              const float *GM_KRESTRICT grad, float *GM_KRESTRICT buf,
                              uint16_t *GM_KRESTRICT w16, float neg_lr, float wd, float mu,
                              unsigned flags)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g)) {
        const float np =
            gm_ksgd_elem(p[i], grad[i], (flags & GM_KSGD_MOMENTUM) ? &buf[i] : (float *)0, neg_lr,
                         wd, mu, flags);
        p[i] = np;
        w16[i] = gm_kf32_to_bf16(np);
    }
}

/* Adam's per-step scalars, computed on the host in double and rounded to float as
 * train/nn/optim.c does (t: the step number, 1 on the first step). */
struct gm_kadam {
    float b1, omb1, b2, omb2, wd, eps;
    float inv_bc2_sqrt, neg_step_size;
    int decay;
};

/* One element of the Adam update: returns the new p; *m, *v are m[i], v[i].
 * d = g + wd*p; m = m*b1 + (1-b1)*d; v = v*b2 + (1-b2)*d*d;
 * p = p + (-lr/bc1) * (m / (sqrt(v) * (1/sqrt(bc2)) + eps)). */
GM_KFN float gm_kadam_elem(float p, float g, float *m, float *v, const struct gm_kadam *a)
{
    float d = g;
    float mi, vi, denom;
    if (a->decay)
        d = d + a->wd * p;
    mi = *m * a->b1 + a->omb1 * d;
    vi = *v * a->b2 + a->omb2 * d * d;
    *m = mi;
    *v = vi;
    denom = sqrtf(vi) * a->inv_bc2_sqrt + a->eps;
    return p + a->neg_step_size * (mi / denom);
}

/* p[n], g[n], m[n], v[n]: gm_kadam_elem for each element. */
GM_KFN void gm_kbody_adam(struct gm_kgrid g, size_t n, float *GM_KRESTRICT p,
                          const float *GM_KRESTRICT grad, float *GM_KRESTRICT m,
                          float *GM_KRESTRICT v, struct gm_kadam a)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g))
        p[i] = gm_kadam_elem(p[i], grad[i], &m[i], &v[i], &a);
}

/* Mixed precision: the Adam update of the fp32 master weights and state, then
 * w16[i] = bf16(p[i]) (as gm_kbody_sgd_bf16). */
GM_KFN void gm_kbody_adam_bf16(struct gm_kgrid g, size_t n, float *GM_KRESTRICT p,
                               const float *GM_KRESTRICT grad, float *GM_KRESTRICT m,
                               float *GM_KRESTRICT v, uint16_t *GM_KRESTRICT w16, struct gm_kadam a)
{
    for (size_t i = gm_kgrid_first(g); i < n; i += gm_kgrid_stride(g)) {
        const float np = gm_kadam_elem(p[i], grad[i], &m[i], &v[i], &a);
        p[i] = np;
        w16[i] = gm_kf32_to_bf16(np);
    }
}

/* ---- softmax cross-entropy: one thread per row (K is small: 10 to 1000 classes) ---- */

/* logits (N, K), labels (N) -> row_loss (N) in double, row_hit (N) (1: argmax == label), and
 * dlogits (N, K) = (softmax - onehot) / N when dlogits != NULL.  A label outside [0, K)
 * gives a NaN loss for its row, row_hit -1 and no gradient row (the caller reports it).  The
 * arithmetic is train/kernels/xent_cpu.c's: max, sum of exp in double, log-sum-exp. */
GM_KFN void gm_kbody_xent_rows(struct gm_kgrid g, int n, int k, const float *logits,
                               const int32_t *labels, float *dlogits, double *row_loss,
                               int32_t *row_hit)
{
    const float inv_n = 1.0f / (float)n;

    for (size_t r = gm_kgrid_first(g); r < (size_t)n; r += gm_kgrid_stride(g)) {
        const float *z = logits + r * (size_t)k;
        const int32_t y = labels[r];
        float mx = z[0];
        int arg = 0;
        double sum = 0.0;
        if (y < 0 || y >= k) {
            row_loss[r] = (double)NAN;
            row_hit[r] = -1;
            continue;
        }
        for (int j = 1; j < k; j++) {
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        }
        for (int j = 0; j < k; j++)
            sum += exp((double)(z[j] - mx));
        row_loss[r] = log(sum) - (double)(z[y] - mx);
        row_hit[r] = arg == y;
        if (dlogits != NULL) {
            float *d = dlogits + r * (size_t)k;
            const double inv_sum = 1.0 / sum;
            for (int j = 0; j < k; j++)
                d[j] = (float)(exp((double)(z[j] - mx)) * inv_sum) * inv_n;
            d[y] -= inv_n;
        }
    }
}

/* One thread (thread 0 of block 0): out[0] = mean of row_loss in row order (the CPU's
 * order, so the same double), out[1] = number of hits, out[2] = rows with a bad label. */
GM_KFN void gm_kbody_xent_sum(struct gm_kgrid g, int n, const double *row_loss,
                              const int32_t *row_hit, double *out)
{
    double total = 0.0;
    long hits = 0, bad = 0;

    if (gm_kgrid_first(g) != 0)
        return;
    for (int r = 0; r < n; r++) {
        total += row_loss[r];
        hits += row_hit[r] > 0;
        bad += row_hit[r] < 0;
    }
    out[0] = total / n;
    out[1] = (double)hits;
    out[2] = (double)bad;
}

/* ---- the parameter hash (train/comm/coll_wire.h gm_coll_hash) ---- */

#define GM_KHASH_K 0x9e3779b97f4a7c15ull

GM_KFN uint64_t gm_khash_seed(int lane)
{
    const uint64_t seeds[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                               0x082efa98ec4e6c89ull};
    return seeds[lane & 3];
}

/* One lane's step over one 8-byte word. */
GM_KFN uint64_t gm_khash_lane(uint64_t h, uint64_t w)
{
    h = (h ^ w) * GM_KHASH_K;
    return h ^ (h >> 29);
}

/* Lane l (0..3) hashes word l of every whole 32-byte stripe of p[nbytes]. */
GM_KFN uint64_t gm_khash_lane_run(int lane, const unsigned char *p, size_t nbytes)
{
    uint64_t h = gm_khash_seed(lane);
    for (size_t i = 0; i + 32 <= nbytes; i += 32) {
        uint64_t w;
#ifdef __CUDA_ARCH__
        if (((uintptr_t)p & 7u) == 0) /* device buffers are (cudaMalloc: 256 bytes) */
            w = *(const uint64_t *)(const void *)(p + i + 8 * (size_t)lane);
        else
            memcpy(&w, p + i + 8 * (size_t)lane, sizeof(w));
#else
        memcpy(&w, p + i + 8 * (size_t)lane, sizeof(w));
#endif
        h = gm_khash_lane(h, w);
    }
    return h;
}

/* Combines the four lanes with the length and the tail: the nbytes % 32 bytes past the last
 * whole stripe (tail = p + (nbytes & ~31)). */
GM_KFN uint64_t gm_khash_finish(const uint64_t lanes[4], size_t nbytes, const unsigned char *tail)
{
    uint64_t r = (uint64_t)nbytes * GM_KHASH_K;
    for (int l = 0; l < 4; l++) {
        r = (r ^ lanes[l]) * GM_KHASH_K;
        r ^= r >> 31;
    }
    for (size_t i = 0; i < (nbytes & 31); i++)
        r = (r ^ tail[i]) * GM_KHASH_K;
    r ^= r >> 33;
    r *= 0xff51afd7ed558ccdull;
    r ^= r >> 33;
    return r;
}

/* The four lanes into lanes[4], one per thread (the launch uses four threads; any grid
 * works); the caller finishes with gm_khash_finish. */
GM_KFN void gm_kbody_hash_lanes(struct gm_kgrid g, const unsigned char *p, size_t nbytes,
                                uint64_t *lanes)
{
    for (size_t t = gm_kgrid_first(g); t < 4; t += gm_kgrid_stride(g))
        lanes[t] = gm_khash_lane_run((int)t, p, nbytes);
}

#endif
