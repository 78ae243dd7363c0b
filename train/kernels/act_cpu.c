/* train/kernels/act_cpu.c - see act.h.  Plain loops; -O3 vectorizes them. */
#include "train/kernels/act.h"

void gm_relu_forward_cpu(size_t n, const float *restrict x, float *restrict y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void gm_relu_backward_cpu(size_t n, const float *restrict y, const float *restrict dy,
                          float *restrict dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void gm_relu6_forward_cpu(size_t n, const float *restrict x, float *restrict y)
{
    for (size_t i = 0; i < n; i++) {
        const float v = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = v < 6.0f ? v : 6.0f;
    }
}

void gm_relu6_backward_cpu(size_t n, const float *restrict y, const float *restrict dy,
                           float *restrict dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f && y[i] < 6.0f ? dy[i] : 0.0f;
}

/* splitmix64 finaliser: a good 64-bit mix of a counter */
static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gm_dropout_forward_cpu(size_t n, float p, uint64_t seed, const float *restrict x,
                            float *restrict mask, float *restrict y)
{
    const float keep_scale = 1.0f / (1.0f - p);
    /* keep when the top 24 bits, as a fraction of 2^24, are >= p */
    const uint32_t threshold = (uint32_t)((double)p * 16777216.0);

    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)(mix64(seed ^ (i * 0xd1b54a32d192ed03ull)) >> 40);
        mask[i] = r >= threshold ? keep_scale : 0.0f;
        y[i] = x[i] * mask[i];
    }
}

void gm_dropout_backward_cpu(size_t n, const float *restrict mask, const float *restrict dy,
                             float *restrict dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * mask[i];
}
