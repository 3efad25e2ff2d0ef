/* kp_crc32c.c - CRC-32C (Castagnoli), software and SSE4.2 implementations.
 *
 * Algorithm notes
 * - Reflected CRC, polynomial 0x82F63B78, init and final xor 0xFFFFFFFF.
 *   Internally we work on the "raw" register (crc ^ 0xFFFFFFFF) so that the
 *   public value can be chained between calls.
 * - Software: slicing-by-8 (8 tables of 256 entries); eight input bytes are
 *   folded per step with eight independent lookups instead of a serial chain.
 * - Hardware: SSE4.2 `crc32` has a latency of 3 cycles but can issue one per
 *   cycle, so one dependent chain uses only a third of the unit.  Following
 *   Mark Adler's approach we split a block into THREE consecutive parts and
 *   run three independent chains in parallel, then merge them: the CRC of
 *   A||B is shift(crc(A), |B|) ^ crc_raw(B), where shift() applies |B| zero
 *   bytes to a CRC register.  That operator is linear over GF(2), so it is
 *   precomputed once as four 256-entry byte tables for a fixed block size
 *   (one set for 8 KiB parts, one for 256-byte parts).  Long blocks amortise
 *   the merge cost; short blocks keep medium buffers on the fast path; the
 *   tail (< 768 bytes) runs single-stream.
 *
 * Thread safety: all tables and the cpuid result are built by pthread_once,
 * so concurrent first calls are race-free and later calls see a fully
 * initialised state.
 */
#include "kp_crc32c.h"
#include "kp_common.h"

#include <pthread.h>
#include <string.h>

#define KP_CRC32C_POLY 0x82F63B78u  /* reflected 0x1EDC6F41 */

/* KP_CRC32C_NO_HW forces the portable build (used to test the non-x86 path). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(KP_CRC32C_NO_HW)
#define KP_CRC32C_X86 1
#include <cpuid.h>
#include <nmmintrin.h>
#else
#define KP_CRC32C_X86 0
#endif

/* ---------------------------------------------------------------- tables */

static uint32_t crc_table[8][256];  /* slicing-by-8 */

#if KP_CRC32C_X86
/* Three-stream block sizes: LONG for large buffers (merge cost negligible),
 * SHORT so that buffers of a few hundred bytes still use three streams. */
#define KP_CRC_LONG 8192
#define KP_CRC_SHORT 256
static uint32_t crc_long[4][256];   /* shift by KP_CRC_LONG zero bytes */
static uint32_t crc_short[4][256];  /* shift by KP_CRC_SHORT zero bytes */
static int hw_ok;

/* Multiply a 32x32 GF(2) matrix (column per bit) by a vector. */
static uint32_t gf2_matrix_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_matrix_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_matrix_times(mat, mat[n]);
}

/* Operator that feeds `len` zero bytes into a raw CRC register. */
static void crc32c_zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32];
    uint32_t row = 1;

    /* one zero bit */
    odd[0] = KP_CRC32C_POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_matrix_square(even, odd);  /* two zero bits */
    gf2_matrix_square(odd, even);  /* four zero bits */

    /* Square repeatedly: first pass gives one zero byte, each further
     * squaring doubles it; len must be a power of two here. */
    do {
        gf2_matrix_square(even, odd);
        len >>= 1;
        if (len == 0)
            return;
        gf2_matrix_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void crc32c_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t op[32];
    crc32c_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_matrix_times(op, n);
        zeros[1][n] = gf2_matrix_times(op, n << 8);
        zeros[2][n] = gf2_matrix_times(op, n << 16);
        zeros[3][n] = gf2_matrix_times(op, n << 24);
    }
}

/* Non-const parameter: passing uint32_t[4][256] to a const-qualified array
 * parameter is only valid from C2x on (-Wpedantic). */
KP_INLINE uint32_t crc32c_shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^
           zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
}

static int cpu_has_sse42(void)
{
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    return (ecx & bit_SSE4_2) != 0;
}
#endif /* KP_CRC32C_X86 */

static void crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ KP_CRC32C_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
#if KP_CRC32C_X86
    crc32c_zeros(crc_long, KP_CRC_LONG);
    crc32c_zeros(crc_short, KP_CRC_SHORT);
    hw_ok = cpu_has_sse42();
#endif
}

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

KP_INLINE void crc32c_ensure_init(void)
{
    pthread_once(&crc_once, crc32c_init);
}

/* -------------------------------------------------------------- software */

/* Little-endian 32-bit load from any alignment; gcc/clang fuse this into one
 * mov on little-endian targets and it stays correct on big-endian ones. */
