/*
 * train/kernels/cuda_libs.h - cuBLAS and cuDNN loaded at run time (dlopen/dlsym), for the
 * CUDA backend's C files (cuda.c, ops_cuda.c).  Only in builds with GM_HAVE_CUDA.
 *
 * Design choices:
 * - The binary's only load-time CUDA dependency is the statically linked runtime
 *   (cudart_static, which itself dlopen()s the driver at its first call).  cuBLAS and
 *   cuDNN weigh about a gigabyte; linking them made every command (`gradmesh --version`,
 *   `gradmesh status`) map them at start-up, and made the binary refuse to start where
 *   they are absent although it is meant to train on the CPU there.  Now they are opened
 *   once, by gm_cuda_new() on the trainer thread, the first time a CUDA device is actually
 *   chosen; the CPU path never opens them.
 * - Search order, for each library: the CUDA library directory the build used
 *   (GM_CUDA_LIBDIR: $(CUDA_HOME)/lib64, /usr/local/cuda/lib64 here), then the dynamic
 *   loader's default path (LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib).  The names are
 *   the sonames of the major versions the build compiled against (libcublas.so.13,
 *   libcublasLt.so.13, libcudnn.so.9, from the headers); cuBLASLt is opened first, from
 *   the same place, so cuBLAS finds it already loaded.
 * - A missing library, or one that lacks a function, is an error that names the library
 *   (or the function) and carries dlerror()'s text; it is remembered, so later calls give
 *   the same answer without searching again.  `device = cuda` fails with it and
 *   `device = auto` logs it and trains on the CPU (train/trainer.c).
 * - The table is the one process-wide state: written once under a mutex, read-only after.
 *   The library names used in the code (cublasSgemm, cudnnConvolutionForward, ...) are
 *   macros below that call through it, so the call sites read like the libraries' docs.
 */
#ifndef GM_TRAIN_KERNELS_CUDA_LIBS_H
#define GM_TRAIN_KERNELS_CUDA_LIBS_H

#if !defined(GM_HAVE_CUDA) || !GM_HAVE_CUDA
#error "cuda_libs.h is only for builds with the CUDA backend"
#endif

#include <stddef.h>

#include <cublas_v2.h>
#include <cudnn.h>

#include "common/err.h"

/* X(function): every cuBLAS and cuDNN function the backend calls, by its exported name
 * (cublas_v2.h maps cublasSgemm to cublasSgemm_v2 and so on). */
#define GM_CUBLAS_FUNCS(X)                                                                         \
    X(cublasCreate_v2)                                                                             \
    X(cublasDestroy_v2)                                                                            \
    X(cublasSetStream_v2)                                                                          \
    X(cublasSetMathMode)                                                                           \
    X(cublasSgemm_v2)                                                                              \
    X(cublasSaxpy_v2)                                                                              \
    X(cublasGetStatusString)

#define GM_CUDNN_FUNCS(X)                                                                          \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnSetStream)                                                                              \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnGetLastErrorString)                                                                     \
    X(cudnnCreateTensorDescriptor)                                                                 \
    X(cudnnDestroyTensorDescriptor)                                                                \
    X(cudnnSetTensor4dDescriptor)                                                                  \
    X(cudnnCreateFilterDescriptor)                                                                 \
    X(cudnnDestroyFilterDescriptor)                                                                \
    X(cudnnSetFilter4dDescriptor)                                                                  \
    X(cudnnCreateConvolutionDescriptor)                                                            \
    X(cudnnDestroyConvolutionDescriptor)                                                           \
    X(cudnnSetConvolution2dDescriptor)                                                             \
    X(cudnnSetConvolutionMathType)                                                                 \
    X(cudnnSetConvolutionGroupCount)                                                               \
    X(cudnnCreateActivationDescriptor)                                                             \
    X(cudnnDestroyActivationDescriptor)                                                            \
    X(cudnnSetActivationDescriptor)                                                                \
    X(cudnnCreatePoolingDescriptor)                                                                \
    X(cudnnDestroyPoolingDescriptor)                                                               \
    X(cudnnSetPooling2dDescriptor)                                                                 \
    X(cudnnFindConvolutionForwardAlgorithm)                                                        \
    X(cudnnFindConvolutionBackwardDataAlgorithm)                                                   \
    X(cudnnFindConvolutionBackwardFilterAlgorithm)                                                 \
    X(cudnnConvolutionForward)                                                                     \
    X(cudnnConvolutionBackwardData)                                                                \
    X(cudnnConvolutionBackwardFilter)                                                              \
    X(cudnnConvolutionBackwardBias)                                                                \
    X(cudnnAddTensor)                                                                              \
    X(cudnnTransformTensor)                                                                        \
    X(cudnnActivationForward)                                                                      \
    X(cudnnActivationBackward)                                                                     \
    X(cudnnPoolingForward)

#define GM_CUDA_LIBS_MEMBER(f) __typeof__(&f) f;
struct gm_cuda_libs {
    void *blas_lt, *blas, *dnn; /* dlopen handles */
    GM_CUBLAS_FUNCS(GM_CUDA_LIBS_MEMBER)
    GM_CUDNN_FUNCS(GM_CUDA_LIBS_MEMBER)
};
#undef GM_CUDA_LIBS_MEMBER

