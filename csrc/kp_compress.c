/* kp_compress.c - the compression codecs in C (kp_compress.h says which and why). */
#include "kp_compress.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kp_batch.h"
#include "kp_buf.h"

#if KP_HAVE_ZLIB
#include <zlib.h>
#endif
/* The vendored codecs (csrc/vendor), by a path relative to this file: a compiler looks a
 * quoted include up beside the including file first, before any -I or system directory, so a
 * system's lz4frame.h, zstd.h or snappy-c.h is never taken instead. */
#if KP_HAVE_LZ4
#include "vendor/lz4/lz4frame.h"
#endif
#if KP_HAVE_ZSTD
#include "vendor/zstd/zstd.h"
#endif
#if KP_HAVE_SNAPPY
#include "vendor/snappy/snappy-c.h"
#endif

struct kp_compressor {
    kp_buf out;
#if KP_HAVE_ZLIB
    z_stream gz;
    int gz_level;               /* the level gz was set up with, -1: not set up */
#endif
#if KP_HAVE_LZ4
    LZ4F_cctx *lz4;
#endif
#if KP_HAVE_ZSTD
    ZSTD_CCtx *zstd;
#endif
};

int kp_compress_available(int codec)
{
    switch (codec) {
#if KP_HAVE_ZLIB
    case KP_CODEC_GZIP: return 1;
#endif
#if KP_HAVE_SNAPPY
    case KP_CODEC_SNAPPY: return 1;
#endif
#if KP_HAVE_LZ4
    case KP_CODEC_LZ4: return 1;
#endif
#if KP_HAVE_ZSTD
    case KP_CODEC_ZSTD: return 1;
#endif
    default: return 0;
    }
}

kp_status kp_compressor_new(kp_compressor **out)
{
    kp_compressor *z = calloc(1, sizeof *z);
    if (z == NULL)
        return KP_ERR_NOMEM;
    kp_buf_init(&z->out);
#if KP_HAVE_ZLIB
    z->gz_level = -1;
#endif
    /* The codecs' contexts are made at their first use: a producer uses one codec. */
    *out = z;
    return KP_OK;
}

void kp_compressor_free(kp_compressor *z)
{
    if (z == NULL)
        return;
#if KP_HAVE_ZLIB
    if (z->gz_level >= 0)
        deflateEnd(&z->gz);
#endif
#if KP_HAVE_LZ4
    if (z->lz4 != NULL)
        LZ4F_freeCompressionContext(z->lz4);
#endif
#if KP_HAVE_ZSTD
    ZSTD_freeCCtx(z->zstd);
#endif
    kp_buf_free(&z->out);
    free(z);
}

#if KP_HAVE_ZLIB || KP_HAVE_LZ4 || KP_HAVE_ZSTD || KP_HAVE_SNAPPY
/* z->out with room for `bound` bytes, emptied. */
static kp_status out_room(kp_compressor *z, size_t bound)
{
    z->out.len = 0;
    return kp_buf_reserve(&z->out, bound);
}
#endif

