/*
 * train/data/data.h - datasets for the trainer: loading (IDX, CIFAR-10 binary, image folders),
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
 * - folder: dir/<class>/<image> like PyTorch's ImageFolder; see folder.c for decoding,
 *   channel conversion, resizing and the train/test split.
 *
 * Files, dependencies one way: data.c (dispatch, free, batches) -> the format readers idx.c,
 * cifar.c, folder.c (one header each) -> file.c (gz reader, whole files, paths, names) and
 * dataset.h (the types, no code); sampler.c alone.  This header includes dataset.h, idx.h and
 * sampler.h, so users need only it.  The generator behind the sampler and the folder split is
 * train/nn/rng.h.
 *
 * Threads: loading is synchronous and touches nothing global but the log; call it from any one
 * thread.  gm_dataset_batch only reads the dataset, so several threads may share one.
 */
#ifndef GM_TRAIN_DATA_DATA_H
#define GM_TRAIN_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/data/dataset.h"
#include "train/data/idx.h"
#include "train/data/sampler.h"

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

#endif
