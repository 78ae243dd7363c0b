/*
 * tests/unit/test_cuda_libs.c - the run-time loader of cuBLAS and cuDNN
 * (train/kernels/cuda_libs.h), which needs no GPU, only the libraries' files:
 *   - a directory without them, and no default path: the error names the library, the
 *     place looked in and dlerror()'s text, and nothing stays open;
 *   - the build's CUDA library directory: every function of the table resolves (checks the
 *     exported names, cuBLAS's _v2 ones included), and two of them answer through it;
 *   - gm_cuda_libs_load(), the process's table: with GM_TEST_CUDA_LIBS=missing (set by
 *     tests/integration/cuda_libs_absent.sh, which hides the directory in a mount namespace
 *     and empties LD_LIBRARY_PATH) it must fail naming the library, twice alike (the answer
 *     is kept); with GM_TEST_CUDA_LIBS=found (tests/integration/gpu_check_sim.sh: they are
 *     in a PyTorch wheel's folders, given through LD_LIBRARY_PATH) it must succeed and
 *     print the files it loaded; otherwise it must succeed where the directory has them.
 * Skips (77) in a build without the CUDA backend.
 */
/* dlinfo: _GNU_SOURCE comes from the Makefile */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"
#include "train/kernels/cuda.h"

GM_TEST_DEFINE_STATE;

#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA
/* the table's members by name (l.cublasSgemm_v2), not the macros that call through it */
#define GM_CUDA_LIBS_NO_CALL_MACROS
#include "train/kernels/cuda_libs.h"

static void test_missing_dir(void)
{
    static const char *const dirs[] = {"/nonexistent-gradmesh-cuda-libs"};
    struct gm_cuda_libs l;
    char why[512];

    memset(&l, 0x5a, sizeof(l));
    GM_CHECK_ERR(gm_cuda_libs_open(dirs, 1, 0, &l, why, sizeof(why)), GM_ERR_GPU);
    fprintf(stderr, "  missing: %s\n", why);
    GM_CHECK(strstr(why, GM_CUDA_LIB_CUBLASLT) != NULL);
    GM_CHECK(strstr(why, "/nonexistent-gradmesh-cuda-libs") != NULL);
    GM_CHECK(strstr(why, "cannot open shared object file") != NULL); /* dlerror() */
    GM_CHECK(l.blas_lt == NULL && l.blas == NULL && l.dnn == NULL);
}

static int dir_has_libs(const char *dir)
{
    static const char *const names[] = {GM_CUDA_LIB_CUBLASLT, GM_CUDA_LIB_CUBLAS,
                                        GM_CUDA_LIB_CUDNN};
    char path[512];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (access(path, R_OK) != 0)
            return 0;
    }
    return 1;
}

static void test_build_dir(void)
{
    const char *dirs[] = {gm_cuda_libs_dir()};
    struct gm_cuda_libs l;
    char why[512];

    if (!dir_has_libs(dirs[0])) {
        fprintf(stderr, "  %s lacks the libraries: resolving not checked here\n", dirs[0]);
        return;
    }
    GM_CHECK_ERR(gm_cuda_libs_open(dirs, 1, 0, &l, why, sizeof(why)), 0);
    if (l.dnn == NULL)
        return;
#define NONNULL(f) GM_CHECK(l.f != NULL);
    GM_CUBLAS_FUNCS(NONNULL)
    GM_CUDNN_FUNCS(NONNULL)
#undef NONNULL
    /* neither needs a GPU: the libraries' own status strings, through the table */
    GM_CHECK(strstr(l.cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED), "allocation") != NULL);
    GM_CHECK(strstr(l.cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "BAD_PARAM") != NULL);
    gm_cuda_libs_close(&l);
    GM_CHECK(l.dnn == NULL);
}

/* The file a dlopen handle came from. */
static const char *loaded_from(void *handle)
{
    struct link_map *lm = NULL;

    if (handle == NULL || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL)
        return "?";
    return lm->l_name;
}

static void test_process_table(void)
{
    const char *mode = getenv("GM_TEST_CUDA_LIBS");
    char why[512], again[512];
    int err;

    why[0] = again[0] = '\0';
    err = gm_cuda_libs_load(why, sizeof(why));
    if (mode != NULL && strcmp(mode, "missing") == 0) {
        GM_CHECK_ERR(err, GM_ERR_GPU);
        fprintf(stderr, "  hidden: %s\n", why);
        GM_CHECK(strstr(why, GM_CUDA_LIB_CUBLASLT) != NULL);
        GM_CHECK(strstr(why, gm_cuda_libs_dir()) != NULL);
        GM_CHECK(strstr(why, "default path") != NULL);
        GM_CHECK_ERR(gm_cuda_libs_load(again, sizeof(again)), GM_ERR_GPU);
        GM_CHECK(strcmp(why, again) == 0);
        return;
    }
    if (mode != NULL && strcmp(mode, "found") == 0) {
        /* bench/gpu_check.sh found them somewhere (tests/integration/gpu_check_sim.sh: a
         * PyTorch wheel's folders) and gave that to this binary alone: they must load, and
         * say from where */
        GM_CHECK_ERR(err, 0);
        if (err == 0) {
            fprintf(stderr, "  loaded: %s\n  loaded: %s\n  loaded: %s\n",
                    loaded_from(gm_cudalib.blas_lt), loaded_from(gm_cudalib.blas),
                    loaded_from(gm_cudalib.dnn));
            GM_CHECK(strstr(gm_cudalib.cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success") !=
                     NULL);
        }
        return;
    }
    if (!dir_has_libs(gm_cuda_libs_dir())) {
        fprintf(stderr, "  %s lacks the libraries: load %s\n", gm_cuda_libs_dir(),
                err == 0 ? "found them on the default path" : why);
        return;
    }
    GM_CHECK_ERR(err, 0);
    GM_CHECK(strstr(gm_cudalib.cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success") != NULL);
}

int main(void)
{
    GM_TEST_RUN(test_missing_dir);
    GM_TEST_RUN(test_build_dir);
    GM_TEST_RUN(test_process_table);
    return gm_test_finish("test_cuda_libs");
}
#else
int main(void)
{
    printf("test_cuda_libs: SKIP: this build has no CUDA backend (no nvcc, CUDA=0 or a "
           "sanitizer build)\n");
    return GM_EXIT_SKIP;
}
#endif
