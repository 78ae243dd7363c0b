/*
 * train/nn/rng.c - xoshiro256** seeded by splitmix64; see rng.h for the choices and why.
 * Written from the published algorithm descriptions (constants from the papers).
 */
#include "train/nn/rng.h"

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* splitmix64's output function: a bijection on 64 bits with good avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *x)
{
    *x += 0x9e3779b97f4a7c15ULL;
    return mix64(*x);
}

void gm_rng_init(struct gm_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ mix64(stream + 0x632be59bd9b4e019ULL);

    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    /* All-zero is xoshiro's one bad state; four consecutive splitmix64 outputs are never all
     * zero in practice, but make it impossible. */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

uint64_t gm_rng_next(struct gm_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double gm_rng_double(struct gm_rng *r)
{
    return (double)(gm_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

uint32_t gm_rng_below(struct gm_rng *r, uint32_t bound)
{
    uint32_t x;
    uint64_t m;
    uint32_t low;

    if (bound == 0)
        return 0;
    /* Lemire: the high 32 bits of x * bound are uniform once the low part is outside the
     * (2^32 mod bound) values that would over-represent some results. */
    x = (uint32_t)(gm_rng_next(r) >> 32);
    m = (uint64_t)x * bound;
    low = (uint32_t)m;
    if (low < bound) {
        uint32_t threshold = (uint32_t)(-bound) % bound; /* 2^32 mod bound */
        while (low < threshold) {
            x = (uint32_t)(gm_rng_next(r) >> 32);
            m = (uint64_t)x * bound;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void gm_rng_shuffle_u32(struct gm_rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = gm_rng_below(r, (uint32_t)i); /* i <= n <= UINT32_MAX (rng.h) */
        uint32_t t = a[i - 1];

        a[i - 1] = a[j];
        a[j] = t;
    }
}
