/*
 * train/kernels/custom.cu - the __global__ builds of the custom kernels (custom.h): each
 * kernel only fills a struct gm_kgrid from blockIdx/gridDim/threadIdx/blockDim and calls the
 * per-thread body in kfn.h, the same body the host twins run in CI.  Launches are 1-D,
 * 256 threads a block, at most 4096 blocks (the bodies stride over the rest), on the
 * context's compute stream; every launch is followed by cudaGetLastError through
 * gm_cuda_check_rt.  Compiled with -fmad=false (Makefile) so the optimizer updates round
 * like the CPU's.
 */
#include "train/kernels/cuda_ctx.h"
#include "train/kernels/custom.h"

#include <errno.h>

extern "C" {
#include "common/log.h"
}

namespace
{

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

__device__ inline gm_kgrid here()
{
    gm_kgrid g;
    g.block = blockIdx.x;
    g.blocks = gridDim.x;
    g.thread = threadIdx.x;
    g.threads = blockDim.x;
    return g;
}

unsigned blocks_for(size_t n)
{
    return gm_cuda_blocks(n, kThreads, kMaxBlocks);
}

__global__ void k_f16_pack(size_t n, const float *in, uint16_t *out)
{
    gm_kbody_f16_pack(here(), n, in, out);
}

__global__ void k_f16_unpack(size_t n, const uint16_t *in, const float *x, float *out)
{
    gm_kbody_f16_unpack(here(), n, in, x, out);
}

__global__ void k_bf16_pack(size_t n, const float *in, uint16_t *out)
{
    gm_kbody_bf16_pack(here(), n, in, out);
}

__global__ void k_bf16_unpack(size_t n, const uint16_t *in, const float *x, float *out)
{
    gm_kbody_bf16_unpack(here(), n, in, x, out);
}

__global__ void k_sgd(size_t n, float *p, const float *g, float *buf, float neg_lr, float wd,
                      float mu, unsigned flags)
{
    gm_kbody_sgd(here(), n, p, g, buf, neg_lr, wd, mu, flags);
}

__global__ void k_adam(size_t n, float *p, const float *g, float *m, float *v, gm_kadam a)
{
    gm_kbody_adam(here(), n, p, g, m, v, a);
}

__global__ void k_sgd_bf16(size_t n, float *p, const float *g, float *buf, uint16_t *w16,
                           float neg_lr, float wd, float mu, unsigned flags)
{
    gm_kbody_sgd_bf16(here(), n, p, g, buf, w16, neg_lr, wd, mu, flags);
}

__global__ void k_adam_bf16(size_t n, float *p, const float *g, float *m, float *v, uint16_t *w16,
                            gm_kadam a)
{
    gm_kbody_adam_bf16(here(), n, p, g, m, v, w16, a);
}

__global__ void k_xent_rows(int n, int k, const float *logits, const int32_t *labels,
                            float *dlogits, double *row_loss, int32_t *row_hit)
{
    gm_kbody_xent_rows(here(), n, k, logits, labels, dlogits, row_loss, row_hit);
}

__global__ void k_xent_sum(int n, const double *row_loss, const int32_t *row_hit, double *out)
{
    gm_kbody_xent_sum(here(), n, row_loss, row_hit, out);
}

__global__ void k_hash_lanes(const unsigned char *p, size_t nbytes, uint64_t *lanes)
{
    gm_kbody_hash_lanes(here(), p, nbytes, lanes);
}

int launched(gm_cuda *cu, const char *what)
{
    return gm_cuda_check_rt(cu, cudaGetLastError(), what);
}

} // namespace

extern "C" int gm_kf16_pack_cuda(gm_cuda *cu, size_t n, const float *in, uint16_t *out)
{
    if (n == 0)
        return 0;
    k_f16_pack<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, in, out);
    return launched(cu, "kernel f16_pack");
}

extern "C" int gm_kf16_unpack_cuda(gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                                   float *out)
{
    if (n == 0)
        return 0;
    k_f16_unpack<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, in, x, out);
    return launched(cu, "kernel f16_unpack");
}

extern "C" int gm_kbf16_pack_cuda(gm_cuda *cu, size_t n, const float *in, uint16_t *out)
{
    if (n == 0)
        return 0;
    k_bf16_pack<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, in, out);
    return launched(cu, "kernel bf16_pack");
}

