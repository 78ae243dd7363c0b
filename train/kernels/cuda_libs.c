/*
 * train/kernels/cuda_libs.c - opens cuBLAS and cuDNN at run time (cuda_libs.h has the
 * design and the search order).  Compiled in every build; empty without GM_HAVE_CUDA.
 */
#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA

#define GM_CUDA_LIBS_NO_CALL_MACROS
#include "train/kernels/cuda_libs.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

#ifndef GM_CUDA_LIBDIR
#define GM_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

struct gm_cuda_libs gm_cudalib;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_done, load_err;
static char load_why[512];

const char *gm_cuda_libs_dir(void)
{
    return GM_CUDA_LIBDIR;
}

/* dlopen()s name from the first of dirs that has it, else through the default path.  NULL
 * with why naming the library and every place tried (dlerror() of the last). */
static void *open_lib(const char *name, const char *const *dirs, int ndirs, int use_default,
                      char *why, size_t whylen)
{
    char path[512], tried[256] = "";
    const char *last = "not searched";
    void *h;

    for (int i = 0; i < ndirs; i++) {
        snprintf(path, sizeof(path), "%s/%s", dirs[i], name);
        if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
        last = dlerror();
        snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s", tried[0] ? ", " : "",
                 dirs[i]);
    }
    if (use_default) {
        if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
        last = dlerror();
        snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s", tried[0] ? ", " : "",
                 "the loader's default path");
    }
    snprintf(why, whylen, "cannot load %s (looked in %s): %s", name, tried[0] ? tried : "nowhere",
             last != NULL ? last : "?");
    return NULL;
}

void gm_cuda_libs_close(struct gm_cuda_libs *l)
{
    if (l == NULL)
        return;
    if (l->dnn != NULL)
        dlclose(l->dnn);
    if (l->blas != NULL)
        dlclose(l->blas);
    if (l->blas_lt != NULL)
        dlclose(l->blas_lt);
    memset(l, 0, sizeof(*l));
}

int gm_cuda_libs_open(const char *const *dirs, int ndirs, int use_default, struct gm_cuda_libs *out,
                      char *why, size_t whylen)
{
    struct gm_cuda_libs l;
    const char *lib = "", *fname = "";
    void *sym;

    memset(&l, 0, sizeof(l));
    memset(out, 0, sizeof(*out));
    if ((l.blas_lt = open_lib(GM_CUDA_LIB_CUBLASLT, dirs, ndirs, use_default, why, whylen)) ==
            NULL ||
        (l.blas = open_lib(GM_CUDA_LIB_CUBLAS, dirs, ndirs, use_default, why, whylen)) == NULL ||
        (l.dnn = open_lib(GM_CUDA_LIB_CUDNN, dirs, ndirs, use_default, why, whylen)) == NULL) {
        gm_cuda_libs_close(&l);
        return GM_ERR_GPU;
    }
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer */
#define RESOLVE(handle, libname, f)                                                                \
    do {                                                                                           \
        lib = libname;                                                                             \
        fname = #f;                                                                                \
        (void)dlerror();                                                                           \
        if ((sym = dlsym(handle, #f)) == NULL)                                                     \
            goto missing;                                                                          \
        memcpy(&l.f, &sym, sizeof(sym));                                                           \
    } while (0);
#define RESOLVE_BLAS(f) RESOLVE(l.blas, GM_CUDA_LIB_CUBLAS, f)
#define RESOLVE_DNN(f) RESOLVE(l.dnn, GM_CUDA_LIB_CUDNN, f)
    GM_CUBLAS_FUNCS(RESOLVE_BLAS)
    GM_CUDNN_FUNCS(RESOLVE_DNN)
#undef RESOLVE_DNN
#undef RESOLVE_BLAS
#undef RESOLVE
    *out = l;
    return 0;
missing : {
    const char *e = dlerror();
    snprintf(why, whylen, "%s has no function %s: %s", lib, fname,
             e != NULL ? e : "the symbol is NULL");
}
    gm_cuda_libs_close(&l);
    return GM_ERR_GPU;
}

/* The file a handle was opened from (its link map's name). */
static const char *file_of(void *handle)
{
    struct link_map *lm = NULL;

    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL || lm->l_name == NULL)
        return "?";
    return lm->l_name;
}

int gm_cuda_libs_load(char *why, size_t whylen)
{
    static const char *const dirs[] = {GM_CUDA_LIBDIR};

    pthread_mutex_lock(&load_lock);
    if (!load_done) {
        load_err = gm_cuda_libs_open(dirs, 1, 1, &gm_cudalib, load_why, sizeof(load_why));
        load_done = 1;
        if (load_err == 0) /* the files, wherever the search found them */
            gm_info("event=cuda_libs cublaslt=%s cublas=%s cudnn=%s", file_of(gm_cudalib.blas_lt),
                    file_of(gm_cudalib.blas), file_of(gm_cudalib.dnn));
    }
    if (load_err < 0)
        snprintf(why, whylen, "%s", load_why);
    pthread_mutex_unlock(&load_lock);
    return load_err;
}

#else
/* ISO C wants a translation unit to declare something. */
typedef int gm_cuda_libs_unused;
#endif
