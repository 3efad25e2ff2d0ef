/* kp_frame.c - incremental receiver for size-prefixed frames. */
#include <string.h>
#include "kp_endian.h"
#include "kp_frame.h"

void kp_frame_rx_init(kp_frame_rx *rx, int32_t max_size)
{
    rx->size_have = 0;
    rx->max_size = max_size;
    rx->body_size = -1;
    rx->stream_pos = 0;
    kp_buf_init(&rx->body);
}

void kp_frame_rx_free(kp_frame_rx *rx)
{
    kp_buf_free(&rx->body);
    rx->size_have = 0;
    rx->body_size = -1;
}

kp_status kp_frame_rx_feed(kp_frame_rx *rx, const uint8_t *data, size_t len, size_t *consumed,
                           int *complete, kp_error *err)
{
    size_t pos = 0;
    *complete = 0;
    if (rx->body_size < 0) {
        while (rx->size_have < KP_FRAME_SIZE_BYTES && pos < len)
            rx->size_bytes[rx->size_have++] = data[pos++];
        if (rx->size_have < KP_FRAME_SIZE_BYTES) {
            *consumed = pos;
            rx->stream_pos += pos;
            return KP_OK;
        }
        int32_t size = (int32_t)kp_load_be32(rx->size_bytes);
        if (size < 0 || size > rx->max_size) {
            *consumed = pos;
            size_t at = (size_t)(rx->stream_pos + pos - KP_FRAME_SIZE_BYTES);
            rx->stream_pos += pos;
            return kp_fail(err, KP_ERR_FRAME_SIZE, "Size", at, size);
        }
        rx->body_size = size;
        rx->body.len = 0;
        kp_status st = kp_buf_reserve(&rx->body, size ? (size_t)size : 1);
        if (st != KP_OK) {
            *consumed = pos;
            rx->stream_pos += pos;
            return st;
        }
    }
    size_t want = (size_t)rx->body_size - rx->body.len;
    size_t take = len - pos < want ? len - pos : want;
    if (take) {
        memcpy(rx->body.data + rx->body.len, data + pos, take);
        rx->body.len += take;
        pos += take;
    }
    if (rx->body.len == (size_t)rx->body_size) *complete = 1;
    *consumed = pos;
    rx->stream_pos += pos;
    return KP_OK;
}

void kp_frame_rx_take(kp_frame_rx *rx, uint8_t **body, size_t *body_len)
{
    kp_buf_detach(&rx->body, body, body_len);
    rx->size_have = 0;
    rx->body_size = -1;
}

kp_status kp_frame_put_size(uint8_t out[KP_FRAME_SIZE_BYTES], size_t size)
{
    if (size > INT32_MAX) return KP_ERR_OVERFLOW;
    kp_store_be32(out, (uint32_t)size);
    return KP_OK;
}
