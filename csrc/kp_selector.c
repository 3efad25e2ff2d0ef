/* kp_selector.c - non-blocking TCP connections multiplexed over epoll.
 *
 * Layout: the "poller" section wraps every epoll call (the one place a kqueue
 * backend would replace); the rest is the connection state machine:
 *
 *   FREE --connect--> CONNECTING --SO_ERROR == 0--> CONNECTED
 *                          |                            |
 *                          +--SO_ERROR / connect(2)-----+--EOF, I/O error, bad frame size
 *                          v                            v
 *                       "disconnected" event, slot back to FREE
 *
 * close(id) goes to FREE from any state without an event.
 *
 * Interest: EPOLLOUT while connecting or while a staged send waits for room
 * (a plaintext send is first written by the poll after it is staged, and most
 * never wait), EPOLLIN on every connected socket. Level-triggered, so whatever
 * a poll leaves unread or unwritten is reported again by the next epoll_wait.
 *
 * TLS (a connection with an SSL object, see kp_tls.h) adds one step: once
 * SO_ERROR says the TCP connect succeeded the connection stays CONNECTING
 * while SSL_connect runs, its interest following the handshake's
 * WANT_READ / WANT_WRITE, and "connected" is reported when the handshake is
 * done. Then reads go through SSL_read and the staged send through
 * SSL_write. Every TLS branch tests c->ssl, so plaintext connections run the
 * same code as before. OpenSSL does not read ahead (the default), so once
 * SSL_has_pending() is 0 nothing decrypted or undecrypted waits in user
 * space and level-triggered epoll still tells when there is more to read.
 */
#define _GNU_SOURCE /* SOCK_NONBLOCK, SOCK_CLOEXEC, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "kp_buf.h"
#include "kp_clock.h"
#include "kp_frame.h"
#include "kp_selector.h"
#include "kp_tls.h"

/* Staged-send buffers above this capacity are freed once written, so one
 * large request does not pin its memory on an idle connection. */
#define KP_SEL_KEEP_TX_CAP (1024 * 1024)
#define KP_SEL_MAX_EVENTS 4096
#define KP_SEL_WAKE_TOKEN UINT64_MAX

/* ===================================================================== */
/* poller: the only code that knows about epoll                           */
/* ===================================================================== */

enum { KP_EV_READ = 1, KP_EV_WRITE = 2, KP_EV_ERROR = 4, KP_EV_HUP = 8 };

typedef struct kp_poller {
    int fd;
    struct epoll_event *events;
    int cap;
} kp_poller;

static int poller_open(kp_poller *p, int cap)
{
    p->events = calloc((size_t)cap, sizeof *p->events);
    if (!p->events) return ENOMEM;
    p->cap = cap;
    p->fd = epoll_create1(EPOLL_CLOEXEC);
    if (p->fd < 0) {
        int e = errno;
        free(p->events);
        p->events = NULL;
        return e;
    }
    return 0;
}

static void poller_close(kp_poller *p)
{
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    free(p->events);
    p->events = NULL;
}

static uint32_t poller_mask(unsigned want)
{
    return ((want & KP_EV_READ) ? (uint32_t)EPOLLIN : 0u) | ((want & KP_EV_WRITE) ? (uint32_t)EPOLLOUT : 0u);
}

/* op: 0 add, 1 modify. Returns 0 or errno. */
static int poller_set(kp_poller *p, int fd, uint64_t token, unsigned want, int modify)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = poller_mask(want);
    ev.data.u64 = token;
    return epoll_ctl(p->fd, modify ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : errno;
}

static void poller_del(kp_poller *p, int fd)
{
    struct epoll_event ev; /* non-NULL for kernels before 2.6.9 (epoll_ctl(2) BUGS) */
    memset(&ev, 0, sizeof ev);
    (void)epoll_ctl(p->fd, EPOLL_CTL_DEL, fd, &ev);
}

/* Returns the number of events, or -errno. */
static int poller_wait(kp_poller *p, int timeout_ms)
{
    int n = epoll_wait(p->fd, p->events, p->cap, timeout_ms);
    return n < 0 ? -errno : n;
}

static void poller_event(const kp_poller *p, int i, uint64_t *token, unsigned *flags)
{
    uint32_t e = p->events[i].events;
    *token = p->events[i].data.u64;
    *flags = ((e & EPOLLIN) ? KP_EV_READ : 0u) | ((e & EPOLLOUT) ? KP_EV_WRITE : 0u) |
             ((e & EPOLLERR) ? KP_EV_ERROR : 0u) | ((e & (EPOLLHUP | EPOLLRDHUP)) ? KP_EV_HUP : 0u);
}

/* ===================================================================== */
/* selector                                                              */
/* ===================================================================== */

typedef struct kp_conn {
    int fd;                 /* -1 when closed (FREE, or a connect that failed at once) */
    uint8_t state;          /* kp_sel_state */
    uint8_t pending;        /* connect(2) outcome known at once: report at the next poll */
    uint8_t dirty;          /* interest must be recomputed at the next poll */
    uint8_t registered;     /* interest currently set (KP_EV_READ | KP_EV_WRITE) */
    int pending_errno;      /* with pending: 0 = connected at once, else connect(2)'s errno */
    uint32_t gen;           /* bumped per connect and close: stale epoll tokens are ignored */
    kp_buf tx;              /* the staged send (a copy); len == 0: none */
    size_t tx_off;          /* bytes of tx already written */
    int64_t tx_done_us;     /* when tx's last byte was written (kp_clock.h): the flush that
                               wrote it (the courier's) may come before the poll that reports it */
    kp_frame_rx rx;
    uint64_t bytes_sent;
    uint64_t bytes_received;
    /* Over the id's life, every connection made under it (never reset): the statistics'
       per-broker bytes, read by kp_selector_totals whether a connection is open or not. */
    uint64_t total_sent;
    uint64_t total_received;
    SSL *ssl;               /* TLS session; NULL for plaintext */
    uint8_t tls_handshaking;       /* TCP is up, SSL_connect not done yet (state CONNECTING) */
    uint8_t tls_want;              /* what the handshake waits for: KP_EV_READ or KP_EV_WRITE */
    uint8_t tls_read_wants_write;  /* SSL_read returned WANT_WRITE: read again once writable */
    uint8_t tls_write_wants_read;  /* SSL_write returned WANT_READ: write again after a read */
} kp_conn;

struct kp_selector {
    kp_conn *conns;
    int32_t max_conns;
    int32_t max_frame;
    int32_t count;
    int32_t n_pending;
    int32_t n_dirty;
    int32_t *dirty;          /* ids whose interest changed since the last poll */
    kp_poller poller;
    int wake_rd;             /* eventfd, or the read end of a pipe */
    int wake_wr;             /* the same eventfd, or the write end */
    int wake_is_pipe;
    uint8_t *scratch;        /* KP_SEL_READ_CHUNK bytes for recv */
    int32_t *connected;      /* max_conns entries each: one event per id per poll */
    kp_sel_disconnect *disconnected;
    int32_t *sent;
    int64_t *sent_us;
    kp_sel_receive *received;
    size_t received_cap;
    kp_sel_results res;
    int kept;                /* res holds what kp_selector_read found outside a poll: the
                                next poll reports it first instead of releasing it */
};

static uint64_t conn_token(int32_t id, const kp_conn *c)
{
    return ((uint64_t)c->gen << 32) | (uint32_t)id;
}

static int id_ok(const kp_selector *s, int32_t id)
{
    return s && id >= 0 && id < s->max_conns;
}

static unsigned conn_want(const kp_conn *c)
{
    if (c->state == KP_SEL_CONNECTING) return c->tls_handshaking ? c->tls_want : KP_EV_WRITE;
    if (KP_UNLIKELY(c->ssl != NULL))
        return KP_EV_READ | (((c->tx.len && !c->tls_write_wants_read) || c->tls_read_wants_write)
                                 ? KP_EV_WRITE : 0u);
    return KP_EV_READ | (c->tx.len ? KP_EV_WRITE : 0u);
}

/* Frees a connection's resources and returns the slot to FREE. */
static void conn_release(kp_selector *s, kp_conn *c)
{
    if (c->fd >= 0) {
        poller_del(&s->poller, c->fd);
        close(c->fd);
        c->fd = -1;
    }
    if (c->pending) s->n_pending--;
    if (c->ssl) {
        /* No close_notify: the socket is going away either way, and a
         * non-blocking SSL_shutdown could not wait for the peer's. */
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    c->tls_handshaking = c->tls_want = 0;
    c->tls_read_wants_write = c->tls_write_wants_read = 0;
    kp_buf_free(&c->tx);
    kp_frame_rx_free(&c->rx);
    c->tx_off = 0;
    c->tx_done_us = 0;
    c->state = KP_SEL_FREE;
    c->pending = 0;
    c->pending_errno = 0;
    c->registered = 0;
    c->gen++;
    /* c->dirty may stay set: the dirty list skips FREE slots. */
    s->count--;
}

static void mark_dirty(kp_selector *s, int32_t id, kp_conn *c)
{
    if (c->dirty) return;
    KP_ASSERT(s->n_dirty < s->max_conns);
    c->dirty = 1;
    s->dirty[s->n_dirty++] = id;
}

/* ---- result recording ---------------------------------------------------- */

/* detail: extra text (copied; NULL for none), see kp_sel_disconnect.detail. */
static void report_disconnect_detail(kp_selector *s, int32_t id, kp_conn *c, kp_status st, int err,
                                     int64_t value, const char *detail)
{
    KP_ASSERT(s->res.n_disconnected < (size_t)s->max_conns);
    if (s->res.n_disconnected < (size_t)s->max_conns) {
        kp_sel_disconnect *d = &s->disconnected[s->res.n_disconnected++];
        d->id = id;
        d->status = st;
        d->sys_errno = err;
        d->value = value;
        d->was_connected = c->state == KP_SEL_CONNECTED;
        d->detail = detail ? strdup(detail) : NULL; /* NULL on ENOMEM: the status still tells */
    }
    conn_release(s, c);
}

static void report_disconnect(kp_selector *s, int32_t id, kp_conn *c, kp_status st, int err,
                              int64_t value)
{
    report_disconnect_detail(s, id, c, st, err, value, NULL);
}

static void report_id(int32_t *arr, size_t *n, int32_t cap, int32_t id)
{
    KP_ASSERT(*n < (size_t)cap);
    if (*n < (size_t)cap) arr[(*n)++] = id;
}

static kp_status push_receive(kp_selector *s, int32_t id, uint8_t *data, size_t len)
{
    if (s->res.n_received == s->received_cap) {
        size_t cap = s->received_cap ? s->received_cap * 2 : 64;
        kp_sel_receive *p = realloc(s->received, cap * sizeof *p);
        if (!p) return KP_ERR_NOMEM;
        s->received = p;
        s->received_cap = cap;
        s->res.received = p;
    }
    kp_sel_receive *r = &s->received[s->res.n_received++];
    r->id = id;
    r->data = data;
    r->len = len;
    r->read_us = kp_mono_us();
    return KP_OK;
}

/* Applies the interest the connection needs now; a failure disconnects it.
 * Returns 0, or -1 when the connection was closed. */
static int conn_update_interest(kp_selector *s, int32_t id, kp_conn *c)
{
    unsigned want = conn_want(c);
    if (c->fd < 0 || want == c->registered) return 0;
    int e = poller_set(&s->poller, c->fd, conn_token(id, c), want, 1);
    if (e) {
        report_disconnect(s, id, c, KP_ERR_SYS, e, 0);
        return -1;
    }
    c->registered = (uint8_t)want;
    return 0;
}

static int conn_set_connected(kp_selector *s, int32_t id, kp_conn *c)
{
    c->state = KP_SEL_CONNECTED;
    report_id(s->connected, &s->res.n_connected, s->max_conns, id);
    return conn_update_interest(s, id, c);
}

/* ---- lifecycle ------------------------------------------------------------ */

static int wake_open(kp_selector *s)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) {
        s->wake_rd = s->wake_wr = fd;
        s->wake_is_pipe = 0;
        return 0;
    }
    /* Fallback for kernels or sandboxes without eventfd (eventfd(2)). */
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return errno;
    s->wake_rd = p[0];
    s->wake_wr = p[1];
    s->wake_is_pipe = 1;
    return 0;
}

static void wake_drain(kp_selector *s)
{
    uint8_t buf[64];
    if (!s->wake_is_pipe) {
        uint64_t v;
        (void)!read(s->wake_rd, &v, sizeof v);
        return;
    }
    while (read(s->wake_rd, buf, sizeof buf) > 0) {
    }
}

kp_status kp_selector_new(kp_selector **out, int32_t max_connections, int32_t max_frame_size,
                          int *sys_errno)
{
    if (sys_errno) *sys_errno = 0;
    if (!out) return KP_ERR_INVALID;
    *out = NULL;
    if (max_connections < 1 || max_connections > KP_SEL_MAX_CONNECTIONS || max_frame_size < 0)
        return KP_ERR_INVALID;
    kp_selector *s = calloc(1, sizeof *s);
    if (!s) return KP_ERR_NOMEM;
    s->poller.fd = -1;
    s->wake_rd = s->wake_wr = -1;
    s->max_conns = max_connections;
    s->max_frame = max_frame_size;
    size_t n = (size_t)max_connections;
    s->conns = calloc(n, sizeof *s->conns);
    s->dirty = calloc(n, sizeof *s->dirty);
    s->connected = calloc(n, sizeof *s->connected);
    s->sent = calloc(n, sizeof *s->sent);
    s->sent_us = calloc(n, sizeof *s->sent_us);
    s->disconnected = calloc(n, sizeof *s->disconnected);
    s->scratch = malloc(KP_SEL_READ_CHUNK);
    if (!s->conns || !s->dirty || !s->connected || !s->sent || !s->sent_us || !s->disconnected || !s->scratch) {
        kp_selector_free(s);
        return KP_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        s->conns[i].fd = -1;
        kp_buf_init(&s->conns[i].tx);
        kp_frame_rx_init(&s->conns[i].rx, max_frame_size);
    }
    int cap = max_connections + 1 < KP_SEL_MAX_EVENTS ? max_connections + 1 : KP_SEL_MAX_EVENTS;
    int e = poller_open(&s->poller, cap);
    if (!e) {
        e = wake_open(s);
        if (!e) e = poller_set(&s->poller, s->wake_rd, KP_SEL_WAKE_TOKEN, KP_EV_READ, 0);
    }
    if (e) {
        kp_selector_free(s);
        if (sys_errno) *sys_errno = e;
        return e == ENOMEM ? KP_ERR_NOMEM : KP_ERR_SYS;
    }
    s->res.connected = s->connected;
    s->res.disconnected = s->disconnected;
    s->res.sent = s->sent;
    s->res.sent_us = s->sent_us;
    *out = s;
    return KP_OK;
}

void kp_selector_free(kp_selector *s)
{
    if (!s) return;
    if (s->conns) kp_selector_close_all(s);
    kp_selector_release_results(s);
    poller_close(&s->poller);
    if (s->wake_rd >= 0) close(s->wake_rd);
    if (s->wake_is_pipe && s->wake_wr >= 0) close(s->wake_wr);
    free(s->conns);
    free(s->dirty);
    free(s->connected);
    free(s->sent);
    free(s->sent_us);
    free(s->disconnected);
    free(s->received);
    free(s->scratch);
    free(s);
}

/* ---- connect ---------------------------------------------------------------- */

static int set_int_opt(int fd, int level, int name, int value)
{
    return setsockopt(fd, level, name, &value, sizeof value) == 0 ? 0 : errno;
}

