/*
 * common/err.h - error codes shared by every module.
 *
 * Convention (the house style): fallible functions return 0 or a negative
 * number.  Negative errno values (-ENOMEM, -EINVAL, ...) and libuv codes pass
 * through unchanged; codes specific to gradmesh live below GM_ERR_BASE (-4000) so
 * they never collide with either.  gm_strerror() names every one of them.
 *
 * Thread-safe: no state.
 */
#ifndef GM_COMMON_ERR_H
#define GM_COMMON_ERR_H

#define GM_MUST_CHECK __attribute__((warn_unused_result))

/* Process exit codes (sysexits-compatible where it matters: 78 = EX_CONFIG). */
#define GM_EXIT_OK 0
#define GM_EXIT_RUNTIME 1
#define GM_EXIT_USAGE 2
#define GM_EXIT_CONFIG 78
#define GM_EXIT_SKIP 77 /* tests only: automake's "skipped" */
/* sysexits' EX_NOPERM (the same number as the tests' skip, which only test scripts use): a
 * file the agent needs belongs to another user.  Not a configuration error: gradmesh@.service
 * restarts it (Restart=on-failure), so a chown fixes it without touching the unit. */
#define GM_EXIT_NOPERM 77

enum gm_err {
    GM_ERR_BASE = -4000,
    GM_ERR_CONFIG = -4001, /* bad configuration or job file */
    GM_ERR_DATA = -4002,   /* bad or truncated dataset file */
    GM_ERR_FORMAT = -4003, /* malformed bytes (wrong magic, bad header) */
    GM_ERR_SHAPE = -4004,  /* tensor shapes do not fit together */
    /* was GM_ERR_DEVICE; "not on this device" is -ENOTSUP (house style). Never returned,
     * kept so the codes after it keep their values. */
    GM_ERR_RETIRED_DEVICE = -4005,
    GM_ERR_NUMERIC = -4006,  /* NaN or Inf where a finite value is required */
    GM_ERR_TOKEN = -4007,    /* bad, expired, revoked or used invite token */
    GM_ERR_AUTH = -4008,     /* authentication or pin check failed */
    GM_ERR_PROTO = -4009,    /* peer broke the wire protocol */
    GM_ERR_MISMATCH = -4010, /* peers disagree (sizes, codecs, steps) */
    GM_ERR_ABORTED = -4011,  /* operation aborted (peer lost, shutdown) */
    GM_ERR_REGROUP = -4012,  /* the training group changed: re-synchronize, then go on */
    GM_ERR_GPU = -4013,      /* a CUDA, cuBLAS or cuDNN call failed (logged with its message) */
    GM_ERR_LAST = -4014,
};

/* Returns a static string naming any error returned by a gradmesh function. */
const char *gm_strerror(int err);

/* Maps an error code to the process exit code the CLI uses for it. */
int gm_err_exit_code(int err);

#endif
