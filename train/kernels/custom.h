/*
 * train/kernels/custom.h - gradmesh's own kernels, where no library call exists: softmax
 * cross-entropy (loss and gradient), the SGD and Adam updates, fp32 <-> fp16 packing for the
 * wire (fp16 and bf16), the updates that also write a bf16 copy of the weights (mixed
 * precision), and the parameter hash.  Each has two builds of one body
 * (train/kernels/kfn.h):
 *
 *   _cuda   a __global__ kernel on the context's compute stream (train/kernels/custom.cu);
 *           in a build without the CUDA backend it returns -ENOTSUP;
 *   _host   the same per-thread body called for every (block, thread) of a grid given by
 *           struct gm_klaunch, on the calling CPU thread (train/kernels/custom_host.c).
 *
 * The host twins are not the CPU path (that is xent_cpu.c, train/nn/optim.c,
 * train/comm/codec.c, gm_coll_hash): tests/unit/test_kernels_host.c checks them against it,
 * bit for bit, over grids small enough that the grid-stride loops wrap, so CI checks the
 * kernels' indexing and arithmetic without a GPU.  tests/unit/test_cuda_ops.c checks the
 * _cuda builds against the CPU where a GPU answers.
 *
 * Equal results: the optimizer kernels give the CPU optimizer's bits (no FMA contraction
 * on either side, same operation order, Adam's per-step scalars from gm_kadam_prepare,
 * computed as optim.c does), so ranks on GPUs and on CPUs keep identical parameters after
 * identical reduced gradients.  fp16 packing and the hash are integer/bit exact.  The loss
 * uses double exp/log: the device's are within 1 ulp of glibc's, so the loss and the
 * gradient agree to about 1e-15 and 1 float ulp.
 *
 * Pointers given to _cuda functions are device memory; the loss and the hash come back to
 * the host (they wait for the stream).  Called on the trainer thread that owns cu.
 */
#ifndef GM_TRAIN_KERNELS_CUSTOM_H
#define GM_TRAIN_KERNELS_CUSTOM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/kernels/cuda.h"
#include "train/kernels/kfn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The grid a host twin walks (both >= 1). */
struct gm_klaunch {
    unsigned blocks, threads;
};

/* Adam's scalars for step t (>= 1) with learning rate lr, as train/nn/optim.c computes them. */
void gm_kadam_prepare(float beta1, float beta2, float eps, float weight_decay, long t, float lr,
                      struct gm_kadam *out);

void gm_kf16_pack_host(struct gm_klaunch l, size_t n, const float *in, uint16_t *out);
void gm_kf16_unpack_host(struct gm_klaunch l, size_t n, const uint16_t *in, const float *x,
                         float *out);
void gm_kbf16_pack_host(struct gm_klaunch l, size_t n, const float *in, uint16_t *out);
void gm_kbf16_unpack_host(struct gm_klaunch l, size_t n, const uint16_t *in, const float *x,
                          float *out);
void gm_ksgd_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *buf, float lr,
                  float wd, float mu, unsigned flags);
void gm_kadam_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *m, float *v,
                   const struct gm_kadam *a);
/* Mixed precision (bf16): the SGD / Adam update of the fp32 master weights p and fp32
 * state, then w16[i] = bf16(p[i]), the copy the bf16 convolutions and products read.  The
 * casts themselves are the wire packers': fp32 -> bf16 gm_kbf16_pack_*, bf16 -> fp32
 * gm_kbf16_unpack_* with x = NULL. */
void gm_ksgd_bf16_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *buf,
                       uint16_t *w16, float lr, float wd, float mu, unsigned flags);
void gm_kadam_bf16_host(struct gm_klaunch l, size_t n, float *p, const float *g, float *m, float *v,
                        uint16_t *w16, const struct gm_kadam *a);
/* row_loss (n) and row_hit (n) are the caller's scratch.  Returns the mean loss (NaN when a
 * label is outside [0, k)); *correct (may be NULL) counts argmax hits. */
double gm_kxent_host(struct gm_klaunch l, int n, int k, const float *logits, const int32_t *labels,
                     float *dlogits, long *correct, double *row_loss, int32_t *row_hit);
uint64_t gm_khash_host(struct gm_klaunch l, const void *p, size_t nbytes);

int gm_kf16_pack_cuda(struct gm_cuda *cu, size_t n, const float *in, uint16_t *out) GM_MUST_CHECK;
int gm_kf16_unpack_cuda(struct gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                        float *out) GM_MUST_CHECK;
int gm_kbf16_pack_cuda(struct gm_cuda *cu, size_t n, const float *in, uint16_t *out) GM_MUST_CHECK;
int gm_kbf16_unpack_cuda(struct gm_cuda *cu, size_t n, const uint16_t *in, const float *x,
                         float *out) GM_MUST_CHECK;
int gm_ksgd_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *buf, float lr,
                 float wd, float mu, unsigned flags) GM_MUST_CHECK;
int gm_kadam_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *m, float *v,
                  const struct gm_kadam *a) GM_MUST_CHECK;
int gm_ksgd_bf16_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *buf,
                      uint16_t *w16, float lr, float wd, float mu, unsigned flags) GM_MUST_CHECK;
int gm_kadam_bf16_cuda(struct gm_cuda *cu, size_t n, float *p, const float *g, float *m, float *v,
                       uint16_t *w16, const struct gm_kadam *a) GM_MUST_CHECK;
/* *loss: the mean loss; GM_ERR_DATA when a label is outside [0, k) (logged). */
int gm_kxent_cuda(struct gm_cuda *cu, int n, int k, const float *logits, const int32_t *labels,
                  float *dlogits, double *loss, long *correct) GM_MUST_CHECK;
int gm_khash_cuda(struct gm_cuda *cu, const void *p, size_t nbytes, uint64_t *out) GM_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif
