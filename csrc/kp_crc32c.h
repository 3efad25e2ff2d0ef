/* kp_crc32c.h - CRC-32C (Castagnoli) for Kafka record batches.
 *
 * Kafka's RecordBatch v2 carries a CRC-32C over everything from the
 * Attributes field to the end of the batch (RFC 3720 polynomial 0x1EDC6F41,
 * reflected 0x82F63B78, init/xorout 0xFFFFFFFF).
 *
 * Convention: `crc` is the CRC value as users see it, exactly like Python's
 * `crc32c.crc32c(data, crc)`: start with 0, pass the previous result to
 * continue.  update(0, "123456789") == 0xE3069283 and
 * update(update(0, a), b) == update(0, a + b).
 *
 * All functions are thread-safe; tables are built once on first use.
 */
#ifndef KP_CRC32C_H
#define KP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fastest available implementation (SSE4.2 when the CPU has it, else table). */
uint32_t kp_crc32c_update(uint32_t crc, const uint8_t *data, size_t len);

/* Table-driven slicing-by-8; portable, always available. */
uint32_t kp_crc32c_update_sw(uint32_t crc, const uint8_t *data, size_t len);

/* SSE4.2 crc32 instruction, three interleaved streams.  Meant to be called
 * only when kp_crc32c_hw_available(); it still falls back to the table
 * version otherwise (and always on non-x86-64), so it never faults. */
uint32_t kp_crc32c_update_hw(uint32_t crc, const uint8_t *data, size_t len);

/* 1 if the CPU supports SSE4.2 (cpuid, cached; x86-64 only), else 0. */
int kp_crc32c_hw_available(void);

#ifdef __cplusplus
}
#endif

#endif /* KP_CRC32C_H */
