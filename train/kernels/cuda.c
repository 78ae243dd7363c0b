/*
 * train/kernels/cuda.c - the CUDA backend's context, memory and error reporting (cuda.h has
 * the design).  Compiled by the C compiler in every build: with GM_HAVE_CUDA it calls the
 * CUDA runtime, cuBLAS and cuDNN (C APIs); without, every entry point answers that this
 * build has no CUDA backend.  Runs on the trainer thread that created the context.
 */
#include "train/kernels/cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"

#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA

#include "train/kernels/cuda_ctx.h"
#include "train/kernels/cuda_libs.h"

/* The calling thread's context (cuda.h: the op table's entries take no context). */
static _Thread_local struct gm_cuda *current;
/* The calling thread's last logged error, for a gm_cuda_new() that failed (no context). */
static _Thread_local char thread_error[768];

int gm_cuda_built(void)
{
    return 1;
}

struct gm_cuda *gm_cuda_current(void)
{
    return current;
}

void gm_cuda_set_current(struct gm_cuda *cu)
{
    current = cu;
}

int gm_cuda_take_error(struct gm_cuda *cu)
{
    int err = cu->first_err;
    cu->first_err = 0;
    return err;
}

void gm_cuda_conv_exact(struct gm_cuda *cu, int exact)
{
    cu->conv_exact = exact != 0;
    memset(cu->algos, 0, sizeof(cu->algos));
    cu->algo_next = 0;
}

/* Logs "what: msg" once and keeps it as the context's last error. */
static int fail(struct gm_cuda *cu, int err, const char *what, const char *msg)
{
    char line[768];

    snprintf(line, sizeof(line), "%s: %s", what, msg);
    gm_err("cuda: %s", line);
    snprintf(thread_error, sizeof(thread_error), "%s", line);
    if (cu != NULL) {
        snprintf(cu->last_error, sizeof(cu->last_error), "%s", line);
        if (cu->first_err == 0)
            cu->first_err = err;
    }
    return err;
}

int gm_cuda_check_rt(struct gm_cuda *cu, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
    return fail(cu, e == cudaErrorMemoryAllocation ? -ENOMEM : GM_ERR_GPU, what,
                cudaGetErrorString(e));
}

int gm_cuda_check_blas(struct gm_cuda *cu, cublasStatus_t s, const char *what)
{
    char msg[160];

    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    snprintf(msg, sizeof(msg), "cuBLAS: %s", cublasGetStatusString(s));
    return fail(cu, s == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : GM_ERR_GPU, what, msg);
}

int gm_cuda_check_dnn(struct gm_cuda *cu, cudnnStatus_t s, const char *what)
{
    char detail[120], msg[200];

    if (s == CUDNN_STATUS_SUCCESS)
        return 0;
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof(detail));
    if (detail[0])
        snprintf(msg, sizeof(msg), "cuDNN: %s (%s)", cudnnGetErrorString(s), detail);
    else
        snprintf(msg, sizeof(msg), "cuDNN: %s", cudnnGetErrorString(s));
    return fail(cu, s == CUDNN_STATUS_ALLOC_FAILED ? -ENOMEM : GM_ERR_GPU, what, msg);
}

int gm_cuda_device_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);

    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        /* in people's words: the runtime says "driver version is insufficient" when there is
         * no driver at all (libcuda.so.1 absent), which reads like a version problem */
        if (e == cudaErrorInsufficientDriver) {
            void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
            int drv = 0, rt = 0;
            if (h == NULL) {
                snprintf(why, whylen, "no NVIDIA driver (libcuda.so.1 not found)");
            } else {
                dlclose(h);
                (void)cudaDriverGetVersion(&drv);
                (void)cudaRuntimeGetVersion(&rt);
                snprintf(why, whylen,
                         "the NVIDIA driver supports CUDA %d.%d, this build needs %d.%d: "
                         "update the driver",
                         drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
            }
        } else if (e == cudaErrorNoDevice) {
            snprintf(why, whylen, "no NVIDIA GPU (the driver reports none)");
        } else {
            snprintf(why, whylen, "no usable CUDA driver or device (%s)", cudaGetErrorString(e));
        }
        return -ENOTSUP;
    }
    if (n < 1) {
        snprintf(why, whylen, "the CUDA driver reports no device");
        return -ENOTSUP;
    }
    return n;
}

int gm_cuda_device_describe(int index, char *buf, size_t len)
{
    struct cudaDeviceProp p;
    int err = gm_cuda_check_rt(NULL, cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");

    if (err < 0)
        return err;
    snprintf(buf, len, "%s, %.1f GiB, compute %d.%d", p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor);
    return 0;
}

int gm_cuda_index(const struct gm_cuda *cu)
{
    return cu->index;
}

const char *gm_cuda_last_error(const struct gm_cuda *cu)
{
    return cu != NULL ? cu->last_error : thread_error;
}

/* Out of memory: how much was asked for and how much is free. */
static int oom(struct gm_cuda *cu, cudaError_t e, const char *what, size_t bytes)
{
    size_t free_b = 0, total_b = 0;
    char msg[200];

    (void)cudaGetLastError();
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        (void)cudaGetLastError();
    snprintf(msg, sizeof(msg),
             "%s: asked for %zu bytes (%.1f MiB), %zu bytes (%.1f MiB) free of %.1f MiB",
             cudaGetErrorString(e), bytes, (double)bytes / 1048576.0, free_b,
             (double)free_b / 1048576.0, (double)total_b / 1048576.0);
    return fail(cu, -ENOMEM, what, msg);
}

int gm_cuda_alloc(struct gm_cuda *cu, size_t bytes, void **out)
{
    void *p = NULL;
    cudaError_t e;
    int err;

    *out = NULL;
    GM_ASSERT(cu != NULL); /* the zeroing runs on its compute stream */
    e = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (e == cudaErrorMemoryAllocation)
        return oom(cu, e, "cudaMalloc", bytes);
    if ((err = gm_cuda_check_rt(cu, e, "cudaMalloc")) < 0)
        return err;
    /* Zeroed on the compute stream, then waited for: the compute, copy and upload streams
     * are non-blocking, so a cudaMemset on the legacy stream would be ordered against none of
     * them, and an upload queued next could land before the zeroing and be wiped.  The wait
     * orders it before any stream's next work (allocation is not on the step's path). */
    if (bytes > 0 &&
        ((err = gm_cuda_check_rt(cu, cudaMemsetAsync(p, 0, bytes, cu->compute),
                                 "cudaMemsetAsync")) < 0 ||
         (err = gm_cuda_check_rt(cu, cudaStreamSynchronize(cu->compute),
                                 "cudaStreamSynchronize (after cudaMemsetAsync)")) < 0)) {
        cudaFree(p);
        return err;
    }
    *out = p;
    return 0;
}

void gm_cuda_dealloc(void *p)
{
    if (p != NULL)
        (void)cudaFree(p);
}

int gm_cuda_host_alloc(struct gm_cuda *cu, size_t bytes, void **out)
{
    void *p = NULL;
    cudaError_t e;

    *out = NULL;
    e = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation)
        return oom(cu, e, "cudaHostAlloc (pinned host memory)", bytes);
    if (e != cudaSuccess)
        return gm_cuda_check_rt(cu, e, "cudaHostAlloc");
    memset(p, 0, bytes);
    *out = p;
    return 0;
}

void gm_cuda_host_dealloc(void *p)
{
    if (p != NULL)
        (void)cudaFreeHost(p);
}

static enum cudaMemcpyKind kind_of(enum gm_cuda_copy_kind k)
{
    switch (k) {
    case GM_CUDA_H2D:
        return cudaMemcpyHostToDevice;
    case GM_CUDA_D2H:
        return cudaMemcpyDeviceToHost;
    case GM_CUDA_D2D:
        return cudaMemcpyDeviceToDevice;
    }
    return cudaMemcpyDefault;
}

