/*
 * common/rand.h - small, fast, seedable PRNG (xoshiro256** seeded through
 * splitmix64, both public-domain algorithms by Blackman and Vigna, written
 * here from their published description).  Deterministic across platforms:
 * the same seed gives the same stream everywhere, which the trainer relies on
 * (identical init and shuffles on every rank).  Not for secrets: crypto/ uses
 * libsodium.  A struct per user; no global state.
 */
#ifndef GM_COMMON_RAND_H
#define GM_COMMON_RAND_H

#include <stdint.h>

struct gm_rand {
    uint64_t s[4];
};

static inline uint64_t gm_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void gm_rand_seed(struct gm_rand *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = gm_splitmix64(&x);
}

static inline uint64_t gm_rand_u64(struct gm_rand *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double gm_rand_double(struct gm_rand *r)
{
    return (double)(gm_rand_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Unbiased uniform integer in [0, bound), bound >= 1 (Lemire's method). */
static inline uint64_t gm_rand_below(struct gm_rand *r, uint64_t bound)
{
    __uint128_t m = (__uint128_t)gm_rand_u64(r) * bound;
    uint64_t lo = (uint64_t)m;
    if (lo < bound) {
        uint64_t threshold = (0 - bound) % bound;
        while (lo < threshold) {
            m = (__uint128_t)gm_rand_u64(r) * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif
