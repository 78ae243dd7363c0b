/*
 * tests/unit/test_tbucket.c - the token bucket: over a simulated clock, what it lets through
 * never exceeds depth + rate * elapsed, a sender that takes whatever it may and waits as told
 * gets the rate (within one depth), no send is below the minimum, and the wait is exact.
 */
#include "common/tbucket.h"

#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void test_rate(void)
{
    const double rate = 500e3, depth = 50e3; /* 4 Mbit/s, 100 ms of burst */
    struct gm_tbucket b;
    uint64_t now = 1000000000ull, t0 = now;
    double sent = 0;
    unsigned sends = 0;

    gm_tbucket_init(&b, rate, depth, now);
    while (now - t0 < 20000000000ull) { /* 20 s, wanting 256 KiB at a time */
        size_t n = gm_tbucket_take(&b, 256 << 10, 16 << 10, now);
        uint64_t w;
        GM_CHECK(n == 0 || n >= (16u << 10));
        sent += (double)n;
        sends += n > 0;
        GM_CHECK(sent <= depth + rate * (double)(now - t0) * 1e-9 + 1);
        w = gm_tbucket_wait_ns(&b, 16 << 10, now);
        if (n == 0)
            GM_CHECK(w > 0);
        now += w > 0 ? w : 1000; /* as told, or a little later when it may go now */
    }
    GM_CHECK(sends > 100);
    /* a sender that keeps waiting as told gets the rate: 20 s at 500 kB/s, within a depth */
    GM_CHECK_NEAR(sent, depth + rate * 20, depth, 0);
}

static void test_edges(void)
{
    struct gm_tbucket b;

    gm_tbucket_init(&b, 1000, 100, 0);
    GM_CHECK_EQ(gm_tbucket_take(&b, 40, 1, 0), (size_t)40); /* full at the start */
    GM_CHECK_EQ(gm_tbucket_take(&b, 100, 1, 0), (size_t)60);
    GM_CHECK_EQ(gm_tbucket_take(&b, 10, 1, 0), (size_t)0);
    GM_CHECK_EQ(gm_tbucket_wait_ns(&b, 10, 0), 10000001ull); /* 10 bytes at 1000/s: 10 ms */
    GM_CHECK_EQ(gm_tbucket_take(&b, 10, 1, 10000001), (size_t)10);
    /* idle for long: no more than depth piles up */
    GM_CHECK_EQ(gm_tbucket_take(&b, 1000, 1, 60000000000ull), (size_t)100);
    /* a minimum above what is there: nothing; a wait for more than depth waits for depth */
    GM_CHECK_EQ(gm_tbucket_take(&b, 50, 20, 60010000000ull), (size_t)0);
    GM_CHECK_EQ(gm_tbucket_wait_ns(&b, 5000, 60010000000ull), 90000001ull);
    /* time that goes backwards adds nothing */
    GM_CHECK_EQ(gm_tbucket_take(&b, 50, 1, 1), (size_t)10);
}

/* Charged bytes (control frames) go at once and put the bucket in debt: the bulk after them
 * waits until the debt is paid, so the total stays within the rate. */
static void test_charge(void)
{
    struct gm_tbucket b;

    gm_tbucket_init(&b, 1000, 100, 0);
    gm_tbucket_charge(&b, 300, 0); /* 100 in the bucket: 200 owed */
    GM_CHECK_EQ(gm_tbucket_take(&b, 10, 1, 0), (size_t)0);
    GM_CHECK_EQ(gm_tbucket_wait_ns(&b, 10, 0), 210000001ull);      /* 210 bytes at 1000/s */
    GM_CHECK_EQ(gm_tbucket_take(&b, 10, 1, 200000000), (size_t)0); /* debt paid, nothing yet */
    GM_CHECK_EQ(gm_tbucket_take(&b, 10, 1, 210000000), (size_t)10);
}

int main(void)
{
    GM_TEST_RUN(test_rate);
    GM_TEST_RUN(test_edges);
    GM_TEST_RUN(test_charge);
    return gm_test_finish("test_tbucket");
}