kp_status kp_selector_connect_addr(kp_selector *s, int32_t id, const struct sockaddr *addr,
                                   socklen_t addrlen, int send_buffer, int receive_buffer,
                                   int *sys_errno)
{
    if (sys_errno) *sys_errno = 0;
    if (!id_ok(s, id) || !addr) return KP_ERR_INVALID;
    if (!((addr->sa_family == AF_INET && addrlen >= (socklen_t)sizeof(struct sockaddr_in)) ||
          (addr->sa_family == AF_INET6 && addrlen >= (socklen_t)sizeof(struct sockaddr_in6))))
        return KP_ERR_ADDRESS;
    kp_conn *c = &s->conns[id];
    if (c->state != KP_SEL_FREE) return KP_ERR_IN_USE;

    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0) {
        if (sys_errno) *sys_errno = errno;
        return KP_ERR_SYS;
    }
    /* Buffer sizes must be set before connect(2) to affect the TCP window
     * scale negotiated in the SYN (tcp(7), "SO_RCVBUF"). */
    int e = set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    if (!e) e = set_int_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
    if (!e && send_buffer > 0) e = set_int_opt(fd, SOL_SOCKET, SO_SNDBUF, send_buffer);
    if (!e && receive_buffer > 0) e = set_int_opt(fd, SOL_SOCKET, SO_RCVBUF, receive_buffer);
    if (e) {
        close(fd);
        if (sys_errno) *sys_errno = e;
        return KP_ERR_SYS;
    }

    int rc = connect(fd, addr, addrlen);
    int cerr = rc == 0 ? 0 : errno;
    c->gen++;
    if (rc != 0 && cerr != EINPROGRESS && cerr != EINTR) {
        /* Failed at once (ECONNREFUSED on loopback, ENETUNREACH, ...): keep
         * the errno and report it from the next poll, like a deferred failure. */
        close(fd);
        c->fd = -1;
    } else {
        /* EINTR: the connect continues asynchronously (connect(2)). */
        e = poller_set(&s->poller, fd, conn_token(id, c), KP_EV_WRITE, 0);
        if (e) {
            close(fd);
            if (sys_errno) *sys_errno = e;
            return e == ENOMEM ? KP_ERR_NOMEM : KP_ERR_SYS;
        }
        c->fd = fd;
        c->registered = KP_EV_WRITE;
    }
    c->state = KP_SEL_CONNECTING;
    c->tx_off = 0;
    c->tx.len = 0;
    c->tx_done_us = 0;
    c->bytes_sent = c->bytes_received = 0;
    kp_frame_rx_init(&c->rx, s->max_frame);
    c->pending = rc == 0 || (cerr != EINPROGRESS && cerr != EINTR);
    c->pending_errno = rc == 0 ? 0 : cerr;
    if (c->pending) s->n_pending++;
    s->count++;
    return KP_OK;
}

