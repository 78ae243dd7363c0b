/*
 * common/file.h - whole-file helpers every module needs: an atomic write (temp file, fsync,
 * rename, fsync of the directory) and a bounded read of a whole file.
 *
 * The temp file is "<path>.tmp.<pid>" (mode as given, O_EXCL after removing a stale one of
 * this pid), so concurrent writers in different processes never share one; it is removed on
 * failure, and an existing file at path is untouched unless the rename happened.  A
 * directory that cannot be synced (EINVAL, ENOTSUP: some file systems) is not an error.
 * No logging: callers log with their context.  No global state.
 */
#ifndef GM_COMMON_FILE_H
#define GM_COMMON_FILE_H

#include <stddef.h>

#include "common/err.h"

/* fsync of the directory that holds path.  0 or -errno. */
int gm_file_sync_dir(const char *path) GM_MUST_CHECK;

/* Writes len bytes to path atomically with mode (e.g. 0644).  0 or -errno. */
int gm_file_write_atomic(const char *path, const void *data, size_t len, int mode) GM_MUST_CHECK;

/* Reads a regular file of at most max bytes into a malloc'd buffer with a NUL after the
 * last byte (a file that shrinks meanwhile gives what is left).  -EFBIG over max, -EINVAL
 * not a regular file, -errno. */
int gm_file_read(const char *path, size_t max, char **out, size_t *len) GM_MUST_CHECK;

#endif