int gm_cuda_copy(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                 enum gm_cuda_copy_kind kind)
{
    int err;

    if (bytes == 0)
        return 0;
    err = gm_cuda_check_rt(cu, cudaMemcpyAsync(dst, src, bytes, kind_of(kind), cu->compute),
                           "cudaMemcpyAsync");
    if (err < 0)
        return err;
    return gm_cuda_check_rt(cu, cudaStreamSynchronize(cu->compute), "cudaStreamSynchronize");
}

int gm_cuda_copy_async(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                       enum gm_cuda_copy_kind kind)
{
    int err;

    if (bytes == 0)
        return 0;
    /* the copy stream waits for what the compute stream has queued so far (the bucket's
     * gradients), then copies while compute goes on with the rest of backward */
    if ((err = gm_cuda_check_rt(cu, cudaEventRecord(cu->ready, cu->compute), "cudaEventRecord")) <
        0)
        return err;
    if ((err = gm_cuda_check_rt(cu, cudaStreamWaitEvent(cu->copy, cu->ready, 0),
                                "cudaStreamWaitEvent")) < 0)
        return err;
    return gm_cuda_check_rt(cu, cudaMemcpyAsync(dst, src, bytes, kind_of(kind), cu->copy),
                            "cudaMemcpyAsync (copy stream)");
}

int gm_cuda_copy_wait(struct gm_cuda *cu)
{
    return gm_cuda_check_rt(cu, cudaStreamSynchronize(cu->copy), "cudaStreamSynchronize (copy)");
}

int gm_cuda_sync(struct gm_cuda *cu)
{
    int err = gm_cuda_check_rt(cu, cudaStreamSynchronize(cu->compute), "cudaStreamSynchronize");
    if (err < 0)
        return err;
    if ((err = gm_cuda_check_rt(cu, cudaStreamSynchronize(cu->upload),
                                "cudaStreamSynchronize (upload)")) < 0)
        return err;
    return gm_cuda_copy_wait(cu);
}

struct gm_cuda_marks {
    int n;
    cudaEvent_t ev[]; /* owned */
};

int gm_cuda_marks_new(struct gm_cuda *cu, int n, struct gm_cuda_marks **out)
{
    struct gm_cuda_marks *mk;
    int err;

    *out = NULL;
    if (n < 1)
        return -EINVAL;
    mk = calloc(1, sizeof(*mk) + (size_t)n * sizeof(cudaEvent_t));
    if (mk == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        if ((err =
                 gm_cuda_check_rt(cu, cudaEventCreateWithFlags(&mk->ev[i], cudaEventDisableTiming),
                                  "cudaEventCreate")) < 0) {
            gm_cuda_marks_free(mk);
            return err;
        }
        mk->n = i + 1;
    }
    *out = mk;
    return 0;
}

void gm_cuda_marks_free(struct gm_cuda_marks *mk)
{
    if (mk == NULL)
        return;
    for (int i = 0; i < mk->n; i++)
        (void)cudaEventDestroy(mk->ev[i]);
    free(mk);
}

int gm_cuda_mark_compute(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    GM_ASSERT(i >= 0 && i < mk->n);
    return gm_cuda_check_rt(cu, cudaEventRecord(mk->ev[i], cu->compute), "cudaEventRecord");
}

int gm_cuda_mark_done(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    cudaError_t e;

    GM_ASSERT(i >= 0 && i < mk->n);
    e = cudaEventQuery(mk->ev[i]);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    return e == cudaSuccess ? 1 : gm_cuda_check_rt(cu, e, "cudaEventQuery");
}

int gm_cuda_mark_wait(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    GM_ASSERT(i >= 0 && i < mk->n);
    return gm_cuda_check_rt(cu, cudaEventSynchronize(mk->ev[i]), "cudaEventSynchronize");
}

