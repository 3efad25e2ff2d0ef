/* kp_varint.h - Kafka's zig-zag varint (int32) and varlong (int64).
 *
 * Wire form (protobuf style): zig-zag map n -> (n << 1) ^ (n >> 63), then 7 bits
 * per byte, least significant group first, high bit set on every byte but the
 * last. An int32 takes at most 5 bytes, an int64 at most 10.
 *
 * Readers take the buffer end explicitly and never read past it; they reject
 * truncated input and over-long encodings (a 6th byte for an int32, or a last
 * byte carrying bits beyond the type's width), as Kafka's ByteUtils does.
 */
#ifndef KP_VARINT_H
#define KP_VARINT_H

#include "kp_common.h"

#define KP_VARINT_MAX 5
#define KP_VARLONG_MAX 10

KP_INLINE uint32_t kp_zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
KP_INLINE uint64_t kp_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
KP_INLINE int32_t kp_unzigzag32(uint32_t u) { return (int32_t)(u >> 1) ^ -(int32_t)(u & 1); }
KP_INLINE int64_t kp_unzigzag64(uint64_t u) { return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); }

/* Bytes needed for an unsigned 64-bit group encoding. */
KP_INLINE size_t kp_uvarint_size(uint64_t u)
{
#if defined(__GNUC__)
    /* 7 payload bits per byte: ceil(significant bits / 7), branch-free. For bits in
     * 1..64, (bits + 6) * 37 >> 8 equals (bits + 6) / 7 (checked for every value by
     * the tests through the sizes of all varint widths) and costs a multiply and a
     * shift instead of a division sequence: this runs five times per record. */
    uint32_t bits = 64u - (uint32_t)__builtin_clzll(u | 1);
    return (size_t)(((bits + 6u) * 37u) >> 8);
#else
    size_t n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
#endif
}

KP_INLINE size_t kp_varint_size(int32_t v) { return kp_uvarint_size(kp_zigzag32(v)); }
KP_INLINE size_t kp_varlong_size(int64_t v) { return kp_uvarint_size(kp_zigzag64(v)); }

/* Unchecked writer: the caller has reserved kp_*_size() bytes. Returns bytes written. */
KP_INLINE size_t kp_uvarint_put(uint8_t *p, uint64_t u)
{
    /* A record's varints are almost all one or two bytes (deltas below 64 or 8192,
     * lengths below 8 KiB): straight-line stores for those, the loop for the rest. */
    if (KP_LIKELY(u < 0x80)) {
        p[0] = (uint8_t)u;
        return 1;
    }
    if (KP_LIKELY(u < 0x4000)) {
        p[0] = (uint8_t)(u | 0x80);
        p[1] = (uint8_t)(u >> 7);
        return 2;
    }
    size_t n = 0;
    while (u >= 0x80) { p[n++] = (uint8_t)(u | 0x80); u >>= 7; }
    p[n++] = (uint8_t)u;
    return n;
}

KP_INLINE size_t kp_varint_put(uint8_t *p, int32_t v) { return kp_uvarint_put(p, kp_zigzag32(v)); }
KP_INLINE size_t kp_varlong_put(uint8_t *p, int64_t v) { return kp_uvarint_put(p, kp_zigzag64(v)); }

/* Checked writer for callers holding a capacity: KP_ERR_OVERFLOW when it does not fit. */
KP_INLINE kp_status kp_varlong_write(uint8_t *p, size_t cap, int64_t v, size_t *written)
{
    size_t need = kp_varlong_size(v);
    if (KP_UNLIKELY(need > cap)) return KP_ERR_OVERFLOW;
    *written = kp_varlong_put(p, v);
    return KP_OK;
}

/* Reads an unsigned group encoding of at most max_bytes from [*pos, len).
 * max_bytes 5 -> value must fit 32 bits, 10 -> 64 bits. */
KP_INLINE kp_status kp_uvarint_read(const uint8_t *buf, size_t len, size_t *pos,
                                    int max_bytes, uint64_t *out)
{
    size_t p = *pos;
    uint64_t u = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (KP_UNLIKELY(p >= len)) return KP_ERR_TRUNCATED;
        uint8_t b = buf[p++];
        if (i == max_bytes - 1) {
            /* Last allowed byte: continuation bit or bits past the width are over-long. */
            uint8_t limit = (max_bytes == KP_VARINT_MAX) ? 0x0F : 0x01;
            if (b > limit) return KP_ERR_VARINT;
        }
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = u;
            *pos = p;
            return KP_OK;
        }
        shift += 7;
    }
    return KP_ERR_VARINT; /* unreachable: the last byte check returns first */
}

KP_INLINE kp_status kp_varint_read(const uint8_t *buf, size_t len, size_t *pos, int32_t *out)
{
    uint64_t u;
    kp_status st = kp_uvarint_read(buf, len, pos, KP_VARINT_MAX, &u);
    if (st == KP_OK) *out = kp_unzigzag32((uint32_t)u);
    return st;
}

KP_INLINE kp_status kp_varlong_read(const uint8_t *buf, size_t len, size_t *pos, int64_t *out)
{
    uint64_t u;
    kp_status st = kp_uvarint_read(buf, len, pos, KP_VARLONG_MAX, &u);
    if (st == KP_OK) *out = kp_unzigzag64(u);
    return st;
}

#endif /* KP_VARINT_H */
