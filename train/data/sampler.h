/*
 * train/data/sampler.h - the per-rank shuffled sampler (see sampler.c for how).
 */
#ifndef GM_TRAIN_DATA_SAMPLER_H
#define GM_TRAIN_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

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