kp_status kp_selector_connect(kp_selector *s, int32_t id, const char *host, int port,
                              int send_buffer, int receive_buffer, int *sys_errno)
{
    if (sys_errno) *sys_errno = 0;
    if (!id_ok(s, id) || !host || port < 1 || port > 65535) return KP_ERR_INVALID;
    char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
    size_t n = strlen(host);
    if (n == 0 || n >= sizeof buf) return KP_ERR_ADDRESS;
    memcpy(buf, host, n + 1);

    struct sockaddr_in v4;
    memset(&v4, 0, sizeof v4);
    if (inet_pton(AF_INET, buf, &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons((uint16_t)port);
        return kp_selector_connect_addr(s, id, (const struct sockaddr *)&v4, sizeof v4, send_buffer,
                                        receive_buffer, sys_errno);
    }
    struct sockaddr_in6 v6;
    memset(&v6, 0, sizeof v6);
    char *pct = strchr(buf, '%');
    if (pct) { /* "fe80::1%eth0" or "fe80::1%2": zone index */
        *pct = '\0';
        const char *zone = pct + 1;
        if (!*zone) return KP_ERR_ADDRESS;
        char *end = NULL;
        unsigned long idx = strtoul(zone, &end, 10);
        if (*end != '\0') idx = if_nametoindex(zone);
        if (idx == 0 || idx > UINT32_MAX) return KP_ERR_ADDRESS;
        v6.sin6_scope_id = (uint32_t)idx;
    }
    if (inet_pton(AF_INET6, buf, &v6.sin6_addr) != 1) return KP_ERR_ADDRESS;
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons((uint16_t)port);
    return kp_selector_connect_addr(s, id, (const struct sockaddr *)&v6, sizeof v6, send_buffer,
                                    receive_buffer, sys_errno);
}

kp_status kp_selector_connect_tls(kp_selector *s, int32_t id, const char *host, int port,
                                  int send_buffer, int receive_buffer, const kp_tls_ctx *tls,
                                  const char *server_name, int *sys_errno, char *err,
                                  size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (sys_errno) *sys_errno = 0;
    if (!id_ok(s, id)) return KP_ERR_INVALID;
    if (!tls) return kp_selector_connect(s, id, host, port, send_buffer, receive_buffer, sys_errno);
    if (s->conns[id].state != KP_SEL_FREE) return KP_ERR_IN_USE;
    /* The session first: a bad server name fails before any socket exists. */
    SSL *ssl = NULL;
    kp_status st = kp_tls_session_new(tls, server_name ? server_name : host, &ssl, err, errlen);
    if (st != KP_OK) return st;
    st = kp_selector_connect(s, id, host, port, send_buffer, receive_buffer, sys_errno);
    if (st != KP_OK) {
        SSL_free(ssl);
        return st;
    }
    s->conns[id].ssl = ssl;
    return KP_OK;
}

/* ---- send ------------------------------------------------------------------- */

static kp_status stage(kp_selector *s, int32_t id, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *data, size_t len)
{
    if (!id_ok(s, id) || (len && !data) || prefix_len + len == 0) return KP_ERR_INVALID;
    kp_conn *c = &s->conns[id];
    if (c->state == KP_SEL_FREE) return KP_ERR_NOT_FOUND;
    if (c->tx.len) return KP_ERR_BUSY;
    if (len > SIZE_MAX / 2 - prefix_len) return KP_ERR_OVERFLOW;
    c->tx.len = 0;
    kp_status st = kp_buf_reserve(&c->tx, prefix_len + len);
    if (st != KP_OK) return st;
    if (prefix_len) memcpy(c->tx.data, prefix, prefix_len);
    if (len) memcpy(c->tx.data + prefix_len, data, len);
    c->tx.len = prefix_len + len;
    c->tx_off = 0;
    c->tx_done_us = 0;
    /* EPOLLOUT is added by the next poll: staging makes no system call. */
    if (c->state == KP_SEL_CONNECTED) mark_dirty(s, id, c);
    return KP_OK;
}

kp_status kp_selector_send(kp_selector *s, int32_t id, const uint8_t *data, size_t len)
{
    if (len == 0) return KP_ERR_INVALID;
    return stage(s, id, NULL, 0, data, len);
}

kp_status kp_selector_send_frame(kp_selector *s, int32_t id, const uint8_t *payload, size_t len)
{
    uint8_t size[KP_FRAME_SIZE_BYTES];
    kp_status st = kp_frame_put_size(size, len);
    if (st != KP_OK) return st;
    return stage(s, id, size, sizeof size, payload, len);
}

/* ---- I/O -------------------------------------------------------------------- */

static int conn_write_tls(kp_selector *s, int32_t id, kp_conn *c);
static int conn_write_done(kp_selector *s, int32_t id, kp_conn *c);
static int conn_read_tls(kp_selector *s, int32_t id, kp_conn *c);

/* One send(2) of what is left of a plaintext connection's staged send: the bytes written,
 * 0 (EAGAIN, EINTR), or -errno. */
static ssize_t conn_send_rest(kp_conn *c)
{
    ssize_t w = send(c->fd, c->tx.data + c->tx_off, c->tx.len - c->tx_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
        int e = errno;
        return (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) ? 0 : -e;
    }
    c->tx_off += (size_t)w;
    c->bytes_sent += (uint64_t)w;
    c->total_sent += (uint64_t)w;
    if (c->tx_off == c->tx.len) c->tx_done_us = kp_mono_us();
    return w;
}

/* One send(2) of the rest of the staged send (TLS: SSL_write calls, see
 * KP_SEL_TLS_WRITE_BUDGET). Returns -1 if the connection was closed. */
static int conn_write(kp_selector *s, int32_t id, kp_conn *c)
{
    if (KP_UNLIKELY(c->ssl != NULL)) return conn_write_tls(s, id, c);
    if (c->tx.len == c->tx_off) return c->tx.len ? conn_write_done(s, id, c) : 0;   /* flushed */
    ssize_t w = conn_send_rest(c);
    if (w < 0) {
        report_disconnect(s, id, c, KP_ERR_SYS, (int)-w, 0);
        return -1;
    }
    if (c->tx_off < c->tx.len) return 0;
    return conn_write_done(s, id, c);
}

/* SSL_write calls of what is left of a TLS connection's staged send, until it is written,
 * the socket is full or KP_SEL_TLS_WRITE_BUDGET bytes went out. Returns 0, or the
 * SSL_get_error code of the call that stopped (*sys: errno right after it). In partial-write
 * mode each successful SSL_write has flushed its records to the kernel; after WANT_WRITE or
 * WANT_READ the same bytes are offered again (SSL_write(3) requires it). */
static int tls_send_rest(kp_conn *c, int *sys)
{
    size_t budget = KP_SEL_TLS_WRITE_BUDGET;
    while (c->tx_off < c->tx.len && budget) {
        size_t left = c->tx.len - c->tx_off;
        int n = left > (size_t)INT32_MAX ? INT32_MAX : (int)left;
        ERR_clear_error();
        int w = SSL_write(c->ssl, c->tx.data + c->tx_off, n);
        *sys = errno;
        if (w <= 0)
            return SSL_get_error(c->ssl, w);
        c->tx_off += (size_t)w;
        c->bytes_sent += (uint64_t)w;
        c->total_sent += (uint64_t)w;
        budget -= (size_t)w < budget ? (size_t)w : budget;
    }
    if (c->tx_off == c->tx.len) c->tx_done_us = kp_mono_us();
    return 0;
}

int kp_selector_flush(kp_selector *s, int32_t id)
{
    if (!id_ok(s, id)) return -1;
    kp_conn *c = &s->conns[id];
    if (c->state != KP_SEL_CONNECTED || c->fd < 0) return -1;
    if (c->tx.len <= c->tx_off) return 0;
    if (KP_UNLIKELY(c->ssl != NULL)) {
        /* A stop for any reason is left to the poll: its conn_write_tls offers the same
         * bytes again (a failed session fails again: OpenSSL keeps a fatal error). */
        size_t before = c->tx_off;
        int sys = 0;
        if (c->tls_write_wants_read == 0 && tls_send_rest(c, &sys) != 0)
            ERR_clear_error();      /* this thread's queue: the poll's call sees its own */
        size_t w = c->tx_off - before;
        return w > INT_MAX ? INT_MAX : (int)w;
    }
    ssize_t w = conn_send_rest(c);      /* a failure: the next poll's write meets it again */
    return w <= 0 ? 0 : (int)(w > INT_MAX ? INT_MAX : w);
}

const kp_selector_fns kp_selector_functions = {
    kp_selector_send, kp_selector_flush, kp_selector_is_connected, kp_selector_is_sending,
    kp_selector_settle, kp_selector_conn_fd, kp_selector_read, kp_selector_kept,
    kp_selector_drop_kept, kp_selector_wakeup,
};

/* Forgets the staged send (written whole), keeping a buffer of ordinary size. */
static void tx_clear(kp_conn *c)
{
    c->tx.len = 0;
    c->tx_off = 0;
    c->tx_done_us = 0;
    if (c->tx.cap > KP_SEL_KEEP_TX_CAP) kp_buf_free(&c->tx);
}

/* The staged send is fully written: report it. Returns -1 if closed. */
static int conn_write_done(kp_selector *s, int32_t id, kp_conn *c)
{
    if (s->res.n_sent < (size_t)s->max_conns)
        s->sent_us[s->res.n_sent] = c->tx_done_us > 0 ? c->tx_done_us : kp_mono_us();
    tx_clear(c);
    report_id(s->sent, &s->res.n_sent, s->max_conns, id);
    return conn_update_interest(s, id, c);
}

static int64_t rx_buffered(const kp_frame_rx *rx)
{
    return rx->body_size < 0 ? (int64_t)rx->size_have : (int64_t)(KP_FRAME_SIZE_BYTES + rx->body.len);
}

/* Cuts data[0..n) into frames. Returns -1 if the connection was closed. */
static int conn_feed(kp_selector *s, int32_t id, kp_conn *c, const uint8_t *data, size_t n)
{
    size_t pos = 0;
    while (pos < n) {
        size_t used = 0;
        int complete = 0;
        kp_error err = {0};
        kp_status st = kp_frame_rx_feed(&c->rx, data + pos, n - pos, &used, &complete, &err);
        pos += used;
        if (st != KP_OK) {
            report_disconnect(s, id, c, st, 0, st == KP_ERR_FRAME_SIZE ? err.value : 0);
            return -1;
        }
        if (complete) {
            uint8_t *body;
            size_t blen;
            kp_frame_rx_take(&c->rx, &body, &blen);
            if (push_receive(s, id, body, blen) != KP_OK) {
                free(body);
                report_disconnect(s, id, c, KP_ERR_NOMEM, 0, (int64_t)blen);
                return -1;
            }
        }
    }
    return 0;
}

/* Reads up to KP_SEL_READ_BUDGET bytes and cuts them into frames. Returns -1
 * if the connection was closed. */
static int conn_read(kp_selector *s, int32_t id, kp_conn *c)
{
    if (KP_UNLIKELY(c->ssl != NULL)) return conn_read_tls(s, id, c);
    size_t budget = KP_SEL_READ_BUDGET;
    while (budget) {
        size_t want = budget < KP_SEL_READ_CHUNK ? budget : KP_SEL_READ_CHUNK;
        ssize_t r = recv(c->fd, s->scratch, want, MSG_DONTWAIT);
        if (r < 0) {
            int e = errno;
            if (e == EINTR) continue;
            if (e == EAGAIN || e == EWOULDBLOCK) return 0;
            report_disconnect(s, id, c, KP_ERR_SYS, e, 0);
            return -1;
        }
        if (r == 0) {
            report_disconnect(s, id, c, KP_ERR_EOF, 0, rx_buffered(&c->rx));
            return -1;
        }
        c->bytes_received += (uint64_t)r;
        c->total_received += (uint64_t)r;
        budget -= (size_t)r;
        if (conn_feed(s, id, c, s->scratch, (size_t)r) < 0) return -1;
        if ((size_t)r < want) return 0; /* short read: the socket is drained */
    }
    return 0;
}

/* ---- TLS ---------------------------------------------------------------------- */

/* A failed SSL_* call (SSL_get_error() == ssl_err, errno saved as sys right
 * after it) closes the connection: a socket error stays KP_ERR_SYS, a clean
 * or unexpected EOF is KP_ERR_EOF (during the handshake with a detail), and
 * everything else - certificate checks, alerts, protocol errors - is
 * KP_ERR_TLS with OpenSSL's reason as the detail. Returns -1. */
static int conn_tls_fail(kp_selector *s, int32_t id, kp_conn *c, int ssl_err, int sys)
{
    char text[KP_TLS_ERROR_MAX];
    int eof = 0;
    if (ssl_err == SSL_ERROR_SYSCALL) {
        ERR_clear_error();
        if (sys != 0) {
            report_disconnect(s, id, c, KP_ERR_SYS, sys, 0);
            return -1;
        }
        eof = 1;
    } else if (ssl_err == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        eof = 1; /* close_notify */
    } else {
        eof = kp_tls_describe_failure(c->ssl, text, sizeof text);
    }
    if (eof) {
        report_disconnect_detail(s, id, c, KP_ERR_EOF, 0, rx_buffered(&c->rx),
                                 c->tls_handshaking ? "during the TLS handshake" : NULL);
        return -1;
    }
    report_disconnect_detail(s, id, c, KP_ERR_TLS, 0, 0, text);
    return -1;
}

/* Runs SSL_connect as far as it goes now; reports "connected" when it is
 * done. Returns -1 if the connection was closed. */
static int conn_handshake(kp_selector *s, int32_t id, kp_conn *c)
{
    ERR_clear_error();
    int rc = SSL_connect(c->ssl);
    int sys = errno;
    if (rc == 1) {
        c->tls_handshaking = 0;
        c->tls_want = 0;
        return conn_set_connected(s, id, c);
    }
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->tls_want = e == SSL_ERROR_WANT_READ ? KP_EV_READ : KP_EV_WRITE;
        return conn_update_interest(s, id, c);
    }
    return conn_tls_fail(s, id, c, e, sys);
}

