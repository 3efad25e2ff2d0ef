/* kp_turn.h - whose turn it is to run the producer's Sender step, decided without the GIL.
 *
 * The Sender's step (ready, drain, build requests, poll(0), complete batches) runs under the
 * interpreter lock. A thread that asks for the GIL while the application's thread is busy
 * in Python gets it only after the switch interval (5 ms), so a step that waits for the I/O
 * thread's turn adds milliseconds to every acknowledgement. A kp_turn keeps one plain C
 * thread (the watcher) that never touches Python: it sleeps in ppoll(2) on the selector's
 * epoll descriptor until a socket is ready, the selector is woken, or the next deadline
 * (kp_turn_set_due) passes, and then raises `pending`. Any thread that holds the GIL already
 * (the application in send()) reads `pending` for the cost of a load and runs the step
 * itself; the I/O thread waits, also without the GIL, in kp_turn_wait_io until the watcher
 * hands it a step that no such thread ran within its grace.
 *
 * Contract
 * - pending stays raised until kp_turn_done, which the thread that ran a step calls after
 *   its poll(0). The watcher does not watch meanwhile: the descriptor is level-triggered
 *   and stays readable until a poll consumes it, so watching it would spin.
 * - Deadlines are CLOCK_MONOTONIC microseconds (Python's time.monotonic() on Linux). A
 *   step names its next one in kp_turn_done; between steps, other threads name earlier ones
 *   with kp_turn_due_by (a new batch's linger.ms, a full batch: now). A watcher sleeping
 *   past an earlier deadline is re-armed without raising pending. kp_turn_begin, at the
 *   start of a step, forgets the deadlines named so far: the step sees their batches.
 * - kp_turn_free stops and joins the watcher; in a forked child (the watcher does not exist
 *   there) it frees nothing that the parent's thread might use, and leaks the rest.
 */
#ifndef KP_TURN_H
#define KP_TURN_H

#include "kp_common.h"

typedef struct kp_turn kp_turn;

/* Starts the watcher on `fd` (the selector's epoll descriptor; not owned). KP_ERR_NOMEM,
 * or KP_ERR_SYS with *sys_errno (eventfd, pthread_create). */
kp_status kp_turn_new(kp_turn **out, int fd, int *sys_errno);

/* Stops and joins the watcher, frees the turn (NULL is allowed). */
void kp_turn_free(kp_turn *t);

/* 1 when a step is wanted (a socket is ready, a deadline passed, kp_turn_raise). */
int kp_turn_pending(const kp_turn *t);

/* Raises pending at once (close, a new request from another thread). */
void kp_turn_raise(kp_turn *t);

/* A step begins: it sees every deadline named so far (kp_turn_due_by), which it includes
 * in the one it names when done. */
void kp_turn_begin(kp_turn *t);

/* A step ran its poll: its next deadline is due_us (CLOCK_MONOTONIC µs, -1: none); clears
 * pending and lets the watcher watch again. */
void kp_turn_done(kp_turn *t, int64_t due_us);

/* A deadline named between steps (a batch that will be sendable at due_us, 0 or now: at
 * once): the watcher raises pending at the earliest of these and the last step's. */
void kp_turn_due_by(kp_turn *t, int64_t due_us);

/* Waits up to timeout_ms (-1: no limit) for pending; returns 1 if pending. */
int kp_turn_wait(kp_turn *t, int timeout_ms);

/* How many steps have ended (kp_turn_done), and a wait for the next: up to timeout_ms (-1: no
 * limit) until pending rises, a step ends after the count read as `seen`, or the turn stops;
 * returns 1 if pending. For a thread that waits for what the steps settle (flush, a
 * transaction's commit) and runs the wanted steps itself: it reads the count, then looks at
 * what it waits for, then waits, so that a step another thread ends in between (the I/O
 * thread's, when this one was descheduled past its grace) wakes it. */
uint64_t kp_turn_steps_ended(const kp_turn *t);
int kp_turn_wait_step(kp_turn *t, uint64_t seen, int timeout_ms);

/* Waits up to timeout_ms (-1: no limit) for pending to clear (a step by another thread);
 * returns 1 if it is clear. */
