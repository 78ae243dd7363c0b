/*
 * common/assert.h - always-on assertions for programmer errors only.
 *
 * Bytes from disk or network are never checked with these (they become error
 * codes); GM_ASSERT is for invariants whose failure means a bug in gradmesh.
 * It stays on in release builds: a wrong gradient is worse than a crash.
 */
#ifndef GM_COMMON_ASSERT_H
#define GM_COMMON_ASSERT_H

__attribute__((noreturn)) void gm_assert_fail(const char *expr, const char *file, int line);

#define GM_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            gm_assert_fail(#cond, __FILE__, __LINE__);                                             \
    } while (0)

#define GM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GM_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