/* TCP is connected: hand the socket to OpenSSL and send the ClientHello. */
static int conn_start_tls(kp_selector *s, int32_t id, kp_conn *c)
{
    kp_status st = kp_tls_session_set_fd(c->ssl, c->fd);
    if (st != KP_OK) {
        report_disconnect(s, id, c, st, 0, 0);
        return -1;
    }
    c->tls_handshaking = 1;
    return conn_handshake(s, id, c);
}

/* tls_send_rest, then what its stop means: WANT_READ waits for the peer's bytes, a failure
 * closes the connection, a send written whole is reported. Returns -1 if closed. */
static int conn_write_tls(kp_selector *s, int32_t id, kp_conn *c)
{
    int sys = 0, e = tls_send_rest(c, &sys);
    if (e == SSL_ERROR_WANT_WRITE) return 0;
    if (e == SSL_ERROR_WANT_READ) { /* renegotiation: wait for the peer's bytes */
        c->tls_write_wants_read = 1;
        return conn_update_interest(s, id, c);
    }
    if (e != 0) return conn_tls_fail(s, id, c, e, sys);
    if (c->tx_off < c->tx.len) return 0;
    return conn_write_done(s, id, c);
}

/* SSL_read up to KP_SEL_READ_BUDGET plaintext bytes, then on while OpenSSL
 * still holds buffered bytes (epoll cannot report those). */
