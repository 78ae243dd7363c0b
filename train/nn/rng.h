/*
 * train/nn/rng.h - seeded, portable pseudo-random numbers for everything that must come out the
 * same on every rank and every machine (weight init, data shuffles, train/test splits).
 *
 * Generator: xoshiro256** (Blackman and Vigna, 2018): 256 bits of state, period 2^256 - 1,
 * passes BigCrush and PractRand; its state is filled from (seed, stream) with splitmix64, the
 * seeding procedure its authors recommend, so small, similar seeds still give unrelated streams.
 * `stream` separates independent uses of one seed (epoch number, class index): the state is
 * seeded from seed ^ mix64(stream), mix64 being splitmix64's bijective finalizer.
 *
 * Bounded draws (gm_rng_below) are exactly uniform: Lemire's multiply-and-reject method
 * ("Fast random integer generation in an interval", 2019), not `next % bound`.
 *
 * Only integer arithmetic, so a given (seed, stream) yields the same sequence everywhere.
 * A struct gm_rng is plain data (no free); not thread-safe: one generator per thread.
 */
#ifndef GM_TRAIN_NN_RNG_H
#define GM_TRAIN_NN_RNG_H

#include <stddef.h>
#include <stdint.h>

struct gm_rng {
    uint64_t s[4];
};

/* Seeds r from (seed, stream). Any values are valid. */
void gm_rng_init(struct gm_rng *r, uint64_t seed, uint64_t stream);
/* Next 64 uniformly distributed bits. */
uint64_t gm_rng_next(struct gm_rng *r);
/* Uniform double in [0, 1): the top 53 bits of gm_rng_next (weight init). */
double gm_rng_double(struct gm_rng *r);
/* Uniform integer in [0, bound); bound must be > 0 (returns 0 for bound 0). */
uint32_t gm_rng_below(struct gm_rng *r, uint32_t bound);
/* Fisher-Yates shuffle of a[0..n); n <= UINT32_MAX. */
void gm_rng_shuffle_u32(struct gm_rng *r, uint32_t *a, size_t n);

#endif
