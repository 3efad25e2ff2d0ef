# Declarations of csrc/kp_turn.h.
from libc.stdint cimport int64_t, uint64_t
from kproducer._cdefs.common cimport kp_status

cdef extern from "kp_turn.h" nogil:
    ctypedef struct kp_turn:
        pass
    kp_status kp_turn_new(kp_turn **out, int fd, int *sys_errno)
    void kp_turn_free(kp_turn *t)
    int kp_turn_pending(const kp_turn *t)
    void kp_turn_raise(kp_turn *t)
    void kp_turn_begin(kp_turn *t)
    void kp_turn_done(kp_turn *t, int64_t due_us)
    void kp_turn_due_by(kp_turn *t, int64_t due_us)
    int kp_turn_wait(kp_turn *t, int timeout_ms)
    int kp_turn_wait_clear(kp_turn *t, int timeout_ms)
    uint64_t kp_turn_steps_ended(const kp_turn *t)
    int kp_turn_wait_step(kp_turn *t, uint64_t seen, int timeout_ms)
    void kp_turn_touch(kp_turn *t)
    int kp_turn_wait_io(kp_turn *t, int grace_ms)
    int64_t kp_turn_grace_us(const kp_turn *t, int floor_ms)
    int64_t kp_turn_send_interval_us(const kp_turn *t)
    uint64_t kp_turn_activity(const kp_turn *t)
    kp_status kp_turn_loop_fd(kp_turn *t, int *fd_out, int *sys_errno)
    void kp_turn_attach_loop(kp_turn *t, int delta, int grace_ms)
    int64_t kp_turn_now_ms()
    int64_t kp_turn_now_us()
    int64_t kp_turn_wall_to_mono_us(int64_t wall_ms)
    long kp_turn_watcher_slack_ns(const kp_turn *t)
    uint64_t kp_turn_raised(const kp_turn *t)
    uint64_t kp_turn_asleep_steps(const kp_turn *t)
    int64_t kp_turn_raised_at_us(const kp_turn *t)
