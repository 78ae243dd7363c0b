/*
 * common/test.h - tiny test harness for tests/unit/test_<module>.c.
 *
 * Checks record a failure (file, line, expression and both values) and go on,
 * so one run reports every mismatch; gm_test_finish() prints the tally and
 * returns the exit status (0 pass, 1 fail).  A test binary that cannot run
 * here (no GPU, no python) exits GM_EXIT_SKIP (77).  Single-threaded: the
 * counters are plain globals of the test binary, not of the library.
 */
#ifndef GM_COMMON_TEST_H
#define GM_COMMON_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"

struct gm_test_state {
    long checks;
    long failures;
    const char *current;
};
extern struct gm_test_state gm_test_state;

#define GM_TEST_DEFINE_STATE struct gm_test_state gm_test_state

#define GM_TEST_FAIL_(fmt, ...)                                                                    \
    do {                                                                                           \
        gm_test_state.failures++;                                                                  \
        fprintf(stderr, "FAIL %s:%d [%s] " fmt "\n", __FILE__, __LINE__,                           \
                gm_test_state.current ? gm_test_state.current : "?", __VA_ARGS__);                 \
    } while (0)

#define GM_CHECK(cond)                                                                             \
    do {                                                                                           \
        gm_test_state.checks++;                                                                    \
        if (!(cond))                                                                               \
            GM_TEST_FAIL_("%s", #cond);                                                            \
    } while (0)

#define GM_CHECK_EQ(a, b)                                                                          \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        gm_test_state.checks++;                                                                    \
        if (va_ != vb_)                                                                            \
            GM_TEST_FAIL_("%s == %s (%lld vs %lld)", #a, #b, va_, vb_);                            \
    } while (0)

#define GM_CHECK_OK(expr)                                                                          \
    do {                                                                                           \
        int e_ = (expr);                                                                           \
        gm_test_state.checks++;                                                                    \
        if (e_ != 0)                                                                               \
            GM_TEST_FAIL_("%s returned %d (%s)", #expr, e_, gm_strerror(e_));                      \
    } while (0)

#define GM_CHECK_ERR(expr, want)                                                                   \
    do {                                                                                           \
        int e_ = (expr), w_ = (want);                                                              \
        gm_test_state.checks++;                                                                    \
        if (e_ != w_)                                                                              \
            GM_TEST_FAIL_("%s returned %d (%s), want %d (%s)", #expr, e_, gm_strerror(e_), w_,     \
                          gm_strerror(w_));                                                        \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define GM_CHECK_NEAR(a, b, atol, rtol)                                                            \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        gm_test_state.checks++;                                                                    \
        if (!(fabs(va_ - vb_) <= (atol) + (rtol)*fabs(vb_)))                                       \
            GM_TEST_FAIL_("%s ~ %s (%.9g vs %.9g, diff %.3g)", #a, #b, va_, vb_, fabs(va_ - vb_)); \
    } while (0)

#define GM_CHECK_STREQ(a, b)                                                                       \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        gm_test_state.checks++;                                                                    \
        if (sa_ == NULL || sb_ == NULL || strcmp(sa_, sb_) != 0)                                   \
            GM_TEST_FAIL_("%s == %s (\"%s\" vs \"%s\")", #a, #b, sa_ ? sa_ : "(null)",             \
                          sb_ ? sb_ : "(null)");                                                   \
    } while (0)

#define GM_TEST_RUN(fn)                                                                            \
    do {                                                                                           \
        long f0_ = gm_test_state.failures;                                                         \
        gm_test_state.current = #fn;                                                               \
        fn();                                                                                      \
        fprintf(stderr, "%s %s\n", gm_test_state.failures == f0_ ? "ok  " : "FAIL", #fn);          \
        gm_test_state.current = NULL;                                                              \
    } while (0)

static inline int gm_test_finish(const char *name)
{
    fprintf(stderr, "%s: %ld checks, %ld failed\n", name, gm_test_state.checks,
            gm_test_state.failures);
    if (gm_test_state.checks == 0) {
        fprintf(stderr, "%s: no checks ran: that is a failure\n", name);
        return 1;
    }
    return gm_test_state.failures == 0 ? 0 : 1;
}

#endif