static int conn_read_tls(kp_selector *s, int32_t id, kp_conn *c)
{
    size_t budget = KP_SEL_READ_BUDGET;
    c->tls_read_wants_write = 0;
    while (budget || SSL_has_pending(c->ssl)) {
        ERR_clear_error();
        int r = SSL_read(c->ssl, s->scratch, KP_SEL_READ_CHUNK);
        int sys = errno;
        if (r <= 0) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) break;
            if (e == SSL_ERROR_WANT_WRITE) {
                c->tls_read_wants_write = 1;
                break;
            }
            return conn_tls_fail(s, id, c, e, sys);
        }
        c->bytes_received += (uint64_t)r;
        c->total_received += (uint64_t)r;
        budget -= (size_t)r < budget ? (size_t)r : budget;
        if (conn_feed(s, id, c, s->scratch, (size_t)r) < 0) return -1;
    }
    c->tls_write_wants_read = 0; /* what the write waited for may have come */
    return conn_update_interest(s, id, c);
}

/* SO_ERROR of a connecting socket decides its outcome. */
static int conn_finish_connect(kp_selector *s, int32_t id, kp_conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) {
        report_disconnect(s, id, c, KP_ERR_SYS, err, 0);
        return -1;
    }
    if (c->ssl) return conn_start_tls(s, id, c);
    return conn_set_connected(s, id, c);
}

void kp_selector_release_results(kp_selector *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->res.n_received; i++) free(s->received[i].data);
    for (size_t i = 0; i < s->res.n_disconnected; i++) {
        free(s->disconnected[i].detail);
        s->disconnected[i].detail = NULL;
    }
    s->res.n_received = 0;
    s->res.n_connected = 0;
    s->res.n_disconnected = 0;
    s->res.n_sent = 0;
    s->res.woken = 0;
}

kp_status kp_selector_poll(kp_selector *s, int timeout_ms, const kp_sel_results **out,
                           int *sys_errno)
{
    if (sys_errno) *sys_errno = 0;
    if (!s || !out) return KP_ERR_INVALID;
    if (s->kept) s->kept = 0;       /* kp_selector_read's findings come first */
    else kp_selector_release_results(s);
    *out = &s->res;
    if (timeout_ms < 0) timeout_ms = -1;

    /* Sends staged since the last poll. A plaintext one is written at once: the socket
     * takes a whole request as a rule, and then EPOLLOUT is never registered and removed
     * again (two epoll_ctl calls per request), nor does the epoll descriptor turn readable
     * for the Sender's watcher, which sleeps on it (kp_turn.c) and would wake for nothing.
     * What the socket does not take waits for EPOLLOUT as before; TLS always does. */
    for (int32_t i = 0; i < s->n_dirty; i++) {
        int32_t id = s->dirty[i];
        kp_conn *c = &s->conns[id];
        c->dirty = 0;
        if (c->state != KP_SEL_CONNECTED) continue;
        if (c->ssl == NULL && c->tx.len && conn_write(s, id, c) < 0) continue;
        (void)conn_update_interest(s, id, c);
    }
    s->n_dirty = 0;

    /* Outcomes of connect(2) calls that finished at once. */
    if (s->n_pending) {
        timeout_ms = 0;
        for (int32_t id = 0; id < s->max_conns && s->n_pending; id++) {
            kp_conn *c = &s->conns[id];
            if (!c->pending) continue;
            c->pending = 0;
            s->n_pending--;
            if (c->pending_errno)
                report_disconnect(s, id, c, KP_ERR_SYS, c->pending_errno, 0);
            else if (c->ssl)
                (void)conn_start_tls(s, id, c);
            else
                (void)conn_set_connected(s, id, c);
        }
    }
    if (s->res.n_connected || s->res.n_disconnected || s->res.n_sent || s->res.n_received)
        timeout_ms = 0;

    int n = poller_wait(&s->poller, timeout_ms);
    if (n < 0) {
        if (n == -EINTR) return KP_OK;
        if (sys_errno) *sys_errno = -n;
        return KP_ERR_SYS;
    }
    for (int i = 0; i < n; i++) {
        uint64_t token;
        unsigned flags;
        poller_event(&s->poller, i, &token, &flags);
        if (token == KP_SEL_WAKE_TOKEN) {
            wake_drain(s);
            s->res.woken = 1;
            continue;
        }
        uint32_t id32 = (uint32_t)token;
        if (id32 >= (uint32_t)s->max_conns) continue;
        int32_t id = (int32_t)id32;
        kp_conn *c = &s->conns[id];
        if (c->gen != (uint32_t)(token >> 32) || c->fd < 0 || c->state == KP_SEL_FREE) continue;
        if (c->state == KP_SEL_CONNECTING) {
            if (c->tls_handshaking) {
                if (conn_handshake(s, id, c) < 0) continue;
            } else {
                if (!(flags & (KP_EV_WRITE | KP_EV_ERROR | KP_EV_HUP))) continue;
                if (conn_finish_connect(s, id, c) < 0) continue;
            }
            /* Connected now (TLS: maybe still handshaking): a send staged
             * during the connect goes out at once. */
            if (c->state == KP_SEL_CONNECTED && c->tx.len && (flags & KP_EV_WRITE))
                (void)conn_write(s, id, c);
            continue;
        }
        /* Read first: frames that arrived before an error are still delivered.
         * TLS also reads when writable if SSL_read waited for that. */
        if (((flags & (KP_EV_READ | KP_EV_ERROR | KP_EV_HUP)) ||
             (KP_UNLIKELY(c->tls_read_wants_write) && (flags & KP_EV_WRITE))) &&
            conn_read(s, id, c) < 0)
            continue;
        if ((flags & KP_EV_WRITE) && c->tx.len && !c->tls_write_wants_read) (void)conn_write(s, id, c);
    }
    return KP_OK;
}

