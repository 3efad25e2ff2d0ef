/* kp_common.h - shared macros and the one status-code enum of kproducer's C core.
 *
 * Plain C (no Python.h): every function returns a kp_status; the Cython layer
 * maps codes to exceptions in one place (kproducer/_codec.pyx: raise_kp_error).
 * Readers that fail fill a kp_error with the field name and byte offset so the
 * exception can say "truncated varint at byte 37 (field: KeyLength)".
 */
#ifndef KP_COMMON_H
#define KP_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifndef KP_DEBUG
#define KP_DEBUG 0
#endif

#if KP_DEBUG
#include <assert.h>
#define KP_ASSERT(x) assert(x)
#else
#define KP_ASSERT(x) ((void)0)
#endif

#if defined(__GNUC__)
#define KP_PREFETCH(p) __builtin_prefetch((const void *)(p))
#define KP_LIKELY(x) __builtin_expect(!!(x), 1)
#define KP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define KP_INLINE static inline __attribute__((always_inline))
#else
#define KP_PREFETCH(p) ((void)(p))
#define KP_LIKELY(x) (x)
#define KP_UNLIKELY(x) (x)
#define KP_INLINE static inline
#endif

typedef enum kp_status {
    KP_OK = 0,
    KP_ERR_NOMEM = 1,          /* allocation failed */
    KP_ERR_TRUNCATED = 2,      /* input ended inside a field */
    KP_ERR_VARINT = 3,         /* varint longer than 5 (int32) / 10 (int64) bytes */
    KP_ERR_INVALID = 4,        /* a field holds an impossible value (negative length, count mismatch) */
    KP_ERR_MAGIC = 5,          /* record batch magic is not 2 */
    KP_ERR_CRC = 6,            /* stored CRC-32C differs from the computed one */
    KP_ERR_FRAME_SIZE = 7,     /* frame size negative or above the receiver's limit */
    KP_ERR_OVERFLOW = 8,       /* a value does not fit its wire field (e.g. > 2 GiB) */
    KP_ERR_TRAILING = 9,       /* bytes left over after a complete structure */
    /* network (kp_selector) */
    KP_ERR_SYS = 10,           /* a system call failed; the errno travels beside the status */
    KP_ERR_BUSY = 11,          /* a send is already staged on this connection */
    KP_ERR_NOT_FOUND = 12,     /* no connection with this id */
    KP_ERR_IN_USE = 13,        /* connect on an id that already has a connection */
    KP_ERR_ADDRESS = 14,       /* not a numeric IPv4/IPv6 address */
    KP_ERR_EOF = 15,           /* the peer closed the connection */
    KP_ERR_FULL = 16,          /* a fixed-capacity (caller-owned) buffer has no room left */
    KP_ERR_TLS = 17,           /* TLS setup, handshake, certificate check or record layer failed */
    /* protocol readers (kp_produce) */
    KP_ERR_NULL = 18,          /* a null (-1) length or count where the field is not nullable */
    KP_ERR_UTF8 = 19,          /* a string field is not valid UTF-8 */
    /* compression (kp_compress) */
    KP_ERR_CODEC = 20,         /* a codec not built in, or its library failed */
} kp_status;

/* Where a reader stopped: filled on failure, untouched on success. */
typedef struct kp_error {
    const char *field;   /* Kafka's field name, e.g. "BaseSequence" */
    size_t offset;       /* byte offset into the input where the field starts */
    int64_t value;       /* offending value when there is one (a length, a count) */
} kp_error;

KP_INLINE kp_status kp_fail(kp_error *err, kp_status code, const char *field,
                            size_t offset, int64_t value)
{
    if (err) {
        err->field = field;
        err->offset = offset;
        err->value = value;
    }
    return code;
}

#endif /* KP_COMMON_H */
