/*
 * train/data/idx.h - the IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header,
 * then unsigned bytes.  The parser is pure and in memory (fuzzed by tests/fuzz/fuzz_idx.c);
 * the loader reads the four standard Fashion-MNIST/MNIST names (see data.h, idx.c).
 */
#ifndef GM_TRAIN_DATA_IDX_H
#define GM_TRAIN_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/data/dataset.h"

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

/* spec->kind == "idx"; spec already validated by gm_dataset_load, outputs zeroed.  Logs one
 * line on failure; the caller frees train and test. */
int gm_data_idx_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                     struct gm_dataset *test) GM_MUST_CHECK;

#endif
