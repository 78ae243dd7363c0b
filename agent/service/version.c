/* agent/service/version.c - see version.h.  Built with -DGM_BUILD_VERSION/-DGM_BUILD_COMMIT. */
#include "agent/service/version.h"

#ifndef GM_BUILD_VERSION
#define GM_BUILD_VERSION "unknown"
#endif
#ifndef GM_BUILD_COMMIT
#define GM_BUILD_COMMIT "unknown"
#endif

const char *gm_version_string(void)
{
    return GM_BUILD_VERSION;
}

const char *gm_version_commit(void)
{
    return GM_BUILD_COMMIT;
}

int gm_version_cuda(void)
{
#if defined(GM_HAVE_CUDA) && GM_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *gm_version_options(void)
{
    return gm_version_cuda() ? "cuda" : "cpu-only";
}
