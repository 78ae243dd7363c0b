/*
 * common/tbucket.h - a token bucket: a byte rate cap with a bounded burst.
 *
 * Tokens (bytes) accrue at rate bytes a second up to depth; sending n bytes takes n tokens.
 * Over any interval of t seconds at most depth + rate * t bytes are let through, whatever the
 * caller's timing.  Time is the caller's (monotonic ns), so the bucket is a plain value,
 * testable without a clock.  Why not a library: the Debian libraries that shape traffic
 * (tc, libnl) shape a kernel interface's egress, all its traffic; the cap here is on one TLS
 * link's bulk frames inside the agent (agent/net/link.c), ten lines of arithmetic.
 *
 * Any thread, no locking: the owner serializes (a link: its loop thread).
 */
#ifndef GM_COMMON_TBUCKET_H
#define GM_COMMON_TBUCKET_H

#include <stddef.h>
#include <stdint.h>

struct gm_tbucket {
    double rate;   /* bytes a second, > 0 */
    double depth;  /* bytes at most in the bucket, > 0 */
    double tokens; /* now */
    uint64_t t_ns; /* when tokens was last brought up to date */
};

/* A full bucket at now_ns. */
void gm_tbucket_init(struct gm_tbucket *b, double rate, double depth, uint64_t now_ns);
/* How many of want bytes may go now (at most want, 0 when the bucket holds fewer than
 * min(want, min_bytes) tokens: no tiny sends), and takes them. */
size_t gm_tbucket_take(struct gm_tbucket *b, size_t want, size_t min_bytes, uint64_t now_ns);
/* Takes n bytes that go whatever the bucket holds (they may leave it in debt, which later
 * takes wait out): traffic that must not wait, counted against the cap all the same. */
void gm_tbucket_charge(struct gm_tbucket *b, size_t n, uint64_t now_ns);
/* Nanoseconds until n bytes (at most depth) are in the bucket (0: now). */
uint64_t gm_tbucket_wait_ns(struct gm_tbucket *b, size_t n, uint64_t now_ns);

#endif
