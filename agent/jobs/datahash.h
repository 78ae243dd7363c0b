/*
 * agent/jobs/datahash.h - SHA-256 of a job's dataset files, for the check that
 * every member trains on the same bytes.
 *
 * The files are the regular files of the job's data dir (recursively for
 * kind = folder), hidden names skipped, sorted by relative path.  Hashing
 * runs on libuv's threadpool; results are cached by (path, size, mtime) so a
 * dataset is read once per agent until it changes.  The cache is guarded by
 * its own mutex (threadpool threads); the callback runs on the loop thread.
 *
 * A dataset may hold any number of files (up to GM_DATAHASH_FILES_MAX); a member's
 * JOB_CHECK carries at most GM_JOB_FILES_MAX entries, so gm_datahash_group sums a larger list
 * into groups (one per class folder, or per name bucket) that the coordinator recomputes from
 * its own list and compares: a difference is then named by its folder, not its file.
 */
#ifndef GM_AGENT_JOBS_DATAHASH_H
#define GM_AGENT_JOBS_DATAHASH_H

#include <stddef.h>

#include <uv.h>

#include "agent/jobs/jobmsg.h"
#include "common/err.h"

#define GM_DATAHASH_FILES_MAX (1u << 22) /* files in one dataset: a bound on memory */

struct gm_datahash;

/* files: malloc'd (free()), n of them; error: "" or why the dir cannot be hashed. */
typedef void (*gm_datahash_cb)(void *arg, struct gm_jobfile *files, size_t n, const char *error);

GM_MUST_CHECK int gm_datahash_new(uv_loop_t *loop, struct gm_datahash **out);
/* Frees once no hashing is in flight (callbacks of pending work still run,
 * with arg as given: the caller keeps arg alive or ignores them). */
void gm_datahash_free(struct gm_datahash *d);
GM_MUST_CHECK int gm_datahash_start(struct gm_datahash *d, const char *dir, int recursive,
                                    gm_datahash_cb cb, void *arg);

/* The finest grouping of files (sorted by name, as the callback gives them) whose entries fit
 * one JOB_CHECK: FILE for at most GM_JOB_FILES_MAX files, else DIR when the top-level entries
 * fit, else BUCKET (256 at most).  Pure; any thread. */
enum gm_jobfile_group gm_datahash_pick(const struct gm_jobfile *files, size_t n);
/* files (sorted by name) summed into group g's entries, sorted by name, in *out (malloc'd, n_out
 * of them); FILE copies them.  Each group's sha256 is SHA-256 over its files' "name\0size\0
 * sha256\n" in name order, so both sides compute the same entries from the same files.
 * -ENOMEM; pure otherwise. */
GM_MUST_CHECK int gm_datahash_group(const struct gm_jobfile *files, size_t n,
                                    enum gm_jobfile_group g, struct gm_jobfile **out,
                                    size_t *n_out);

#endif
