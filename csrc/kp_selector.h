/* kp_selector.h - the producer's network Selector over epoll (Java's
 * org.apache.kafka.common.network.Selector), in plain C.
 *
 * A selector holds up to `max_connections` TCP connections, each named by a
 * small integer id in [0, max_connections) chosen by the caller (Python maps
 * node ids to connection ids). All socket I/O happens in kp_selector_poll:
 *
 *   connect(id, ...)   starts a non-blocking connect; the outcome is reported
 *                      by a later poll as "connected" or "disconnected".
 *   send(id, ...)      stages ONE send per connection (KP_ERR_BUSY while one
 *                      is staged); the bytes are COPIED into the connection's
 *                      kp_buf, so the caller's buffer may be reused at once.
 *   poll(timeout)      finishes connects, writes each staged send with at most
 *                      ONE send(2) per poll (a slow broker never stalls the
 *                      others), reads at most KP_SEL_READ_BUDGET bytes per
 *                      connection per poll, and reports connected /
 *                      disconnected / completed sends / completed receives.
 *   close(id)          closes at once; no event is reported for it.
 *
 * TLS: kp_selector_connect_tls gives the connection an OpenSSL session (see
 * kp_tls.h). The handshake runs inside poll after the TCP connect, and
 * "connected" means the handshake is done; sends and receives carry the same
 * frames as on plaintext connections. A plaintext connection never touches
 * OpenSSL.
 *
 * Contracts
 * - Threads: a selector is used by one thread at a time, except
 *   kp_selector_wakeup, which any thread (or a signal handler) may call while
 *   another thread waits in kp_selector_poll. No function calls back into the
 *   caller, allocates Python objects or needs the GIL.
 * - Connect outcome: every kp_selector_connect that returns KP_OK produces
 *   exactly one later event for that id - "connected", or "disconnected" with
 *   the errno (ECONNREFUSED, ENETUNREACH, ETIMEDOUT...) - unless the caller
 *   closes the id first. This holds even when connect(2) fails or succeeds
 *   immediately: the result is kept and reported by the next poll (which then
 *   does not block). kp_selector_connect itself fails only for invalid
 *   arguments (KP_ERR_INVALID / KP_ERR_ADDRESS), an id in use (KP_ERR_IN_USE)
 *   or when no socket can be created or configured (KP_ERR_SYS + errno, e.g.
 *   EMFILE).
 * - is_connected(id) turns true in the poll that reports "connected" for it
 *   and false in the poll that reports "disconnected" (or at close). After a
 *   "disconnected" event the id is free: close(id) is then KP_ERR_NOT_FOUND
 *   and connect(id) may reuse it.
 * - Sends: the caller passes whole frames to kp_selector_send (the 4-byte
 *   size prefix already included, e.g. kproducer.codec.frame's output; several
 *   concatenated frames are allowed), or a bare payload to
 *   kp_selector_send_frame, which writes the prefix itself. A send may be
 *   staged while the connection is still connecting; it is written once the
 *   connect completes. The next poll writes a plaintext send before it waits
 *   for events (EPOLLOUT only for what the socket does not take then). A send
 *   is reported "sent" when its last byte has been accepted by the kernel; a
 *   poll that reports one does not block. A close or disconnect discards a staged send.
 * - Receives: every complete frame body (size prefix stripped) becomes one
 *   kp_sel_receive; one read may complete several. Frames completed before a
 *   connection fails in the same poll are still reported. A negative size or
 *   one above max_frame_size closes the connection (KP_ERR_FRAME_SIZE).
 * - Connected sockets are always read (EPOLLIN), even when no response is
 *   expected (acks=0: Tansu answers anyway and would stall if unread).
 * - Results belong to the selector and stay valid until the next
 *   kp_selector_poll, kp_selector_release_results or kp_selector_free; a
 *   receive body may be taken over (kp_selector_take_receive, free() it).
 *   Results hold ids only, never connection pointers, so closing or
 *   reconnecting ids between polls is safe.
 *
 * Disconnect reasons (kp_sel_disconnect.status):
 *   KP_ERR_SYS         sys_errno: ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT...
 *   KP_ERR_EOF         the peer closed; value = bytes of an incomplete frame
 *                      held at that moment (0: closed at a frame boundary)
 *   KP_ERR_FRAME_SIZE  value = the bad size (negative or > max_frame_size)
 *   KP_ERR_NOMEM       a frame body could not be allocated
 *   KP_ERR_TLS         the TLS handshake failed (certificate verification,
 *                      an alert from the server, a protocol error) or a TLS
 *                      record could not be read or written; detail holds
 *                      OpenSSL's reason, e.g. "certificate verify failed:
 *                      hostname mismatch (...)" or "tlsv13 alert certificate
 *                      required"
 *   (TLS connections also report KP_ERR_SYS and KP_ERR_EOF as above; an EOF
 *   during the handshake has the detail "during the TLS handshake".)
 *
 * TLS differences in the I/O contract: a staged send is written with
 * SSL_write calls until the socket is full or KP_SEL_TLS_WRITE_BUDGET bytes
 * went out in this poll (one SSL_write moves one 16 KiB record); "sent" then
 * means every record of it was accepted by the kernel, and bytes_sent /
 * bytes_received count plaintext bytes. Reads stop at the same budget, but
 * never leave bytes buffered inside OpenSSL, where epoll could not see them.
 *
 * Linux epoll only; every epoll call sits in the "poller" section of
 * kp_selector.c so a kqueue backend can replace that section alone.
 */
