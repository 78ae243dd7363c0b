/*
 * train/ckpt/safetensors.h - checkpoint and weight files in Hugging Face's safetensors format.
 *
 * Layout: u64 little-endian N, N bytes of JSON header, then the data section.  The header maps
 * each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
 * the data section) and may hold "__metadata__": {string: string}.
 *
 * Writer (F32 only): header made with jansson (compact, tensors in the order given after the
 * metadata), padded with spaces so that N is a multiple of 8 and the data section starts
 * 8-aligned; tensors packed back to back in the order given.  The file appears atomically:
 * "<path>.tmp.<pid>" is written, fsync'd, renamed over path, then the directory is fsync'd;
 * on failure the temp file is removed and an existing file at path is untouched.
 *
 * Reader: checks everything before trusting it and returns GM_ERR_FORMAT for any
 * inconsistency: N against the file size and GM_ST_HEADER_MAX before anything is allocated;
 * the header must start with '{' and be one JSON object (no duplicate keys, nothing after
 * it but spaces); every field has the right type and no unknown fields; dtype is F32, F16,
 * BF16 or F64 (others are refused); shape has at most GM_ST_MAX_DIMS non-negative dims;
 * numel * dtype size == end - begin, computed without overflow; and the tensors tile the
 * data section exactly (sorted by offset: no gaps, no overlaps, no trailing bytes), as the
 * reference implementation requires.  Tensor data is not copied: entries point into the file
 * buffer and may be unaligned; read them with gm_safetensors_to_f32.
 *
 * Logging: each failing call logs one line ("<path>: ..." or "<memory>: ..." for parse).
 * Byte order: data is little-endian on disk; the writer swaps on big-endian hosts and the
 * reader assembles values byte by byte, so both work on any host.
 * Threads: no shared state; calls on different structs may run concurrently (the trainer
 * writes checkpoints from libuv's threadpool).
 */
#ifndef GM_TRAIN_CKPT_SAFETENSORS_H
#define GM_TRAIN_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_ST_WRITE_MAX_DIMS 4        /* writer input */
#define GM_ST_MAX_DIMS 8              /* reader */
#define GM_ST_HEADER_MAX (100u << 20) /* bytes of JSON header at most */

/* Writer input: an F32 tensor, row-major, native floats. */
struct gm_st_tensor {
    const char *name;  /* borrowed; non-empty UTF-8, unique, not "__metadata__" */
    const float *data; /* borrowed; numel floats (may be NULL when numel == 0) */
    int ndim;          /* 0 (scalar) .. GM_ST_WRITE_MAX_DIMS */
    int64_t shape[GM_ST_WRITE_MAX_DIMS];
};

/* A metadata pair: writer input, and the reader's view (then pointing into the file). */
struct gm_st_meta {
    const char *key;   /* UTF-8, unique */
    const char *value; /* UTF-8 */
};

enum gm_st_dtype {
    GM_ST_DTYPE_F32,
    GM_ST_DTYPE_F16,
    GM_ST_DTYPE_BF16,
    GM_ST_DTYPE_F64,
};

/* One tensor of a parsed file. */
struct gm_st_entry {
    const char *name; /* borrowed from the file's string table */
    enum gm_st_dtype dtype;
    int ndim;
    int64_t shape[GM_ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* borrowed: little-endian bytes in the file buffer, maybe unaligned */
    size_t nbytes;
};

struct gm_st_file {
    struct gm_st_entry *tensors; /* owned; in header order */
    size_t n_tensors;
    struct gm_st_meta *meta; /* owned array; strings in strtab */
    size_t n_meta;
    char *strtab; /* owned: every name, key and value, NUL-terminated */
    uint8_t *buf; /* owned by gm_safetensors_load; NULL after gm_safetensors_parse */
    size_t len;   /* bytes of the file */
};

/* Writes tensors t[0..nt) and metadata meta[0..nm) (nm may be 0: no "__metadata__") to path,
 * atomically.  -EINVAL for bad input (nothing touched), -errno for I/O failures. */
int gm_safetensors_write(const char *path, const struct gm_st_tensor *t, size_t nt,
                         const struct gm_st_meta *meta, size_t nm) GM_MUST_CHECK;

/* Parses and validates a whole file held in memory.  out borrows buf (tensor data points into
 * it): buf must outlive out.  GM_ERR_FORMAT on any inconsistency, -ENOMEM. */
int gm_safetensors_parse(const uint8_t *buf, size_t len, struct gm_st_file *out) GM_MUST_CHECK;

/* Reads path into memory (owned by out) and parses it.  -errno if it cannot be read. */
int gm_safetensors_load(const char *path, struct gm_st_file *out) GM_MUST_CHECK;

/* The tensor called name, or NULL. */
const struct gm_st_entry *gm_safetensors_find(const struct gm_st_file *f, const char *name);

/* The metadata value for key, or NULL. */
const char *gm_safetensors_meta(const struct gm_st_file *f, const char *key);

/* Converts a tensor of any supported dtype to n native floats (F64 rounds to nearest, may
 * overflow to +-Inf).  -EINVAL if n != e->numel. */
int gm_safetensors_to_f32(const struct gm_st_entry *e, float *dst, size_t n) GM_MUST_CHECK;

/* "F32", "F16", "BF16", "F64"; "?" if out of range. */
const char *gm_safetensors_dtype_name(enum gm_st_dtype d);
/* Bytes per element; 0 if out of range. */
size_t gm_safetensors_dtype_size(enum gm_st_dtype d);

/* Releases what f owns; NULL-safe, idempotent, leaves f zeroed. */
void gm_safetensors_free(struct gm_st_file *f);

#endif