/* The library files, by soname. */
#define GM_CUDA_LIB_CUBLASLT "libcublasLt.so." GM_CUDA_LIBS_STR(CUBLAS_VER_MAJOR)
#define GM_CUDA_LIB_CUBLAS "libcublas.so." GM_CUDA_LIBS_STR(CUBLAS_VER_MAJOR)
#define GM_CUDA_LIB_CUDNN "libcudnn.so." GM_CUDA_LIBS_STR(CUDNN_MAJOR)
#define GM_CUDA_LIBS_STR(x) GM_CUDA_LIBS_STR2(x)
#define GM_CUDA_LIBS_STR2(x) #x

/* Opens the three libraries and resolves every function into *out.  Each library is
 * looked for in dirs[0..ndirs) in order, then (use_default) by its bare name through the
 * dynamic loader's path.  0, or GM_ERR_GPU with why naming the library or function and
 * dlerror()'s text; nothing stays open on failure. */
int gm_cuda_libs_open(const char *const *dirs, int ndirs, int use_default, struct gm_cuda_libs *out,
                      char *why, size_t whylen) GM_MUST_CHECK;
void gm_cuda_libs_close(struct gm_cuda_libs *l); /* NULL-safe */

/* The process's table: opened on the first call (GM_CUDA_LIBDIR, then the default path),
 * thread-safe; the first answer (0 or the error, with why) is kept for every later call. */
int gm_cuda_libs_load(char *why, size_t whylen) GM_MUST_CHECK;
/* The directory the build searches first. */
const char *gm_cuda_libs_dir(void);

/* The table gm_cuda_libs_load() filled; only valid after it returned 0. */
extern struct gm_cuda_libs gm_cudalib;

/* The library names call through the table (after gm_cuda_libs_load() returned 0).
 * cuda_libs.c, which fills the table by those names, goes without. */
#ifndef GM_CUDA_LIBS_NO_CALL_MACROS
#define cublasCreate_v2 gm_cudalib.cublasCreate_v2
#define cublasDestroy_v2 gm_cudalib.cublasDestroy_v2
#define cublasSetStream_v2 gm_cudalib.cublasSetStream_v2
#define cublasSetMathMode gm_cudalib.cublasSetMathMode
#define cublasSgemm_v2 gm_cudalib.cublasSgemm_v2
#define cublasSaxpy_v2 gm_cudalib.cublasSaxpy_v2
#define cublasGetStatusString gm_cudalib.cublasGetStatusString
#define cudnnCreate gm_cudalib.cudnnCreate
#define cudnnDestroy gm_cudalib.cudnnDestroy
#define cudnnSetStream gm_cudalib.cudnnSetStream
#define cudnnGetErrorString gm_cudalib.cudnnGetErrorString
#define cudnnGetLastErrorString gm_cudalib.cudnnGetLastErrorString
#define cudnnCreateTensorDescriptor gm_cudalib.cudnnCreateTensorDescriptor
#define cudnnDestroyTensorDescriptor gm_cudalib.cudnnDestroyTensorDescriptor
#define cudnnSetTensor4dDescriptor gm_cudalib.cudnnSetTensor4dDescriptor
#define cudnnCreateFilterDescriptor gm_cudalib.cudnnCreateFilterDescriptor
#define cudnnDestroyFilterDescriptor gm_cudalib.cudnnDestroyFilterDescriptor
#define cudnnSetFilter4dDescriptor gm_cudalib.cudnnSetFilter4dDescriptor
#define cudnnCreateConvolutionDescriptor gm_cudalib.cudnnCreateConvolutionDescriptor
#define cudnnDestroyConvolutionDescriptor gm_cudalib.cudnnDestroyConvolutionDescriptor
#define cudnnSetConvolution2dDescriptor gm_cudalib.cudnnSetConvolution2dDescriptor
#define cudnnSetConvolutionMathType gm_cudalib.cudnnSetConvolutionMathType
#define cudnnSetConvolutionGroupCount gm_cudalib.cudnnSetConvolutionGroupCount
#define cudnnCreateActivationDescriptor gm_cudalib.cudnnCreateActivationDescriptor
#define cudnnDestroyActivationDescriptor gm_cudalib.cudnnDestroyActivationDescriptor
#define cudnnSetActivationDescriptor gm_cudalib.cudnnSetActivationDescriptor
#define cudnnCreatePoolingDescriptor gm_cudalib.cudnnCreatePoolingDescriptor
#define cudnnDestroyPoolingDescriptor gm_cudalib.cudnnDestroyPoolingDescriptor
#define cudnnSetPooling2dDescriptor gm_cudalib.cudnnSetPooling2dDescriptor
#define cudnnFindConvolutionForwardAlgorithm gm_cudalib.cudnnFindConvolutionForwardAlgorithm
#define cudnnFindConvolutionBackwardDataAlgorithm                                                  \
    gm_cudalib.cudnnFindConvolutionBackwardDataAlgorithm
#define cudnnFindConvolutionBackwardFilterAlgorithm                                                \
    gm_cudalib.cudnnFindConvolutionBackwardFilterAlgorithm
#define cudnnConvolutionForward gm_cudalib.cudnnConvolutionForward
#define cudnnConvolutionBackwardData gm_cudalib.cudnnConvolutionBackwardData
#define cudnnConvolutionBackwardFilter gm_cudalib.cudnnConvolutionBackwardFilter
#define cudnnConvolutionBackwardBias gm_cudalib.cudnnConvolutionBackwardBias
#define cudnnAddTensor gm_cudalib.cudnnAddTensor
#define cudnnTransformTensor gm_cudalib.cudnnTransformTensor
#define cudnnActivationForward gm_cudalib.cudnnActivationForward
#define cudnnActivationBackward gm_cudalib.cudnnActivationBackward
#define cudnnPoolingForward gm_cudalib.cudnnPoolingForward
#endif

#endif