#ifndef KP_SELECTOR_H
#define KP_SELECTOR_H

#include <sys/socket.h>
#include "kp_common.h"

struct kp_tls_ctx; /* kp_tls.h */

/* Largest number of bytes read from one connection in one poll. Reads are
 * recv(2) calls of up to KP_SEL_READ_CHUNK bytes, stopping early at a short
 * read (socket drained) or EAGAIN. Level-triggered epoll reports whatever is
 * left on the next poll, so one fast connection cannot starve the others. */
#define KP_SEL_READ_CHUNK (64 * 1024)
#define KP_SEL_READ_BUDGET (256 * 1024)

/* Largest number of plaintext bytes SSL_write'n to one TLS connection in one
 * poll (plaintext connections: one send(2), which the socket buffer bounds). */
#define KP_SEL_TLS_WRITE_BUDGET (1024 * 1024)

/* Upper bound on max_connections (ids are 0..max_connections-1). */
#define KP_SEL_MAX_CONNECTIONS 65536

/* Connection states returned by kp_selector_state. */
typedef enum kp_sel_state {
    KP_SEL_FREE = 0,        /* no connection with this id */
    KP_SEL_CONNECTING = 1,  /* connect in progress, or its outcome not yet reported */
    KP_SEL_CONNECTED = 2,   /* "connected" was reported */
} kp_sel_state;

typedef struct kp_sel_disconnect {
    int32_t id;
    kp_status status;   /* KP_ERR_SYS, KP_ERR_EOF, KP_ERR_FRAME_SIZE, KP_ERR_NOMEM */
    int sys_errno;      /* errno for KP_ERR_SYS, else 0 */
    int64_t value;      /* see "Disconnect reasons" above */
    int was_connected;  /* 0: the connect itself failed (TLS: or its handshake) */
    char *detail;       /* NUL-terminated extra reason text (KP_ERR_TLS, a TLS EOF) or NULL;
                           owned by the selector, valid as long as the results */
} kp_sel_disconnect;

typedef struct kp_sel_receive {
    int32_t id;
    uint8_t *data;      /* frame body (no size prefix); NULL once taken */
    size_t len;
    int64_t read_us;    /* CLOCK_MONOTONIC µs (kp_clock.h) when its last byte was read: a
                           frame kept by read() and reported by a later poll keeps it */
} kp_sel_receive;

/* What one poll observed. Each id appears at most once in connected, sent
 * and disconnected; received keeps arrival order per connection. */
typedef struct kp_sel_results {
    const int32_t *connected;
    size_t n_connected;
    const kp_sel_disconnect *disconnected;
    size_t n_disconnected;
    const int32_t *sent;
    const int64_t *sent_us;     /* for each of sent: when its last byte was written
                                   (CLOCK_MONOTONIC µs, kp_clock.h) */
    size_t n_sent;
    kp_sel_receive *received;
    size_t n_received;
    int woken;          /* kp_selector_wakeup was called since the last poll */
} kp_sel_results;

typedef struct kp_sel_stats {
    uint64_t bytes_sent;      /* over the connection's life */
    uint64_t bytes_received;
    size_t send_remaining;    /* bytes of the staged send not yet written (0: none) */
    size_t send_total;        /* size of the staged send (0: none) */
} kp_sel_stats;

typedef struct kp_selector kp_selector;

/* Creates a selector for ids 0..max_connections-1 (1..KP_SEL_MAX_CONNECTIONS)
 * and frames up to max_frame_size bytes (>= 0). KP_ERR_INVALID, KP_ERR_NOMEM,
 * or KP_ERR_SYS with *sys_errno set (epoll_create1 / eventfd failed). */