KP_INLINE uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) |
           ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint32_t crc32c_sw_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    /* Byte-wise up to 8-byte alignment so the word loads don't split lines. */
    while (len && ((uintptr_t)p & 7) != 0) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = load_le32(p) ^ crc;
        uint32_t hi = load_le32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

uint32_t kp_crc32c_update_sw(uint32_t crc, const uint8_t *data, size_t len)
{
    crc32c_ensure_init();
    return crc32c_sw_raw(crc ^ 0xFFFFFFFFu, data, len) ^ 0xFFFFFFFFu;
}

/* -------------------------------------------------------------- hardware */

#if KP_CRC32C_X86
/* memcpy keeps the 8-byte load free of aliasing/alignment UB; it compiles to
 * a single mov. */
KP_INLINE uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Raw-register CRC with the crc32 instruction.  The target attribute lets
 * this file build without -msse4.2; callers reach it only when hw_ok.
 * clang (zig cc, which builds the release wheel) wants "crc32" named too. */
__attribute__((target("sse4.2,crc32")))
static uint32_t crc32c_hw_raw(uint32_t crc, const uint8_t *next, size_t len)
{
    uint64_t crc0 = crc, crc1, crc2;

    /* Align to 8 bytes: keeps every 8-byte load within one cache line. */
    while (len && ((uintptr_t)next & 7) != 0) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }

    /* Three streams over 3 x 8 KiB: the 3-cycle latency of crc32 is hidden
     * because each cycle can issue an independent stream's instruction. */
    while (len >= KP_CRC_LONG * 3) {
        const uint8_t *end = next + KP_CRC_LONG;
        crc1 = 0;
        crc2 = 0;
        do {
            crc0 = _mm_crc32_u64(crc0, load64(next));
            crc1 = _mm_crc32_u64(crc1, load64(next + KP_CRC_LONG));
            crc2 = _mm_crc32_u64(crc2, load64(next + KP_CRC_LONG * 2));
            next += 8;
        } while (next < end);
        /* crc(A||B||C) = shift(shift(a) ^ b) ^ c; raw crc1/crc2 start at 0. */
        crc0 = crc32c_shift(crc_long, (uint32_t)crc0) ^ crc1;
        crc0 = crc32c_shift(crc_long, (uint32_t)crc0) ^ crc2;
        next += KP_CRC_LONG * 2;
        len -= KP_CRC_LONG * 3;
    }

    /* Same over 3 x 256 bytes for what remains (and for medium buffers). */
    while (len >= KP_CRC_SHORT * 3) {
        const uint8_t *end = next + KP_CRC_SHORT;
        crc1 = 0;
        crc2 = 0;
        do {
            crc0 = _mm_crc32_u64(crc0, load64(next));
            crc1 = _mm_crc32_u64(crc1, load64(next + KP_CRC_SHORT));
            crc2 = _mm_crc32_u64(crc2, load64(next + KP_CRC_SHORT * 2));
            next += 8;
        } while (next < end);
        crc0 = crc32c_shift(crc_short, (uint32_t)crc0) ^ crc1;
        crc0 = crc32c_shift(crc_short, (uint32_t)crc0) ^ crc2;
        next += KP_CRC_SHORT * 2;
        len -= KP_CRC_SHORT * 3;
    }

    /* Tail (< 768 bytes): single stream; too short for merging to pay off. */
    while (len >= 8) {
        crc0 = _mm_crc32_u64(crc0, load64(next));
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    return (uint32_t)crc0;
}
#endif /* KP_CRC32C_X86 */

uint32_t kp_crc32c_update_hw(uint32_t crc, const uint8_t *data, size_t len)
{
    crc32c_ensure_init();
#if KP_CRC32C_X86
    if (KP_LIKELY(hw_ok))
        return crc32c_hw_raw(crc ^ 0xFFFFFFFFu, data, len) ^ 0xFFFFFFFFu;
#endif
    /* No SSE4.2 (or not x86-64): never execute the instruction. */
    return crc32c_sw_raw(crc ^ 0xFFFFFFFFu, data, len) ^ 0xFFFFFFFFu;
}

uint32_t kp_crc32c_update(uint32_t crc, const uint8_t *data, size_t len)
{
    /* Same body as update_hw: the hw_ok check already is the dispatch, and
     * it is a single predictable branch on a value cached at init. */
    return kp_crc32c_update_hw(crc, data, len);
}

int kp_crc32c_hw_available(void)
{
    crc32c_ensure_init();
#if KP_CRC32C_X86
    return hw_ok;
#else
    return 0;
#endif
}