#if KP_HAVE_ZLIB
static kp_status gzip_compress(kp_compressor *z, int level, const uint8_t *src, size_t n,
                               int64_t *lib_code)
{
    if (n > UINT_MAX)
        return KP_ERR_OVERFLOW;     /* zlib's counts are unsigned int */
    int rc;
    if (z->gz_level != level) {
        if (z->gz_level >= 0)
            deflateEnd(&z->gz);
        z->gz_level = -1;
        memset(&z->gz, 0, sizeof z->gz);
        /* 15 + 16: a 32 KiB window, written as a gzip member (header and trailer). */
        rc = deflateInit2(&z->gz, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
        if (rc == Z_MEM_ERROR)
            return KP_ERR_NOMEM;
        if (rc != Z_OK) {
            *lib_code = rc;
            return KP_ERR_CODEC;
        }
        z->gz_level = level;
    } else if ((rc = deflateReset(&z->gz)) != Z_OK) {
        *lib_code = rc;
        return KP_ERR_CODEC;
    }
    uLong bound = deflateBound(&z->gz, (uLong)n);
    kp_status st = out_room(z, bound);
    if (st != KP_OK)
        return st;
    z->gz.next_in = (Bytef *)(uintptr_t)src;   /* zlib's type; it does not write there */
    z->gz.avail_in = (uInt)n;
    z->gz.next_out = z->out.data;
    z->gz.avail_out = (uInt)(bound > UINT_MAX ? UINT_MAX : bound);
    rc = deflate(&z->gz, Z_FINISH);
    if (rc != Z_STREAM_END) {
        *lib_code = rc;
        return rc == Z_MEM_ERROR ? KP_ERR_NOMEM : KP_ERR_CODEC;
    }
    z->out.len = (size_t)z->gz.total_out;
    return KP_OK;
}
#endif

#if KP_HAVE_SNAPPY
static kp_status snappy_compress_to(kp_compressor *z, const uint8_t *src, size_t n,
                                    int64_t *lib_code)
{
    if (n > UINT32_MAX)
        return KP_ERR_OVERFLOW;     /* a raw block's length is a 32-bit varint */
    size_t bound = snappy_max_compressed_length(n);
    kp_status st = out_room(z, bound);
    if (st != KP_OK)
        return st;
    size_t len = bound;
    snappy_status rc = snappy_compress((const char *)src, n, (char *)z->out.data, &len);
    if (rc != SNAPPY_OK) {
        *lib_code = rc;
        return KP_ERR_CODEC;
    }
    z->out.len = len;
    return KP_OK;
}
#endif

#if KP_HAVE_LZ4
static kp_status lz4_compress(kp_compressor *z, int level, const uint8_t *src, size_t n,
                              int64_t *lib_code)
{
    if (n > INT32_MAX)
        return KP_ERR_OVERFLOW;
    size_t rc;
    if (z->lz4 == NULL) {
        rc = LZ4F_createCompressionContext(&z->lz4, LZ4F_VERSION);
        if (LZ4F_isError(rc)) {
            z->lz4 = NULL;
            *lib_code = -(int64_t)rc;
            return KP_ERR_NOMEM;    /* its one failure: the allocation */
        }
    }
    LZ4F_preferences_t prefs;
    memset(&prefs, 0, sizeof prefs);
    prefs.frameInfo.blockSizeID = LZ4F_max64KB;
    prefs.frameInfo.blockMode = LZ4F_blockIndependent;
    prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
    prefs.compressionLevel = level;
    size_t bound = LZ4F_compressFrameBound(n, &prefs);
    kp_status st = out_room(z, bound);
    if (st != KP_OK)
        return st;
    size_t at = 0;
    rc = LZ4F_compressBegin(z->lz4, z->out.data, bound, &prefs);
    if (!LZ4F_isError(rc)) {
        at += rc;
        rc = LZ4F_compressUpdate(z->lz4, z->out.data + at, bound - at, src, n, NULL);
    }
    if (!LZ4F_isError(rc)) {
        at += rc;
        rc = LZ4F_compressEnd(z->lz4, z->out.data + at, bound - at, NULL);
    }
    if (LZ4F_isError(rc)) {
        *lib_code = -(int64_t)rc;
        return KP_ERR_CODEC;
    }
    z->out.len = at + rc;
    return KP_OK;
}
#endif

#if KP_HAVE_ZSTD
static kp_status zstd_compress(kp_compressor *z, int level, const uint8_t *src, size_t n,
                               int64_t *lib_code)
{
    if (z->zstd == NULL && (z->zstd = ZSTD_createCCtx()) == NULL)
        return KP_ERR_NOMEM;
    size_t bound = ZSTD_compressBound(n);
    kp_status st = out_room(z, bound);
    if (st != KP_OK)
        return st;
    size_t rc = ZSTD_compressCCtx(z->zstd, z->out.data, bound, src, n, level);
    if (ZSTD_isError(rc)) {
        *lib_code = -(int64_t)rc;
        return KP_ERR_CODEC;
    }
    z->out.len = rc;
    return KP_OK;
}
#endif

kp_status kp_compress(kp_compressor *z, int codec, int level, const uint8_t *src, size_t n,
                      const uint8_t **out, size_t *out_len, int64_t *lib_code)
{
    kp_status st = KP_ERR_CODEC;
    *lib_code = 0;
    (void)level;
    (void)src;
    (void)n;
    switch (codec) {
#if KP_HAVE_ZLIB
    case KP_CODEC_GZIP: st = gzip_compress(z, level, src, n, lib_code); break;
#endif
#if KP_HAVE_SNAPPY
    case KP_CODEC_SNAPPY: st = snappy_compress_to(z, src, n, lib_code); break;
#endif
#if KP_HAVE_LZ4
    case KP_CODEC_LZ4: st = lz4_compress(z, level, src, n, lib_code); break;
#endif
#if KP_HAVE_ZSTD
    case KP_CODEC_ZSTD: st = zstd_compress(z, level, src, n, lib_code); break;
#endif
    default: break;
    }
    if (st != KP_OK)
        return st;
    *out = z->out.data;
    *out_len = z->out.len;
    return KP_OK;
}
