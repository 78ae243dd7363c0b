/* common/time.c - clock_gettime wrappers (CLOCK_MONOTONIC / CLOCK_REALTIME). */
#include "common/time.h"

#include <time.h>

uint64_t gm_time_mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t gm_time_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double gm_time_seconds_since(uint64_t start_mono_ns)
{
    return (double)(gm_time_mono_ns() - start_mono_ns) * 1e-9;
}
