/* snappy-c.c - kproducer's C interface to librdkafka's C port of snappy (snappy-c.h says
 * which). It calls the port as librdkafka's own writer does (rdkafka_msgset_writer.c,
 * rd_kafka_msgset_writer_compress_snappy): an environment made with
 * rd_kafka_snappy_init_env_sg(env, 1), an output iovec of rd_kafka_snappy_max_compressed_length
 * bytes, rd_kafka_snappy_compress_iov, the length written in the iovec's iov_len. (The port's
 * rd_kafka_snappy_compress does not report that length when, as here, SG is defined.) */
#include "snappy-c.h"

#include <limits.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "snappy.h"

size_t snappy_max_compressed_length(size_t source_length)
{
    return rd_kafka_snappy_max_compressed_length(source_length);
}

snappy_status snappy_compress(const char *input, size_t input_length, char *compressed,
                              size_t *compressed_length)
{
    if (input_length > INT_MAX)
        return SNAPPY_INVALID_INPUT;
    size_t bound = rd_kafka_snappy_max_compressed_length(input_length);
    if (*compressed_length < bound)
        return SNAPPY_BUFFER_TOO_SMALL;
    struct snappy_env env;
    if (rd_kafka_snappy_init_env_sg(&env, true) != 0)
        return SNAPPY_NO_MEMORY;
    struct iovec in = {.iov_base = (void *)(uintptr_t)input, .iov_len = input_length};
    struct iovec out = {.iov_base = compressed, .iov_len = bound};
    int rc = rd_kafka_snappy_compress_iov(&env, &in, 1, input_length, &out);
    rd_kafka_snappy_free_env(&env);
    if (rc != 0)
        return SNAPPY_INVALID_INPUT;
    *compressed_length = out.iov_len;
    return SNAPPY_OK;
}
