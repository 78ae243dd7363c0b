/* common/tbucket.c - a token bucket (see tbucket.h). */
#include "common/tbucket.h"

static void refill(struct gm_tbucket *b, uint64_t now_ns)
{
    if (now_ns > b->t_ns) {
        b->tokens += (double)(now_ns - b->t_ns) * 1e-9 * b->rate;
        if (b->tokens > b->depth)
            b->tokens = b->depth;
    }
    b->t_ns = now_ns > b->t_ns ? now_ns : b->t_ns;
}

void gm_tbucket_init(struct gm_tbucket *b, double rate, double depth, uint64_t now_ns)
{
    b->rate = rate > 0 ? rate : 1;
    b->depth = depth >= 1 ? depth : 1;
    b->tokens = b->depth;
    b->t_ns = now_ns;
}

size_t gm_tbucket_take(struct gm_tbucket *b, size_t want, size_t min_bytes, uint64_t now_ns)
{
    size_t n;

    refill(b, now_ns);
    if (min_bytes > want)
        min_bytes = want;
    if (b->tokens < (double)min_bytes || b->tokens < 1)
        return 0;
    n = b->tokens >= (double)want ? want : (size_t)b->tokens;
    b->tokens -= (double)n;
    return n;
}

void gm_tbucket_charge(struct gm_tbucket *b, size_t n, uint64_t now_ns)
{
    refill(b, now_ns);
    b->tokens -= (double)n;
}

uint64_t gm_tbucket_wait_ns(struct gm_tbucket *b, size_t n, uint64_t now_ns)
{
    double need;

    refill(b, now_ns);
    need = (double)n < b->depth ? (double)n : b->depth;
    if (b->tokens >= need)
        return 0;
    return (uint64_t)((need - b->tokens) / b->rate * 1e9) + 1;
}