extern "C" int gm_kbf16_unpack_cuda(gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                                    float *out)
{
    if (n == 0)
        return 0;
    k_bf16_unpack<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, in, x, out);
    return launched(cu, "kernel bf16_unpack");
}

extern "C" int gm_ksgd_cuda(gm_cuda *cu, size_t n, float *p, const float *g, float *buf, float lr,
                            float wd, float mu, unsigned flags)
{
    if (n == 0)
        return 0;
    k_sgd<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, p, g, buf, -lr, wd, mu, flags);
    return launched(cu, "kernel sgd");
}

extern "C" int gm_kadam_cuda(gm_cuda *cu, size_t n, float *p, const float *g, float *m, float *v,
                             const gm_kadam *a)
{
    if (n == 0)
        return 0;
    k_adam<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, p, g, m, v, *a);
    return launched(cu, "kernel adam");
}

extern "C" int gm_ksgd_bf16_cuda(gm_cuda *cu, size_t n, float *p, const float *g, float *buf,
                                 uint16_t *w16, float lr, float wd, float mu, unsigned flags)
{
    if (n == 0)
        return 0;
    k_sgd_bf16<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, p, g, buf, w16, -lr, wd, mu, flags);
    return launched(cu, "kernel sgd (bf16 copy)");
}

extern "C" int gm_kadam_bf16_cuda(gm_cuda *cu, size_t n, float *p, const float *g, float *m,
                                  float *v, uint16_t *w16, const gm_kadam *a)
{
    if (n == 0)
        return 0;
    k_adam_bf16<<<blocks_for(n), kThreads, 0, cu->compute>>>(n, p, g, m, v, w16, *a);
    return launched(cu, "kernel adam (bf16 copy)");
}

extern "C" int gm_kxent_cuda(gm_cuda *cu, int n, int k, const float *logits, const int32_t *labels,
                             float *dlogits, double *loss, long *correct)
{
    /* per-row results in the workspace: n doubles, then n int32 */
    const size_t need = (size_t)n * (sizeof(double) + sizeof(int32_t));
    double *host = (double *)cu->scratch_host;
    int err;

    if (n < 1 || k < 1)
        return -EINVAL;
    if ((err = gm_cuda_workspace(cu, need)) < 0)
        return err;
    double *row_loss = (double *)cu->workspace;
    int32_t *row_hit = (int32_t *)(row_loss + n);
    k_xent_rows<<<blocks_for((size_t)n), kThreads, 0, cu->compute>>>(n, k, logits, labels, dlogits,
                                                                     row_loss, row_hit);
    if ((err = launched(cu, "kernel xent_rows")) < 0)
        return err;
    k_xent_sum<<<1, 1, 0, cu->compute>>>(n, row_loss, row_hit, (double *)cu->scratch);
    if ((err = launched(cu, "kernel xent_sum")) < 0)
        return err;
    if ((err = gm_cuda_copy(cu, host, cu->scratch, 3 * sizeof(double), GM_CUDA_D2H)) < 0)
        return err;
    if (host[2] != 0.0) {
        gm_err("cuda: softmax cross-entropy: %.0f of %d labels outside [0, %d)", host[2], n, k);
        return GM_ERR_DATA;
    }
    *loss = host[0];
    if (correct != NULL)
        *correct = (long)host[1];
    return 0;
}

extern "C" int gm_khash_cuda(gm_cuda *cu, const void *p, size_t nbytes, uint64_t *out)
{
    uint64_t *lanes = (uint64_t *)cu->scratch_host;
    unsigned char tail[32];
    const size_t whole = nbytes & ~(size_t)31;
    int err;

    /* four threads run the four lanes over the whole stripes; the < 32 tail bytes and the
     * lanes come back to the host, which finishes with the CPU's own code */
    k_hash_lanes<<<1, 4, 0, cu->compute>>>((const unsigned char *)p, nbytes,
                                           (uint64_t *)cu->scratch);
    if ((err = launched(cu, "kernel hash_lanes")) < 0)
        return err;
    if ((err = gm_cuda_copy(cu, lanes, cu->scratch, 4 * sizeof(uint64_t), GM_CUDA_D2H)) < 0)
        return err;
    if ((err = gm_cuda_copy(cu, tail, (const unsigned char *)p + whole, nbytes - whole,
                            GM_CUDA_D2H)) < 0)
        return err;
    *out = gm_khash_finish(lanes, nbytes, tail);
    return 0;
}
