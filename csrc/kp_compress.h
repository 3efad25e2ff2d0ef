/* kp_compress.h - the compression codecs in C, for the courier (kp_courier.h) and for a step
 * closing a batch (kproducer/_core_parts/compress.pxi): neither holds the GIL while it
 * compresses, so neither can call the Python codecs (cramjam).
 *
 * gzip is the system's zlib; lz4, zstd and snappy (librdkafka's C port) are vendored in
 * csrc/vendor/ and compiled in (csrc/vendor/README.md). setup.py defines KP_HAVE_ZLIB,
 * KP_HAVE_LZ4, KP_HAVE_ZSTD and KP_HAVE_SNAPPY in every build of the module; a codec whose
 * macro is not defined (a plain-C test's build) is not available: the courier leaves the
 * batches of such a producer to the steps, which compress them with cramjam, the GIL held.
 *
 * The formats are the ones kproducer/compression.py writes, so any Kafka reader takes them:
 * - gzip: one gzip member (RFC 1952), zlib's deflate at the level given;
 * - snappy: one raw snappy block;
 * - lz4: an LZ4 frame with independent blocks (Java's reader refuses linked ones), no content
 *   size, no checksums, 64 KiB blocks (Java's own size);
 * - zstd: one zstd frame.
 * The bytes need not equal cramjam's (another build of the same library, or another
 * implementation for gzip and snappy); what they decompress to does.
 */
#ifndef KP_COMPRESS_H
#define KP_COMPRESS_H

#include "kp_common.h"

typedef struct kp_compressor kp_compressor;

/* 1 if this build has codec (KP_CODEC_GZIP .. KP_CODEC_ZSTD), else 0 (KP_CODEC_NONE: 0). */
int kp_compress_available(int codec);

/* A compressor: the codecs' contexts, kept between calls, and the output buffer.
 * KP_ERR_NOMEM. */
kp_status kp_compressor_new(kp_compressor **out);
void kp_compressor_free(kp_compressor *z);

/* Compresses src[0, n) with codec at level (already in the codec's range, as
 * compression.resolve_level leaves it; ignored by snappy). *out, *out_len: the compressed
 * bytes, in z's buffer, valid until the next call on z. KP_ERR_CODEC when the codec is not
 * built in or its library fails (*lib_code: the library's own code, 0 if none), KP_ERR_NOMEM,
 * KP_ERR_OVERFLOW for an input the codec cannot take (snappy and lz4: above 2 GiB). */
kp_status kp_compress(kp_compressor *z, int codec, int level, const uint8_t *src, size_t n,
                      const uint8_t **out, size_t *out_len, int64_t *lib_code);

#endif /* KP_COMPRESS_H */
