/* kp_buf.h - the one growable byte buffer that owns encoded bytes.
 *
 * Writers reserve space first (kp_buf_reserve), then write with the unchecked
 * put helpers inside the reserved region, and back-patch fixed-width fields
 * (lengths, counts, CRC) at known offsets. The buffer is never handed out
 * mutable: Python receives a copy or a read-only view. */
#ifndef KP_BUF_H
#define KP_BUF_H

#include "kp_common.h"

typedef struct kp_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int external;   /* data belongs to the caller: never realloc'd or freed; growth is KP_ERR_FULL */
    int fixed;      /* owned, but growth is KP_ERR_FULL: the owner decides (kp_buf_resize), e.g.
                       to charge a memory pool for the bytes first */
} kp_buf;

void kp_buf_init(kp_buf *b);
/* Writes into caller-owned memory of `cap` bytes (e.g. the inside of a Python bytes
 * object, so the result needs no final copy). Running out of room is KP_ERR_FULL: the
 * caller grows its memory, calls kp_buf_rebase and retries. */
void kp_buf_init_external(kp_buf *b, uint8_t *data, size_t cap);
void kp_buf_rebase(kp_buf *b, uint8_t *data, size_t cap);
void kp_buf_free(kp_buf *b);
/* Ensures cap - len >= extra; KP_ERR_NOMEM or KP_ERR_OVERFLOW on failure. */
kp_status kp_buf_grow(kp_buf *b, size_t extra);
/* Sets an owned buffer's capacity to exactly `cap` (>= len): KP_ERR_OVERFLOW for an
 * external buffer or a cap below len, KP_ERR_NOMEM when realloc fails. */
kp_status kp_buf_resize(kp_buf *b, size_t cap);

KP_INLINE kp_status kp_buf_reserve(kp_buf *b, size_t extra)
{
    if (KP_LIKELY(b->cap - b->len >= extra)) return KP_OK;
    return kp_buf_grow(b, extra);
}

/* Appends n bytes; reserve is done here. */
kp_status kp_buf_append(kp_buf *b, const uint8_t *src, size_t n);

/* Moves the bytes out: the caller owns *data (free with free()); b is reset. */
void kp_buf_detach(kp_buf *b, uint8_t **data, size_t *len);

#endif /* KP_BUF_H */