int gm_cuda_download_mark(struct gm_cuda *cu, void *dst_host, const void *src_dev, size_t bytes,
                          struct gm_cuda_marks *mk, int i)
{
    int err;

    GM_ASSERT(i >= 0 && i < mk->n);
    if ((err = gm_cuda_copy_async(cu, dst_host, src_dev, bytes, GM_CUDA_D2H)) < 0)
        return err;
    return gm_cuda_check_rt(cu, cudaEventRecord(mk->ev[i], cu->copy), "cudaEventRecord (copy)");
}

int gm_cuda_upload(struct gm_cuda *cu, void *dst_dev, const void *src_host, size_t bytes,
                   struct gm_cuda_marks *mk, int after, int done)
{
    int err;

    GM_ASSERT(after >= 0 && after < mk->n && done >= 0 && done < mk->n);
    if ((err = gm_cuda_check_rt(cu, cudaStreamWaitEvent(cu->upload, mk->ev[after], 0),
                                "cudaStreamWaitEvent (upload)")) < 0)
        return err;
    if (bytes > 0 &&
        (err = gm_cuda_check_rt(
             cu, cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, cu->upload),
             "cudaMemcpyAsync (upload stream)")) < 0)
        return err;
    if ((err = gm_cuda_check_rt(cu, cudaEventRecord(mk->ev[done], cu->upload),
                                "cudaEventRecord (upload)")) < 0)
        return err;
    return gm_cuda_check_rt(cu, cudaStreamWaitEvent(cu->compute, mk->ev[done], 0),
                            "cudaStreamWaitEvent (compute)");
}

int gm_cuda_workspace(struct gm_cuda *cu, size_t bytes)
{
    int err;

    if (bytes <= cu->workspace_bytes)
        return 0;
    gm_cuda_dealloc(cu->workspace);
    cu->workspace = NULL;
    cu->workspace_bytes = 0;
    if ((err = gm_cuda_alloc(cu, bytes, &cu->workspace)) < 0)
        return err;
    cu->workspace_bytes = bytes;
    return 0;
}

