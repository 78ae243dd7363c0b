/*
 * agent/jobs/datahash.h - SHA-256 of a job's dataset files, for the check that
 * every member trains on the same bytes.
 *
 * The files are the regular files of the job's data dir (recursively for
 * kind = folder), hidden names skipped, sorted by relative path.  Hashing
 * runs on libuv's threadpool; results are cached by (path, size, mtime) so a
 * dataset is read once per agent until it changes.  The cache is guarded by
 * its own mutex (threadpool threads); the callback runs on the loop thread.
 */
#ifndef GM_AGENT_JOBS_DATAHASH_H
#define GM_AGENT_JOBS_DATAHASH_H

#include <stddef.h>

#include <uv.h>

#include "agent/jobs/jobmsg.h"
#include "common/err.h"

struct gm_datahash;

/* files: malloc'd (free()), n of them; error: "" or why the dir cannot be hashed. */
typedef void (*gm_datahash_cb)(void *arg, struct gm_jobfile *files, size_t n, const char *error);

GM_MUST_CHECK int gm_datahash_new(uv_loop_t *loop, struct gm_datahash **out);
/* Frees once no hashing is in flight (callbacks of pending work still run,
 * with arg as given: the caller keeps arg alive or ignores them). */
void gm_datahash_free(struct gm_datahash *d);
GM_MUST_CHECK int gm_datahash_start(struct gm_datahash *d, const char *dir, int recursive,
                                    gm_datahash_cb cb, void *arg);

#endif
