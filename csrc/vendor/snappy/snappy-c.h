/* snappy-c.h - kproducer's C interface to librdkafka's C port of snappy (snappy.c): the
 * compression half of the one Google's snappy ships as snappy-c.h (same names, same status
 * codes, same contract), so csrc/kp_compress.c reads as it did against the system's libsnappy.
 * The output is a raw snappy block, as Google's snappy_compress writes (the bytes may differ:
 * another implementation; any snappy decoder reads them). */
#ifndef KP_VENDOR_SNAPPY_C_H
#define KP_VENDOR_SNAPPY_C_H

#include <stddef.h>

typedef enum {
    SNAPPY_OK = 0,
    SNAPPY_INVALID_INPUT = 1,       /* here: an input above 2 GiB (the port counts in int) */
    SNAPPY_BUFFER_TOO_SMALL = 2,    /* *compressed_length < snappy_max_compressed_length() */
    SNAPPY_NO_MEMORY = 3            /* kproducer's: the port's working memory not allocated */
} snappy_status;

/* Compresses input[0, input_length) into compressed, which has room for *compressed_length
 * bytes: at least snappy_max_compressed_length(input_length). On SNAPPY_OK,
 * *compressed_length is the length written. */
snappy_status snappy_compress(const char *input, size_t input_length, char *compressed,
                              size_t *compressed_length);

/* The most snappy_compress writes for source_length bytes: 32 + n + n / 6. */
size_t snappy_max_compressed_length(size_t source_length);

#endif /* KP_VENDOR_SNAPPY_C_H */