kp_status kp_selector_take_receive(kp_selector *s, size_t index, uint8_t **data, size_t *len)
{
    if (!s || !data || !len || index >= s->res.n_received) return KP_ERR_INVALID;
    *data = s->received[index].data;
    *len = s->received[index].len;
    s->received[index].data = NULL;
    return KP_OK;
}

/* ---- close, wakeup, queries ------------------------------------------------- */

kp_status kp_selector_close(kp_selector *s, int32_t id)
{
    if (!id_ok(s, id)) return KP_ERR_INVALID;
    kp_conn *c = &s->conns[id];
    if (c->state == KP_SEL_FREE) return KP_ERR_NOT_FOUND;
    conn_release(s, c);
    return KP_OK;
}

void kp_selector_close_all(kp_selector *s)
{
    if (!s) return;
    for (int32_t id = 0; id < s->max_conns; id++) {
        kp_conn *c = &s->conns[id];
        if (c->state != KP_SEL_FREE) conn_release(s, c);
        /* FREE slots keep a reusable rx/tx capacity; drop it here too. */
        kp_buf_free(&c->tx);
        kp_frame_rx_free(&c->rx);
    }
}

int kp_selector_wakeup(kp_selector *s)
{
    if (!s) return EINVAL;
    int saved = errno; /* async-signal-safe: leave errno as found (signal-safety(7)) */
    ssize_t w;
    if (s->wake_is_pipe) {
        uint8_t one = 1;
        w = write(s->wake_wr, &one, 1);
    } else {
        uint64_t one = 1;
        w = write(s->wake_wr, &one, sizeof one);
    }
    int e = (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ? errno : 0;
    errno = saved;
    return e;
}

int kp_selector_state(const kp_selector *s, int32_t id)
{
    return id_ok(s, id) ? s->conns[id].state : KP_SEL_FREE;
}

int kp_selector_is_connected(const kp_selector *s, int32_t id)
{
    return kp_selector_state(s, id) == KP_SEL_CONNECTED;
}

int kp_selector_is_sending(const kp_selector *s, int32_t id)
{
    return id_ok(s, id) && s->conns[id].state != KP_SEL_FREE && s->conns[id].tx.len != 0;
}

int kp_selector_fd(const kp_selector *s)
{
    return s ? s->poller.fd : -1;
}

int kp_selector_needs_poll(const kp_selector *s)
{
    return s && (s->n_pending > 0 || s->n_dirty > 0 || s->kept);
}

int kp_selector_conn_fd(const kp_selector *s, int32_t id)
{
    return id_ok(s, id) && s->conns[id].state == KP_SEL_CONNECTED ? s->conns[id].fd : -1;
}

int kp_selector_read(kp_selector *s, int32_t id)
{
    if (!id_ok(s, id)) return -1;
    kp_conn *c = &s->conns[id];
    if (!s->kept) {
        kp_selector_release_results(s);
        s->kept = 1;
    }
    if (c->state != KP_SEL_CONNECTED || c->fd < 0 || conn_read(s, id, c) < 0) return -1;
    int n = 0;
    for (size_t i = 0; i < s->res.n_received; i++)
        n += s->received[i].id == id;
    return n;
}

/* The index-th frame kept for id (its slot in the results), or -1. */
static ssize_t kept_slot(const kp_selector *s, int32_t id, size_t index)
{
    if (!s || !s->kept) return -1;
    for (size_t i = 0; i < s->res.n_received; i++)
        if (s->received[i].id == id && index-- == 0)
            return (ssize_t)i;
    return -1;
}

const uint8_t *kp_selector_kept(const kp_selector *s, int32_t id, size_t index, size_t *len)
{
    ssize_t i = kept_slot(s, id, index);
    if (i < 0) return NULL;
    *len = s->received[i].len;
    return s->received[i].data;
}

void kp_selector_drop_kept(kp_selector *s, int32_t id, size_t index)
{
    ssize_t i = kept_slot(s, id, index);
    if (i < 0) return;
    free(s->received[i].data);
    memmove(&s->received[i], &s->received[i + 1],
            (s->res.n_received - (size_t)i - 1) * sizeof s->received[0]);
    s->res.n_received--;
}

int kp_selector_settle(kp_selector *s, int32_t id)
{
    if (!id_ok(s, id)) return 0;
    kp_conn *c = &s->conns[id];
    if (c->state != KP_SEL_CONNECTED || c->tx.len == 0 || c->tx_off < c->tx.len) return 0;
    tx_clear(c);
    mark_dirty(s, id, c);       /* EPOLLOUT, if a poll registered it for this send, goes */
    return 1;
}

int32_t kp_selector_count(const kp_selector *s)
{
    return s ? s->count : 0;
}

int32_t kp_selector_max_connections(const kp_selector *s)
{
    return s ? s->max_conns : 0;
}

int32_t kp_selector_max_frame_size(const kp_selector *s)
{
    return s ? s->max_frame : 0;
}

kp_status kp_selector_stats(const kp_selector *s, int32_t id, kp_sel_stats *out)
{
    if (!id_ok(s, id) || !out) return KP_ERR_INVALID;
    const kp_conn *c = &s->conns[id];
    if (c->state == KP_SEL_FREE) return KP_ERR_NOT_FOUND;
    out->bytes_sent = c->bytes_sent;
    out->bytes_received = c->bytes_received;
    out->send_total = c->tx.len;
    out->send_remaining = c->tx.len - c->tx_off;
    return KP_OK;
}

kp_status kp_selector_totals(const kp_selector *s, int32_t id, uint64_t *sent, uint64_t *received)
{
    if (!id_ok(s, id) || !sent || !received) return KP_ERR_INVALID;
    *sent = s->conns[id].total_sent;
    *received = s->conns[id].total_received;
    return KP_OK;
}
