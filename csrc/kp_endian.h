/* kp_endian.h - big-endian loads and stores (Kafka's wire order).
 * memcpy + byte swap compiles to a single mov/bswap and is safe on unaligned
 * addresses, unlike casting the pointer. Callers check bounds first. */
#ifndef KP_ENDIAN_H
#define KP_ENDIAN_H

#include <string.h>
#include "kp_common.h"

KP_INLINE void kp_store_be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

KP_INLINE void kp_store_be32(uint8_t *p, uint32_t v)
{
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
#else
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
#endif
}

KP_INLINE void kp_store_be64(uint8_t *p, uint64_t v)
{
    kp_store_be32(p, (uint32_t)(v >> 32));
    kp_store_be32(p + 4, (uint32_t)v);
}

KP_INLINE uint16_t kp_load_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

KP_INLINE uint32_t kp_load_be32(const uint8_t *p)
{
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
#else
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
#endif
}

KP_INLINE uint64_t kp_load_be64(const uint8_t *p)
{
    return ((uint64_t)kp_load_be32(p) << 32) | kp_load_be32(p + 4);
}

#endif /* KP_ENDIAN_H */
