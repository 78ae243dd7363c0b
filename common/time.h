/* common/time.h - monotonic and wall clocks in nanoseconds.  Thread-safe. */
#ifndef GM_COMMON_TIME_H
#define GM_COMMON_TIME_H

#include <stdint.h>

uint64_t gm_time_mono_ns(void);
uint64_t gm_time_wall_ns(void);
double gm_time_seconds_since(uint64_t start_mono_ns);

#endif
