/* kp_frame.h - Kafka's 4-byte big-endian size-prefixed framing.
 *
 * Every request and response is `Size int32 | Size bytes`. The receiver is
 * incremental: bytes may arrive in any split (one at a time, or several frames
 * in one read). A negative size or one above the receiver's limit is a
 * protocol error; the connection must be closed, since the stream is lost. */
#ifndef KP_FRAME_H
#define KP_FRAME_H

#include "kp_common.h"
#include "kp_buf.h"

#define KP_FRAME_SIZE_BYTES 4
/* The largest frame a receiver takes by default: Kafka's socket.request.max.bytes. */
#define KP_FRAME_DEFAULT_MAX_SIZE (100 * 1024 * 1024)

typedef struct kp_frame_rx {
    uint8_t size_bytes[KP_FRAME_SIZE_BYTES];
    uint32_t size_have;    /* bytes of the size prefix received so far */
    int32_t max_size;      /* largest acceptable frame body */
    int32_t body_size;     /* -1 while the size is incomplete */
    kp_buf body;           /* grows to body_size */
    uint64_t stream_pos;   /* bytes consumed over the stream's life, for error offsets */
} kp_frame_rx;

void kp_frame_rx_init(kp_frame_rx *rx, int32_t max_size);
void kp_frame_rx_free(kp_frame_rx *rx);

/* Consumes bytes from data[0..len) until one frame completes or the input ends.
 * *consumed: bytes used. *complete: 1 when a frame is ready in rx->body
 * (take it with kp_frame_rx_take before feeding more). On KP_ERR_FRAME_SIZE,
 * err->value holds the bad size and err->offset its stream offset. */
kp_status kp_frame_rx_feed(kp_frame_rx *rx, const uint8_t *data, size_t len, size_t *consumed,
                           int *complete, kp_error *err);

/* Moves the completed frame body out (caller frees with free()) and resets
 * the receiver for the next frame. */
void kp_frame_rx_take(kp_frame_rx *rx, uint8_t **body, size_t *body_len);

/* Writes the 4-byte size prefix for a body of `size` bytes. */
kp_status kp_frame_put_size(uint8_t out[KP_FRAME_SIZE_BYTES], size_t size);

#endif /* KP_FRAME_H */
