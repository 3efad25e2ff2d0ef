/* rd.h - kproducer's stand-in for librdkafka's rd.h, so that librdkafka's C port of snappy
 * (snappy.c, snappy.h, snappy_compat.h: copied unchanged) compiles outside librdkafka.
 * snappy_compat.h includes "rdkafka_int.h" and "rdendian.h", snappy.c includes "rd.h"; all
 * three are this file. It gives what snappy.c uses of librdkafka and nothing else:
 * allocation (librdkafka's rd_malloc aborts when malloc fails; this one returns NULL, which
 * rd_kafka_snappy_init_env turns into -ENOMEM), rd_snprintf and rd_strerror (used by
 * rd_kafka_snappy_java_uncompress only, which kproducer does not call), RD_UNUSED, the size_t
 * printf formats, and be32toh / htole16 / le32toh (glibc's <endian.h>). */
#ifndef KP_VENDOR_SNAPPY_RD_H
#define KP_VENDOR_SNAPPY_RD_H

/* <endian.h>'s be32toh & co. and ssize_t; setup.py compiles this file with -std=gnu11 too. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1
#endif

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define RD_UNUSED __attribute__((unused))
#define PRIusz "zu"
#define PRIdsz "zd"

#define rd_malloc(sz) malloc(sz)
#define rd_free(ptr) free(ptr)
#define rd_snprintf snprintf
#define rd_strerror(err) strerror(err)

#endif /* KP_VENDOR_SNAPPY_RD_H */
