/*
 * train/data/sampler.c - the per-rank shuffled sampler (see sampler.h).
 *
 * Every rank computes the same full permutation of 0..n-1 from (seed, epoch) with
 * gm_rng (xoshiro256**, stream = epoch) and Fisher-Yates, which does not depend on world; the
 * rank then keeps positions rank, rank + world, ... (floor(n / world) of them), compacted in
 * place to the front of the array: position rank + k*world >= k, so copying forward never
 * overwrites a position still to be read.  O(n) time per epoch, 4n bytes.  Owned by the trainer
 * thread.
 */
#include "train/data/sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "train/nn/rng.h"

int gm_sampler_init(struct gm_sampler *s, size_t n, uint64_t seed, int rank, int world)
{
    memset(s, 0, sizeof(*s));
    if (world < 1 || rank < 0 || rank >= world || n < (size_t)world || n > UINT32_MAX)
        return -EINVAL;
    s->perm = malloc(n * sizeof(*s->perm));
    if (s->perm == NULL)
        return -ENOMEM;
    s->n = n;
    s->seed = seed;
    s->rank = rank;
    s->world = world;
    gm_sampler_set_epoch(s, 0);
    return 0;
}

void gm_sampler_free(struct gm_sampler *s)
{
    if (s == NULL)
        return;
    free(s->perm);
    memset(s, 0, sizeof(*s));
}

void gm_sampler_set_epoch(struct gm_sampler *s, int epoch)
{
    struct gm_rng rng;
    const size_t world = (size_t)s->world;

    s->epoch = epoch;
    for (size_t i = 0; i < s->n; i++)
        s->perm[i] = (uint32_t)i;
    gm_rng_init(&rng, s->seed, (uint64_t)(int64_t)epoch);
    gm_rng_shuffle_u32(&rng, s->perm, s->n);
    s->len = s->n / world;
    for (size_t k = 0; k < s->len; k++)
        s->perm[k] = s->perm[(size_t)s->rank + k * world];
}

size_t gm_sampler_len(const struct gm_sampler *s)
{
    return s->len;
}

const uint32_t *gm_sampler_indices(const struct gm_sampler *s)
{
    return s->perm;
}