int gm_cuda_new(int index, struct gm_cuda **out)
{
    struct gm_cuda *cu;
    char desc[160], why[512];
    int err;

    *out = NULL;
    cu = calloc(1, sizeof(*cu));
    if (cu == NULL)
        return -ENOMEM;
    cu->index = index;
    /* cuBLAS and cuDNN are opened here, the first time a device is chosen (cuda_libs.h) */
    if ((err = gm_cuda_libs_load(why, sizeof(why))) < 0) {
        fail(cu, err, "loading the CUDA libraries", why);
        goto fail;
    }
    if ((err = gm_cuda_check_rt(cu, cudaSetDevice(index), "cudaSetDevice")) < 0)
        goto fail;
    cu->conv_exact = getenv("GM_CUDA_CONV") != NULL && strcmp(getenv("GM_CUDA_CONV"), "exact") == 0;
    if ((err = gm_cuda_check_rt(cu, cudaStreamCreateWithFlags(&cu->compute, cudaStreamNonBlocking),
                                "cudaStreamCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_rt(cu, cudaStreamCreateWithFlags(&cu->copy, cudaStreamNonBlocking),
                                "cudaStreamCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_rt(cu, cudaStreamCreateWithFlags(&cu->upload, cudaStreamNonBlocking),
                                "cudaStreamCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_rt(cu, cudaEventCreateWithFlags(&cu->ready, cudaEventDisableTiming),
                                "cudaEventCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_blas(cu, cublasCreate(&cu->blas), "cublasCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_blas(cu, cublasSetStream(cu->blas, cu->compute), "cublasSetStream")) <
        0)
        goto fail;
    /* fp32 means fp32: no TF32 tensor-core rounding, so the GPU stays within the CPU's
     * tolerances (the benchmark compares with PyTorch in fp32 too) */
    if ((err = gm_cuda_check_blas(cu, cublasSetMathMode(cu->blas, CUBLAS_PEDANTIC_MATH),
                                  "cublasSetMathMode")) < 0)
        goto fail;
    if ((err = gm_cuda_check_dnn(cu, cudnnCreate(&cu->dnn), "cudnnCreate")) < 0)
        goto fail;
    if ((err = gm_cuda_check_dnn(cu, cudnnSetStream(cu->dnn, cu->compute), "cudnnSetStream")) < 0)
        goto fail;
    for (int i = 0; i < 4; i++)
        if ((err = gm_cuda_check_dnn(cu, cudnnCreateTensorDescriptor(&cu->td[i]),
                                     "cudnnCreateTensorDescriptor")) < 0)
            goto fail;
    if ((err = gm_cuda_check_dnn(cu, cudnnCreateFilterDescriptor(&cu->fd),
                                 "cudnnCreateFilterDescriptor")) < 0 ||
        (err = gm_cuda_check_dnn(cu, cudnnCreateConvolutionDescriptor(&cu->cd),
                                 "cudnnCreateConvolutionDescriptor")) < 0 ||
        (err = gm_cuda_check_dnn(cu, cudnnCreateActivationDescriptor(&cu->ad),
                                 "cudnnCreateActivationDescriptor")) < 0 ||
        (err = gm_cuda_check_dnn(cu, cudnnCreatePoolingDescriptor(&cu->pd),
                                 "cudnnCreatePoolingDescriptor")) < 0)
        goto fail;
    if ((err = gm_cuda_alloc(cu, GM_CUDA_SCRATCH_BYTES, &cu->scratch)) < 0)
        goto fail;
    if ((err = gm_cuda_host_alloc(cu, GM_CUDA_SCRATCH_BYTES, &cu->scratch_host)) < 0)
        goto fail;
    if (gm_cuda_device_describe(index, desc, sizeof(desc)) == 0)
        gm_info("event=cuda_context device=cuda:%d name=\"%s\"", index, desc);
    current = cu;
    *out = cu;
    return 0;
fail:
    gm_cuda_free(cu);
    return err;
}

void gm_cuda_free(struct gm_cuda *cu)
{
    if (cu == NULL)
        return;
    if (current == cu)
        current = NULL;
    if (cu->compute != NULL)
        (void)cudaStreamSynchronize(cu->compute);
    if (cu->copy != NULL)
        (void)cudaStreamSynchronize(cu->copy);
    if (cu->upload != NULL)
        (void)cudaStreamSynchronize(cu->upload);
    gm_cuda_dealloc(cu->workspace);
    gm_cuda_dealloc(cu->scratch);
    gm_cuda_host_dealloc(cu->scratch_host);
    for (int i = 0; i < 4; i++)
        if (cu->td[i] != NULL)
            (void)cudnnDestroyTensorDescriptor(cu->td[i]);
    if (cu->fd != NULL)
        (void)cudnnDestroyFilterDescriptor(cu->fd);
    if (cu->cd != NULL)
        (void)cudnnDestroyConvolutionDescriptor(cu->cd);
    if (cu->ad != NULL)
        (void)cudnnDestroyActivationDescriptor(cu->ad);
    if (cu->pd != NULL)
        (void)cudnnDestroyPoolingDescriptor(cu->pd);
    if (cu->dnn != NULL)
        (void)cudnnDestroy(cu->dnn);
    if (cu->blas != NULL)
        (void)cublasDestroy(cu->blas);
    if (cu->ready != NULL)
        (void)cudaEventDestroy(cu->ready);
    if (cu->copy != NULL)
        (void)cudaStreamDestroy(cu->copy);
    if (cu->upload != NULL)
        (void)cudaStreamDestroy(cu->upload);
    if (cu->compute != NULL)
        (void)cudaStreamDestroy(cu->compute);
    (void)cudaGetLastError();
    free(cu);
}

#else /* no CUDA backend in this build */

int gm_cuda_built(void)
{
    return 0;
}

int gm_cuda_device_count(char *why, size_t whylen)
{
    snprintf(why, whylen, "this build has no CUDA backend (built without nvcc, or CUDA=0)");
    return -ENOTSUP;
}

int gm_cuda_device_describe(int index, char *buf, size_t len)
{
    (void)index;
    if (len > 0)
        buf[0] = '\0';
    return -ENOTSUP;
}

int gm_cuda_new(int index, struct gm_cuda **out)
{
    (void)index;
    *out = NULL;
    return -ENOTSUP;
}

void gm_cuda_free(struct gm_cuda *cu)
{
    (void)cu;
}

int gm_cuda_index(const struct gm_cuda *cu)
{
    (void)cu;
    return -1;
}

struct gm_cuda *gm_cuda_current(void)
{
    return NULL;
}

int gm_cuda_take_error(struct gm_cuda *cu)
{
    (void)cu;
    return 0;
}

void gm_cuda_conv_exact(struct gm_cuda *cu, int exact)
{
    (void)cu, (void)exact;
}

const char *gm_cuda_last_error(const struct gm_cuda *cu)
{
    (void)cu;
    return "";
}

int gm_cuda_sync(struct gm_cuda *cu)
{
    (void)cu;
    return -ENOTSUP;
}

int gm_cuda_alloc(struct gm_cuda *cu, size_t bytes, void **out)
{
    (void)cu;
    (void)bytes;
    *out = NULL;
    return -ENOTSUP;
}

void gm_cuda_dealloc(void *p)
{
    (void)p;
}

int gm_cuda_host_alloc(struct gm_cuda *cu, size_t bytes, void **out)
{
    return gm_cuda_alloc(cu, bytes, out);
}

void gm_cuda_host_dealloc(void *p)
{
    (void)p;
}

int gm_cuda_copy(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                 enum gm_cuda_copy_kind kind)
{
    (void)cu;
    (void)dst;
    (void)src;
    (void)bytes;
    (void)kind;
    return -ENOTSUP;
}

int gm_cuda_copy_async(struct gm_cuda *cu, void *dst, const void *src, size_t bytes,
                       enum gm_cuda_copy_kind kind)
{
    return gm_cuda_copy(cu, dst, src, bytes, kind);
}

int gm_cuda_copy_wait(struct gm_cuda *cu)
{
    return gm_cuda_sync(cu);
}

int gm_cuda_marks_new(struct gm_cuda *cu, int n, struct gm_cuda_marks **out)
{
    (void)cu;
    (void)n;
    *out = NULL;
    return -ENOTSUP;
}

void gm_cuda_marks_free(struct gm_cuda_marks *mk)
{
    (void)mk;
}

int gm_cuda_mark_compute(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    (void)mk;
    (void)i;
    return gm_cuda_sync(cu);
}

int gm_cuda_mark_done(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    return gm_cuda_mark_compute(cu, mk, i);
}

int gm_cuda_mark_wait(struct gm_cuda *cu, struct gm_cuda_marks *mk, int i)
{
    return gm_cuda_mark_compute(cu, mk, i);
}

int gm_cuda_download_mark(struct gm_cuda *cu, void *dst_host, const void *src_dev, size_t bytes,
                          struct gm_cuda_marks *mk, int i)
{
    (void)mk;
    (void)i;
    return gm_cuda_copy(cu, dst_host, src_dev, bytes, GM_CUDA_D2H);
}

int gm_cuda_upload(struct gm_cuda *cu, void *dst_dev, const void *src_host, size_t bytes,
                   struct gm_cuda_marks *mk, int after, int done)
{
    (void)mk;
    (void)after;
    (void)done;
    return gm_cuda_copy(cu, dst_dev, src_host, bytes, GM_CUDA_H2D);
}

#endif
