/*
 * common/err.c - names for gradmesh error codes.  Negative errno values are
 * named by strerror(3) (thread-safe variant), project codes by the table below.
 */
#include "common/err.h"

#include <errno.h>
#include <string.h>

static const char *const names[] = {
    [-(GM_ERR_CONFIG - GM_ERR_BASE)] = "configuration error",
    [-(GM_ERR_DATA - GM_ERR_BASE)] = "bad or truncated data file",
    [-(GM_ERR_FORMAT - GM_ERR_BASE)] = "malformed input",
    [-(GM_ERR_SHAPE - GM_ERR_BASE)] = "tensor shapes do not match",
    [-(GM_ERR_NUMERIC - GM_ERR_BASE)] = "non-finite value (NaN or Inf)",
    [-(GM_ERR_TOKEN - GM_ERR_BASE)] = "invalid invite token",
    [-(GM_ERR_AUTH - GM_ERR_BASE)] = "authentication failed",
    [-(GM_ERR_PROTO - GM_ERR_BASE)] = "protocol error",
    [-(GM_ERR_MISMATCH - GM_ERR_BASE)] = "peers disagree",
    [-(GM_ERR_ABORTED - GM_ERR_BASE)] = "operation aborted",
    [-(GM_ERR_REGROUP - GM_ERR_BASE)] = "training group changed",
    [-(GM_ERR_GPU - GM_ERR_BASE)] = "GPU library call failed",
};

const char *gm_strerror(int err)
{
    if (err == 0)
        return "success";
    if (err < GM_ERR_BASE && err > GM_ERR_LAST) {
        const char *s = names[-(err - GM_ERR_BASE)];
        return s != NULL ? s : "unknown gradmesh error";
    }
    if (err < 0 && err > -4000) {
        /* strerrordesc_np is glibc >= 2.32 and returns a static string. */
        const char *s = strerrordesc_np(-err);
        return s != NULL ? s : "unknown error";
    }
    return "unknown error";
}

int gm_err_exit_code(int err)
{
    switch (err) {
    case 0:
        return GM_EXIT_OK;
    case GM_ERR_CONFIG:
    case GM_ERR_DATA:
    case GM_ERR_FORMAT:
    case GM_ERR_TOKEN:
        return GM_EXIT_CONFIG;
    default:
        return GM_EXIT_RUNTIME;
    }
}