int kp_turn_wait_clear(kp_turn *t, int timeout_ms);

/* An application thread sent (a relaxed store: lost bumps from racing threads are harmless,
 * any change counts). */
void kp_turn_touch(kp_turn *t);

/* The I/O thread's wait: until the watcher hands it a wanted step (returns 1) or the turn is
 * stopped (0). The watcher decides as pending rises: at once when no application thread sent
 * since its last look; otherwise after a grace (kp_turn_grace_us with floor grace_ms) in which
 * that thread may run the step itself at its next send, and which a step run meanwhile ends
 * with the handing over cancelled. The grace ends early when that thread is asleep in a system
 * call other than futex(2) (it holds no GIL and steps only once it returns: an application
 * that sleeps between sends), looked at in /proc/self/task/<tid>/syscall as the grace begins
 * and, within KP_TURN_SENDER_SLEEPS looks of the last time it was seen asleep, every
 * KP_TURN_SENDER_LOOK_US. With event loops attached, the grace is theirs (kp_turn_attach_loop).
 * The watcher keeps the grace so that a step the application runs within it wakes nobody but
 * the watcher: the I/O thread wakes only to step. */
#define KP_TURN_SENDER_LOOK_US 250
#define KP_TURN_SENDER_SLEEPS 64
int kp_turn_wait_io(kp_turn *t, int grace_ms);

/* The grace, in µs: twice the application's mean interval between sends (counted by
 * kp_turn_done from kp_turn_touch's count, so that a thread sending at a steady rate gets to
 * its next send first), when that lies between floor_ms and KP_TURN_GRACE_MAX_US; floor_ms
 * otherwise (a thread that sends less often is not waited for). */
#define KP_TURN_GRACE_MAX_US 3000
int64_t kp_turn_grace_us(const kp_turn *t, int floor_ms);

/* The application's mean interval between sends as kp_turn_done measures it (0: not known). */
int64_t kp_turn_send_interval_us(const kp_turn *t);

/* How many times application threads sent (kp_turn_touch), for another thread's looks. */
uint64_t kp_turn_activity(const kp_turn *t);

/* Event loops (asyncio) as the stepping thread. kp_turn_loop_fd gives an eventfd (created
 * once, owned by the turn; KP_ERR_SYS with *sys_errno) that becomes readable each time
 * pending rises while at least one loop is attached: the loop watches it and runs the step
 * on its own thread, so no other thread needs the GIL for it. kp_turn_attach_loop adds
 * `delta` (+1/-1) attached loops and sets how long the watcher leaves a wanted step to
 * them (grace_ms; -1: unchanged) before the I/O thread runs it (a loop held up by its
 * application). The loop reads the eventfd empty before it steps. */
kp_status kp_turn_loop_fd(kp_turn *t, int *fd_out, int *sys_errno);
void kp_turn_attach_loop(kp_turn *t, int delta, int grace_ms);

/* CLOCK_MONOTONIC in milliseconds and in microseconds. */
int64_t kp_turn_now_ms(void);
int64_t kp_turn_now_us(void);

/* The CLOCK_MONOTONIC microsecond at which the wall clock (CLOCK_REALTIME) reaches wall_ms:
 * the accumulator keeps batch times in wall milliseconds, as Java's does. */
int64_t kp_turn_wall_to_mono_us(int64_t wall_ms);

/* The watcher's timer slack in ns, as prctl(PR_GET_TIMERSLACK) reports it on that thread
 * (0: the watcher has not started yet; -1: unknown). It asks for 1 ns: the default 50 µs lets
 * ppoll(2) wake it up to that much after each deadline (a batch's linger.ms). */
long kp_turn_watcher_slack_ns(const kp_turn *t);

/* Counters for tests and metrics: times the watcher raised pending; graces that
 * kp_turn_wait_io cut short because the sending thread was asleep. */
uint64_t kp_turn_raised(const kp_turn *t);
uint64_t kp_turn_asleep_steps(const kp_turn *t);
/* When pending was last raised (kp_turn_now_us's clock; 0: never). */
int64_t kp_turn_raised_at_us(const kp_turn *t);

#endif /* KP_TURN_H */
