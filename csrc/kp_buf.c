/* kp_buf.c - growth policy for kp_buf: doubling, capped at SIZE_MAX / 2. */
#include <stdlib.h>
#include <string.h>
#include "kp_buf.h"

void kp_buf_init(kp_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->external = 0;
    b->fixed = 0;
}

void kp_buf_init_external(kp_buf *b, uint8_t *data, size_t cap)
{
    b->data = data;
    b->len = 0;
    b->cap = cap;
    b->external = 1;
    b->fixed = 0;
}

void kp_buf_rebase(kp_buf *b, uint8_t *data, size_t cap)
{
    KP_ASSERT(b->external && cap >= b->len);
    b->data = data;
    b->cap = cap;
}

void kp_buf_free(kp_buf *b)
{
    if (!b->external) free(b->data);
    kp_buf_init(b);
}

kp_status kp_buf_grow(kp_buf *b, size_t extra)
{
    if (b->external || b->fixed) return KP_ERR_FULL;
    if (extra > SIZE_MAX / 2 - b->len) return KP_ERR_OVERFLOW;
    size_t need = b->len + extra;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return KP_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return KP_OK;
}

kp_status kp_buf_resize(kp_buf *b, size_t cap)
{
    if (b->external || cap < b->len || cap > SIZE_MAX / 2) return KP_ERR_OVERFLOW;
    if (cap == b->cap) return KP_OK;
    uint8_t *p = realloc(b->data, cap ? cap : 1);
    if (!p) return KP_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return KP_OK;
}

kp_status kp_buf_append(kp_buf *b, const uint8_t *src, size_t n)
{
    kp_status st = kp_buf_reserve(b, n);
    if (st != KP_OK) return st;
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    return KP_OK;
}

void kp_buf_detach(kp_buf *b, uint8_t **data, size_t *len)
{
    *data = b->data;
    *len = b->len;
    kp_buf_init(b);
}
