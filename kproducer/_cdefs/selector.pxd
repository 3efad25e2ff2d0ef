# Declarations of csrc/kp_selector.h.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from kproducer._cdefs.common cimport kp_status
from kproducer._cdefs.tls cimport kp_tls_ctx

cdef extern from "kp_selector.h" nogil:
    enum: KP_SEL_READ_CHUNK
    enum: KP_SEL_READ_BUDGET
    enum: KP_SEL_MAX_CONNECTIONS
    enum: KP_SEL_TLS_WRITE_BUDGET

    ctypedef enum kp_sel_state:
        KP_SEL_FREE
        KP_SEL_CONNECTING
        KP_SEL_CONNECTED

    ctypedef struct kp_sel_disconnect:
        int32_t id
        kp_status status
        int sys_errno
        int64_t value
        int was_connected
        char *detail

    ctypedef struct kp_sel_receive:
        int32_t id
        uint8_t *data
        size_t len
        int64_t read_us

    ctypedef struct kp_sel_results:
        const int32_t *connected
        size_t n_connected
        const kp_sel_disconnect *disconnected
        size_t n_disconnected
        const int32_t *sent
        const int64_t *sent_us
        size_t n_sent
        kp_sel_receive *received
        size_t n_received
        int woken

    ctypedef struct kp_sel_stats:
        uint64_t bytes_sent
        uint64_t bytes_received
        size_t send_remaining
        size_t send_total

    ctypedef struct kp_selector:
        pass

    kp_status kp_selector_new(kp_selector **out, int32_t max_connections, int32_t max_frame_size,
                              int *sys_errno)
    void kp_selector_free(kp_selector *s)
    kp_status kp_selector_connect(kp_selector *s, int32_t id, const char *host, int port,
                                  int send_buffer, int receive_buffer, int *sys_errno)
    kp_status kp_selector_connect_tls(kp_selector *s, int32_t id, const char *host, int port,
                                      int send_buffer, int receive_buffer, const kp_tls_ctx *tls,
                                      const char *server_name, int *sys_errno, char *err,
                                      size_t errlen)
    kp_status kp_selector_send(kp_selector *s, int32_t id, const uint8_t *data, size_t len)
    kp_status kp_selector_send_frame(kp_selector *s, int32_t id, const uint8_t *payload, size_t len)
    kp_status kp_selector_poll(kp_selector *s, int timeout_ms, const kp_sel_results **out,
                               int *sys_errno)
    kp_status kp_selector_take_receive(kp_selector *s, size_t index, uint8_t **data, size_t *len)
    void kp_selector_release_results(kp_selector *s)
    kp_status kp_selector_close(kp_selector *s, int32_t id)
    void kp_selector_close_all(kp_selector *s)
    int kp_selector_wakeup(kp_selector *s)
    int kp_selector_state(const kp_selector *s, int32_t id)
    int kp_selector_is_connected(const kp_selector *s, int32_t id)
    int kp_selector_is_sending(const kp_selector *s, int32_t id)
    int kp_selector_fd(const kp_selector *s)
    int kp_selector_needs_poll(const kp_selector *s)
    int32_t kp_selector_count(const kp_selector *s)
    int32_t kp_selector_max_connections(const kp_selector *s)
    int32_t kp_selector_max_frame_size(const kp_selector *s)
    kp_status kp_selector_stats(const kp_selector *s, int32_t id, kp_sel_stats *out)
    kp_status kp_selector_totals(const kp_selector *s, int32_t id, uint64_t *sent, uint64_t *received)
    int kp_selector_flush(kp_selector *s, int32_t id)
    ctypedef struct kp_selector_fns:
        pass
    const kp_selector_fns kp_selector_functions
