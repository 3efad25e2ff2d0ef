/* kp_murmur2.c - Java's signed-int murmur2, done in uint32_t so overflow is
 * defined; Java's >>> is a logical shift, which is what uint32_t >> gives. */
#include "kp_murmur2.h"

int32_t kp_murmur2_hash(const uint8_t *data, size_t len)
{
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    /* Java uses an int length: keys over 2 GiB cannot exist there either. */
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t n4 = len / 4;

    for (size_t i = 0; i < n4; i++) {
        const uint8_t *p = data + i * 4;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + (len & ~(size_t)3);
    switch (len & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}
