/* kp_murmur2.h - murmur2 exactly as Kafka's Java client computes it
 * (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c), so keyed
 * records land on the same partition as with Java producers. */
#ifndef KP_MURMUR2_H
#define KP_MURMUR2_H

#include "kp_common.h"

int32_t kp_murmur2_hash(const uint8_t *data, size_t len);

/* Java's DefaultPartitioner/BuiltInPartitioner: toPositive(murmur2(key)) % n. */
KP_INLINE int32_t kp_murmur2_partition(const uint8_t *key, size_t len, int32_t num_partitions)
{
    return (int32_t)(((uint32_t)kp_murmur2_hash(key, len) & 0x7fffffffu) % (uint32_t)num_partitions);
}

#endif /* KP_MURMUR2_H */