kp_status kp_selector_new(kp_selector **out, int32_t max_connections, int32_t max_frame_size,
                          int *sys_errno);

/* Closes every connection and frees the selector (NULL is allowed). */
void kp_selector_free(kp_selector *s);

/* Starts a connect to a numeric IPv4 ("127.0.0.1") or IPv6 ("::1",
 * "fe80::1%eth0") address; names are rejected with KP_ERR_ADDRESS (resolve
 * them with getaddrinfo first). port 1..65535. send_buffer/receive_buffer > 0
 * set SO_SNDBUF/SO_RCVBUF; <= 0 keeps the OS default. The socket is
 * non-blocking, close-on-exec, TCP_NODELAY and SO_KEEPALIVE.
 * Returns KP_OK (outcome reported by poll), KP_ERR_INVALID (id/port),
 * KP_ERR_ADDRESS, KP_ERR_IN_USE, KP_ERR_NOMEM, or KP_ERR_SYS with *sys_errno. */
kp_status kp_selector_connect(kp_selector *s, int32_t id, const char *host, int port,
                              int send_buffer, int receive_buffer, int *sys_errno);

/* Same with a ready sockaddr (AF_INET or AF_INET6, port included). */
kp_status kp_selector_connect_addr(kp_selector *s, int32_t id, const struct sockaddr *addr,
                                   socklen_t addrlen, int send_buffer, int receive_buffer,
                                   int *sys_errno);

/* kp_selector_connect over TLS: `tls` supplies the session (NULL: plaintext,
 * exactly kp_selector_connect); server_name is the name the certificate must
 * carry and the SNI (NULL: host). Fails before anything is connected with
 * KP_ERR_TLS (err filled, e.g. an unusable server name) or KP_ERR_NOMEM,
 * otherwise as kp_selector_connect. err may be NULL. */
kp_status kp_selector_connect_tls(kp_selector *s, int32_t id, const char *host, int port,
                                  int send_buffer, int receive_buffer, const struct kp_tls_ctx *tls,
                                  const char *server_name, int *sys_errno, char *err,
                                  size_t errlen);

/* Stages data[0..len) (already framed) as the connection's one send; copies it.
 * KP_ERR_INVALID (id out of range, len 0, NULL data), KP_ERR_NOT_FOUND (no
 * connection with this id), KP_ERR_BUSY (a send is staged), KP_ERR_NOMEM. */
kp_status kp_selector_send(kp_selector *s, int32_t id, const uint8_t *data, size_t len);

/* Stages Size int32 | payload[0..len); KP_ERR_OVERFLOW if len > INT32_MAX,
 * otherwise as kp_selector_send (len 0 is allowed: an empty frame). */
kp_status kp_selector_send_frame(kp_selector *s, int32_t id, const uint8_t *payload, size_t len);

/* Writes what it can of id's staged send now (plaintext: one send(2); TLS: SSL_write calls
 * up to KP_SEL_TLS_WRITE_BUDGET), for a thread other than the poller's while that one is
 * known not to use the selector (kp_courier.h). Reports nothing: the next poll reports the
 * send "sent" once it is whole, and a failed write as the disconnect it is (it writes again
 * and fails again; OpenSSL keeps a session's fatal error). Returns the bytes written, 0
 * (nothing to write, EAGAIN, OpenSSL wants to read first, a failure left to the poll), or
 * -1 for an id out of range or not connected. */
int kp_selector_flush(kp_selector *s, int32_t id);

/* Between polls, for the same thread as kp_selector_flush (the courier, kp_courier.h):
 *
 * settle(id): when id's staged send is written whole, forgets it without a report (the
 *   next poll does not report it "sent": the caller accounts for it) and returns 1, so
 *   that another send may be staged; 0 otherwise.
 * conn_fd(id): the connected socket's descriptor, to wait on with poll(2) (-1: none).
 * read(id): reads what id's connection holds now, as a poll would (frames, or the
 *   disconnect), and keeps it: the next poll reports the kept results first, before its
 *   own, and does not wait while it has any (kp_selector_needs_poll is 1 meanwhile).
 *   Returns the number of frames kept for id, or -1 when the connection is gone (its
 *   disconnect is kept, if this read found it).
 * kept(id, index, &len): the index-th frame kept for id, oldest first (NULL: none), valid
 *   until the next call.
 * drop_kept(id, index): frees that frame: the reader handled it, the poll will not report
 *   it. */
