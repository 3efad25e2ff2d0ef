/* kp_clock.h - the monotonic clock of the C core (CLOCK_MONOTONIC, Python's
 * time.monotonic clock), one definition for the selector's frame stamps, the courier's
 * request times and the turn's deadlines, so instants taken by any of them compare. */
#ifndef KP_CLOCK_H
#define KP_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t kp_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t kp_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
