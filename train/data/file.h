/*
 * train/data/file.h - what the format readers (idx.c, cifar.c, folder.c) share: a data file
 * opened through zlib (gzip or plain, one code path), whole files into memory, path joining and
 * class-name lists.  Not a public interface of train/data/ (that is data.h).
 *
 * Every function that fails logs the one line ("<path>: <problem>") and returns GM_ERR_DATA
 * (-ENOMEM on allocation failure); callers only pass the code up.  No global state.
 */
#ifndef GM_TRAIN_DATA_FILE_H
#define GM_TRAIN_DATA_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "common/err.h"

#define GM_DATA_FIRST_ALLOC ((size_t)1 << 24) /* first buffer for a stream of unknown size */

struct gm_data_src {
    gzFile gz;        /* owned */
    const char *path; /* borrowed */
    uint64_t size;    /* on-disk size from fstat */
};

/* Opens path (a regular file) for reading, gzip or plain.  Logs on failure. */
int gm_data_src_open(struct gm_data_src *s, const char *path) GM_MUST_CHECK;
/* NULL-safe for a zeroed or closed source; idempotent. */
void gm_data_src_close(struct gm_data_src *s);
/* 1 when the file is gzip-compressed (zlib looks ahead when nothing was read yet). */
int gm_data_src_is_gz(struct gm_data_src *s);
/* Reads up to want bytes; *got < want only at end of file.  Logs on error. */
int gm_data_src_read(struct gm_data_src *s, uint8_t *dst, size_t want, size_t *got) GM_MUST_CHECK;

/* Whole file (gzip inflated, plain passed through) into *buf, owned by the caller, which has
 * room for len + 1 bytes (so text can be NUL-terminated); more than max bytes is an error.
 * Logs one line on failure (GM_ERR_DATA or -ENOMEM). */
int gm_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len) GM_MUST_CHECK;

/* *out = NULL-terminated copy of names[0..n) (each strdup'd); *out = NULL when names is NULL.
 * 0 or -ENOMEM. */
int gm_data_names_dup(char *const *names, int n, char ***out) GM_MUST_CHECK;
/* Frees a NULL-terminated array of names and the names; NULL-safe. */
void gm_data_names_free(char **names);

/* buf = a "/" b; logs and returns GM_ERR_DATA when it does not fit. */
int gm_data_path_join(char *buf, size_t size, const char *a, const char *b) GM_MUST_CHECK;

#endif
