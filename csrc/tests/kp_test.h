/* kp_test.h - what the plain-C tests share (no framework): CHECK, its counters, and a
 * seeded random source, so that a failure reproduces. */
#ifndef KP_TEST_H
#define KP_TEST_H

#include <stdint.h>
#include <stdio.h>

static int failures;
static long checks;

/* Counts the check; on failure prints where and why (the first 20) and counts it. */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        checks++;                                                          \
        if (!(cond)) {                                                     \
            if (failures < 20) {                                           \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);       \
                fprintf(stderr, __VA_ARGS__);                              \
                fputc('\n', stderr);                                       \
            }                                                              \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* xorshift64*: the top 32 bits of the product. */
static inline uint32_t rnd32(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static inline uint8_t rnd8(void) { return (uint8_t)(rnd32() >> 24); }

#endif /* KP_TEST_H */