int kp_selector_settle(kp_selector *s, int32_t id);
int kp_selector_conn_fd(const kp_selector *s, int32_t id);
int kp_selector_read(kp_selector *s, int32_t id);
const uint8_t *kp_selector_kept(const kp_selector *s, int32_t id, size_t index, size_t *len);
void kp_selector_drop_kept(kp_selector *s, int32_t id, size_t index);

/* The selector's functions that another extension module calls through a pointer (the
 * courier lives in kproducer._core, the selector in kproducer._net). */
typedef struct kp_selector_fns {
    kp_status (*send)(kp_selector *s, int32_t id, const uint8_t *data, size_t len);
    int (*flush)(kp_selector *s, int32_t id);
    int (*is_connected)(const kp_selector *s, int32_t id);
    int (*is_sending)(const kp_selector *s, int32_t id);
    int (*settle)(kp_selector *s, int32_t id);
    int (*conn_fd)(const kp_selector *s, int32_t id);
    int (*read)(kp_selector *s, int32_t id);
    const uint8_t *(*kept)(const kp_selector *s, int32_t id, size_t index, size_t *len);
    void (*drop_kept)(kp_selector *s, int32_t id, size_t index);
    int (*wakeup)(kp_selector *s);
} kp_selector_fns;
extern const kp_selector_fns kp_selector_functions;

/* Waits up to timeout_ms (-1: no limit, 0: do not wait) for I/O or a wakeup,
 * does the I/O, and points *out at the results (valid until the next poll).
 * Does not wait when an immediate connect outcome is pending. An EINTR wait
 * returns KP_OK with empty results. KP_ERR_SYS with *sys_errno if epoll_wait
 * fails otherwise; per-connection failures are disconnect events, never a
 * poll error. */
kp_status kp_selector_poll(kp_selector *s, int timeout_ms, const kp_sel_results **out,
                           int *sys_errno);

/* Moves receive `index` of the current results to the caller (free() it);
 * the entry's data becomes NULL. KP_ERR_INVALID if index is out of range. */
kp_status kp_selector_take_receive(kp_selector *s, size_t index, uint8_t **data, size_t *len);

/* Frees the current results early (receive bodies not taken). */
void kp_selector_release_results(kp_selector *s);

/* Closes a connection; its staged send and partial receive are dropped and no
 * event is reported. KP_ERR_INVALID (out of range) or KP_ERR_NOT_FOUND. */
kp_status kp_selector_close(kp_selector *s, int32_t id);

/* Closes every connection (no events). */
void kp_selector_close_all(kp_selector *s);

/* Makes a poll in progress (or the next one) return promptly with woken = 1.
 * Async-signal-safe and thread-safe: one write(2) to an eventfd (or a pipe).
 * Returns 0, or the errno of a failed write (EAGAIN - already pending - is 0). */
int kp_selector_wakeup(kp_selector *s);

/* kp_sel_state of id; KP_SEL_FREE when out of range. */
int kp_selector_state(const kp_selector *s, int32_t id);
/* 1 when id is connected (see the contract above), else 0. */
int kp_selector_is_connected(const kp_selector *s, int32_t id);
/* 1 when id has a staged send not yet fully written, else 0. */
int kp_selector_is_sending(const kp_selector *s, int32_t id);
/* The epoll descriptor: readable when a poll has I/O to do or the selector was woken, so
 * another thread may wait on it (poll(2), without calling into the selector) while the
 * selector's owner is busy. -1 for NULL. */
int kp_selector_fd(const kp_selector *s);
/* 1 when the next poll has work that the descriptor does not show: a connect outcome
 * known at once, or interest changes (a send staged since the last poll) not yet given
 * to epoll. A thread that waits on kp_selector_fd must poll(0) first when this is 1. */
int kp_selector_needs_poll(const kp_selector *s);
/* Number of ids in use (connecting or connected). */
int32_t kp_selector_count(const kp_selector *s);
int32_t kp_selector_max_connections(const kp_selector *s);
int32_t kp_selector_max_frame_size(const kp_selector *s);
/* Counters of a connection; KP_ERR_INVALID or KP_ERR_NOT_FOUND. */
kp_status kp_selector_stats(const kp_selector *s, int32_t id, kp_sel_stats *out);
/* Bytes written to and read from id's connections over the selector's life (every
 * connection made under the id, open or closed now); KP_ERR_INVALID. */
kp_status kp_selector_totals(const kp_selector *s, int32_t id, uint64_t *sent, uint64_t *received);

#endif /* KP_SELECTOR_H */
