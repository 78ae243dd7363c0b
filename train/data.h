/*
 * train/data.h - datasets for the trainer: loading (IDX, CIFAR-10 binary, image folders),
 * per-batch conversion to float, and the per-rank shuffled sampler.
 *
 * Choices:
 * - Samples stay in memory as uint8 in CHW order; gm_dataset_batch converts a batch to float
 *   (byte * (1/255), within 1 ulp of byte/255) on every step.  Labels are uint8, so at most
 *   256 classes.
 * - Bad input never asserts or crashes: every failure of gm_dataset_load logs exactly one line
 *   with gm_err naming the file and the problem and returns GM_ERR_DATA (-ENOMEM only for
 *   allocation failure, GM_ERR_CONFIG for a bad gm_data_spec, -EINVAL for NULL arguments).
 * - IDX: the four standard Fashion-MNIST/MNIST names in spec->dir, each plain or ".gz" (plain is
 *   preferred when both exist; read with zlib's gz* functions, which also read plain files).
 *   The byte-level checks live in the pure in-memory parser gm_idx_parse (fuzzed by
 *   tests/fuzz/fuzz_idx.c).  classes = max label + 1 over train and test together.
 * - CIFAR-10: data_batch_1.bin .. data_batch_5.bin (train, in that order) and test_batch.bin,
 *   records of 1 label byte (< 10) + 3x32x32 CHW bytes; names from the optional
 *   batches.meta.txt.
 * - folder: dir/<class>/<image> like PyTorch's ImageFolder; see data_folder.c for decoding,
 *   channel conversion, resizing and the train/test split.
 *
 * Files: data.c (dispatch, file reader, IDX, batches), data_cifar.c, data_folder.c,
 * data_sampler.c; the generator behind the sampler and the folder split is train/rng.h.
 *
 * Threads: loading is synchronous and touches nothing global but the log; call it from any one
 * thread.  gm_dataset_batch only reads the dataset, so several threads may share one.
 */
#ifndef GM_TRAIN_DATA_H
#define GM_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct gm_dataset {
    uint8_t *images; /* owned: n samples, each c*h*w bytes, CHW order (NULL when n == 0) */
    uint8_t *labels; /* owned: n labels, each < classes */
    size_t n;
    int c, h, w;
    int classes;        /* 1..256 */
    char **class_names; /* owned: NULL, or `classes` names followed by a NULL pointer */
};

struct gm_data_spec {
    const char *kind; /* "idx" | "cifar10" | "folder" */
    const char *dir;
    double test_split; /* folder only: fraction held out for test, [0, 1) (caller default 0.1) */
    int image_size;    /* folder only: resize (bilinear) to image_size x image_size; 0 = keep the
                          size of the first image and require all the same */
    int channels;      /* folder only: 1 (grayscale) or 3 (RGB) */
    uint64_t seed;     /* folder only: which samples go to test */
};

/* Limits that keep a bad header from asking for absurd memory. */
#define GM_DATA_MAX_SAMPLE_BYTES ((size_t)1 << 26) /* c*h*w of one sample */
#define GM_DATA_MAX_BYTES ((uint64_t)1 << 36)      /* all samples of one file or split */
#define GM_DATA_MAX_SAMPLES ((uint64_t)UINT32_MAX) /* sampler indices are uint32_t */

/* Loads spec into *train and *test (both cleared on entry, both freed on failure). */
int gm_dataset_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                    struct gm_dataset *test) GM_MUST_CHECK;
/* Releases what d owns and zeroes it; NULL-safe and idempotent. */
void gm_dataset_free(struct gm_dataset *d);
/* x[i] = byte/255 for the samples idx[0..count) (x holds count*c*h*w floats), y[k] = label.
 * Every idx[k] must be < d->n (checked: a violation is a programmer error and aborts). */
void gm_dataset_batch(const struct gm_dataset *d, const uint32_t *idx, size_t count, float *x,
                      int32_t *y);
/* Bytes of one sample, c*h*w. */
size_t gm_dataset_sample_bytes(const struct gm_dataset *d);

/* ---- IDX (http://yann.lecun.com/exdb/mnist/): big-endian header, then unsigned bytes ---- */

#define GM_IDX_MAX_DIMS 3
#define GM_IDX_TYPE_UBYTE 0x08
#define GM_IDX_MAGIC_IMAGES 0x00000803u /* ubyte, 3 dimensions: n x rows x cols */
#define GM_IDX_MAGIC_LABELS 0x00000801u /* ubyte, 1 dimension: n */

struct gm_idx {
    uint32_t magic; /* the first four bytes, big-endian */
    int ndims;      /* 1..GM_IDX_MAX_DIMS */
    uint32_t dims[GM_IDX_MAX_DIMS];
    size_t header_bytes; /* 4 + 4 * ndims */
    size_t data_bytes;   /* product of dims */
    const uint8_t *data; /* borrowed: into the parsed buffer (gm_idx_parse only) */
    char error[160];     /* on failure: what is wrong, without the file name */
};

/* Parses and checks the header: magic (two zero bytes, type 0x08, 1..3 dimensions), the
 * dimensions' product against GM_DATA_MAX_BYTES.  Needs only the first header_bytes of the
 * file; data stays NULL.  Returns 0 or GM_ERR_DATA with out->error set. */
int gm_idx_parse_header(const uint8_t *buf, size_t len, struct gm_idx *out) GM_MUST_CHECK;
/* gm_idx_parse_header plus the exact length: buf[0..len) must be the whole file, no byte
 * missing and none trailing.  out->data points into buf.  Allocates nothing. */
int gm_idx_parse(const uint8_t *buf, size_t len, struct gm_idx *out) GM_MUST_CHECK;

/* ---- per-rank sampler ---- */

struct gm_sampler {
    uint32_t *perm; /* owned: n entries; this epoch's permutation, then compacted to the shard */
    size_t n;       /* dataset size */
    size_t len;     /* shard length: n / world */
    uint64_t seed;
    int rank, world;
    int epoch;
};

/* 0 <= rank < world, world <= n <= UINT32_MAX (-EINVAL otherwise); computes epoch 0. */
int gm_sampler_init(struct gm_sampler *s, size_t n, uint64_t seed, int rank,
                    int world) GM_MUST_CHECK;
/* NULL-safe, idempotent. */
void gm_sampler_free(struct gm_sampler *s);
/* Deterministic permutation of 0..n-1 from (seed, epoch) - identical on every rank and
 * independent of world (Fisher-Yates with gm_rng stream = epoch) - then this rank's shard:
 * positions rank, rank + world, ...; every rank gets exactly floor(n / world) samples (the last
 * n mod world positions of the permutation are skipped this epoch). */
void gm_sampler_set_epoch(struct gm_sampler *s, int epoch);
size_t gm_sampler_len(const struct gm_sampler *s);
/* gm_sampler_len() indices into the dataset, valid until the next set_epoch or free. */
const uint32_t *gm_sampler_indices(const struct gm_sampler *s);

#endif
