/*
 * train/kernels/cuda_ctx.h - the inside of struct gm_cuda, for the CUDA backend's own files
 * (cuda.c, custom.cu, the cuBLAS/cuDNN ops).  Only in builds with GM_HAVE_CUDA.  See
 * cuda.h for the design.
 */
#ifndef GM_TRAIN_KERNELS_CUDA_CTX_H
#define GM_TRAIN_KERNELS_CUDA_CTX_H

#if !defined(GM_HAVE_CUDA) || !GM_HAVE_CUDA
#error "cuda_ctx.h is only for builds with the CUDA backend"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "train/kernels/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GM_CUDA_ALGO_CACHE 64

/* A convolution's algorithms, found once per shape (cudnnFind*) and cached. */
struct gm_cuda_conv_algo {
    int n, h, w, c, oc, k, pad, stride; /* the shape; n == 0: free slot */
    int groups;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* bytes, the largest of the three */
};

struct gm_cuda {
    int index;
    cudaStream_t compute; /* kernels, cuBLAS, cuDNN */
    cudaStream_t copy;    /* gradient buckets to pinned host buffers */
    cudaStream_t upload;  /* batches from pinned host buffers */
    cudaEvent_t ready;    /* compute work recorded before an async copy */
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *workspace; /* owned: cuDNN workspace, grown on demand */
    size_t workspace_bytes;
    void *scratch;      /* owned: small per-call results (loss, hash lanes), device */
    void *scratch_host; /* owned: pinned mirror of scratch */
    struct gm_cuda_conv_algo algos[GM_CUDA_ALGO_CACHE];
    int algo_next;  /* the slot a new shape takes (round robin once full) */
    int conv_exact; /* gm_cuda_conv_exact: no FFT or Winograd algorithms */
    /* cuDNN descriptors, created once and set per call (setting one is cheap) */
    cudnnTensorDescriptor_t td[4];
    cudnnFilterDescriptor_t fd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnPoolingDescriptor_t pd;
    char last_error[768];
    int first_err; /* the first error since gm_cuda_take_error (the op table's entries
                      return void and record it here) */
};

#define GM_CUDA_SCRATCH_BYTES 4096

/* Blocks of `threads` for n elements, at least 1, at most max (kernels stride over the rest). */
static inline unsigned gm_cuda_blocks(size_t n, unsigned threads, size_t max)
{
    size_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    return (unsigned)(b < max ? b : max);
}

/* Each returns 0 on success; otherwise logs "what: <library message>" once, stores it in
 * cu->last_error (cu may be NULL) and returns GM_ERR_GPU (-ENOMEM for out of memory). */
int gm_cuda_check_rt(struct gm_cuda *cu, cudaError_t e, const char *what);
int gm_cuda_check_blas(struct gm_cuda *cu, cublasStatus_t s, const char *what);
int gm_cuda_check_dnn(struct gm_cuda *cu, cudnnStatus_t s, const char *what);
/* Grows cu->workspace to at least bytes. */
int gm_cuda_workspace(struct gm_cuda *cu, size_t bytes);
/* Makes cu the calling thread's context without gm_cuda_new(): for
 * tests/unit/test_cuda_fake.c, which drives the op table through a stand-in library table
 * (no GPU).  NULL clears it. */
void gm_cuda_set_current(struct gm_cuda *cu);

#ifdef __cplusplus
}
#endif

#endif
