/* kp_turn.c - see kp_turn.h. */
#define _GNU_SOURCE
#include "kp_turn.h"
#include "kp_clock.h"
#include "kp_thread.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct kp_turn {
    int fd;                 /* watched (the selector's epoll descriptor), not owned */
    int rearm_fd;           /* eventfd: an earlier deadline, or stop */
    pid_t pid;              /* the process that started the watcher */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* pending or stop changed */
    pthread_cond_t io_cv;   /* io_wanted or stop changed (the I/O thread's only wake-up) */
    int pending;            /* written under mu, read with atomics anywhere */
    int io_wanted;          /* the watcher hands the wanted step to the I/O thread */
    uint64_t handed;        /* `raised` when the watcher last handed a step over */
    int grace_floor_ms;     /* kp_turn_wait_io's grace_ms, for the watcher */
    pid_t io_tid;           /* kernel id of the thread in kp_turn_wait_io, 0: none yet */
    int stop;
    int polling;            /* the watcher is in ppoll(2) until poll_until (-1: no limit) */
    int64_t poll_until;
    int64_t due_us;         /* the next deadline the last step named, -1: none */
    int64_t hint_us;        /* the earliest deadline named since the last step began, -1: none */
    uint64_t raised;
    uint64_t steps_ended;   /* kp_turn_done calls (kp_turn_wait_step) */
    int64_t raised_at_us;   /* when pending was last raised (CLOCK_MONOTONIC) */
    uint64_t activity;      /* bumped by application threads as they send (kp_turn_touch) */
    uint64_t seen_activity; /* the I/O thread's last look at it (kp_turn_wait_io) */
    uint64_t step_activity; /* activity at the last kp_turn_done that saw it change */
    int64_t step_at_us;     /* when that was */
    int64_t send_interval_us; /* mean time between sends (0: not known), kp_turn_grace_us */
    pid_t sender_tid;       /* kernel id of the thread that sent last (kp_turn_touch), 0: none */
    pid_t syscall_tid;      /* whose /proc/self/task/<tid>/syscall syscall_fd reads (I/O thread) */
    int syscall_fd;         /* -1: none open */
    uint64_t asleep_steps;  /* graces cut short: the sender was asleep (kp_turn_asleep_steps) */
    int sender_sleeps;      /* looks left in sliced graces since the sender was last asleep */
    int loop_fd;            /* eventfd written as pending rises while loops are attached, -1 */
    int loops;              /* event loops attached (kp_turn_attach_loop) */
    int loop_grace_ms;      /* how long the I/O thread leaves a wanted step to them */
    long slack_ns;          /* the watcher's timer slack as the kernel reports it, 0: not yet
                             * (written once by the watcher, read with atomics) */
};

int64_t kp_turn_now_ms(void)
{
    return kp_mono_ms();
}

int64_t kp_turn_now_us(void)
{
    return kp_mono_us();
}

int64_t kp_turn_wall_to_mono_us(int64_t wall_ms)
{
    struct timespec wall, mono;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t wall_us = (int64_t)wall.tv_sec * 1000000 + wall.tv_nsec / 1000;
    int64_t mono_us = (int64_t)mono.tv_sec * 1000000 + mono.tv_nsec / 1000;
    return mono_us + (wall_ms * 1000 - wall_us);
}

static int64_t earliest(int64_t a, int64_t b)
{
    return a < 0 ? b : (b < 0 || a < b ? a : b);
}

/* Both with mu held. */
static void raise_locked(kp_turn *t)
{
    __atomic_store_n(&t->pending, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&t->raised, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&t->raised_at_us, kp_turn_now_us(), __ATOMIC_RELAXED);
    pthread_cond_broadcast(&t->cv);
    if (t->loops > 0 && t->loop_fd >= 0) {
        /* Wakes the attached event loop, which runs the step on its own thread: no thread
         * queues for the GIL while the loop runs Python. EAGAIN: a wake-up is pending. */
        uint64_t one = 1;
        ssize_t w = write(t->loop_fd, &one, sizeof one);
        (void)w;
    }
}

static void rearm(kp_turn *t)
{
    uint64_t one = 1;
    ssize_t w = write(t->rearm_fd, &one, sizeof one);
    (void)w; /* EAGAIN: a re-arm is already pending */
}

static void hand_over(kp_turn *t);

static void *watch(void *arg)
{
    kp_turn *t = arg;
    long slack = kp_thread_begin(1);

    __atomic_store_n(&t->slack_ns, slack, __ATOMIC_RELAXED);
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->pending && t->handed == t->raised && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop)
            break;
        if (t->pending) {
            hand_over(t);       /* a raise not handed over yet: the watcher's, or another thread's */
            continue;
        }
        int64_t due = earliest(t->due_us, t->hint_us);
        struct timespec timeout, *timeout_p = NULL;
        if (due >= 0) {
            /* ppoll: to the microsecond (poll(2)'s whole milliseconds would add up to one
             * to every linger.ms; the accumulator's deadlines are ms boundaries of the wall
             * clock, converted to this clock by kp_turn_wall_to_mono_us). */
            int64_t left = due - kp_turn_now_us();
            if (left < 0) left = 0;
            timeout.tv_sec = (time_t)(left / 1000000);
            timeout.tv_nsec = (long)(left % 1000000) * 1000L;
            timeout_p = &timeout;
        }
        t->polling = 1;
        t->poll_until = due;
        pthread_mutex_unlock(&t->mu);

        struct pollfd p[2] = {{t->fd, POLLIN, 0}, {t->rearm_fd, POLLIN, 0}};
        int n = ppoll(p, 2, timeout_p, NULL);
        int err = n < 0 ? errno : 0;
        if (n > 0 && (p[1].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(t->rearm_fd, &v, sizeof v);
            (void)r;
        }

        pthread_mutex_lock(&t->mu);
        t->polling = 0;
        if (t->stop)
            break;
        if (n < 0 && err == EINTR)
            continue;
        int ready = n > 0 && p[0].revents != 0;
        int64_t due_at = earliest(t->due_us, t->hint_us);
        int due_now = due_at >= 0 && kp_turn_now_us() >= due_at;
        /* poll failing otherwise (it cannot, on a valid descriptor) hands the step to the
         * Sender rather than spin here. */
        if (ready || due_now || n < 0)
            raise_locked(t);    /* handed over at the top of the loop */
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

kp_status kp_turn_new(kp_turn **out, int fd, int *sys_errno)
{
    pthread_condattr_t ca;
    *out = NULL;
    if (sys_errno) *sys_errno = 0;
    kp_turn *t = calloc(1, sizeof *t);
    if (!t)
        return KP_ERR_NOMEM;
    t->fd = fd;
    t->pid = getpid();
    t->due_us = -1;
    t->hint_us = -1;
    t->poll_until = -1;
    t->loop_fd = -1;
    t->syscall_fd = -1;
    t->grace_floor_ms = 1;
    t->rearm_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->rearm_fd < 0) {
        if (sys_errno) *sys_errno = errno;
        free(t);
        return KP_ERR_SYS;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_cond_init(&t->io_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&t->thread, NULL, watch, t);
    if (rc != 0) {
        if (sys_errno) *sys_errno = rc;
        pthread_cond_destroy(&t->cv);
        pthread_cond_destroy(&t->io_cv);
        pthread_mutex_destroy(&t->mu);
        close(t->rearm_fd);
        free(t);
        return KP_ERR_SYS;
    }
    *out = t;
    return KP_OK;
}

void kp_turn_free(kp_turn *t)
{
    if (!t)
        return;
    if (getpid() != t->pid)
        return; /* a forked child: the watcher is the parent's; leave everything to it */
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_cond_broadcast(&t->io_cv);
    pthread_mutex_unlock(&t->mu);
    rearm(t);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->io_cv);
    pthread_mutex_destroy(&t->mu);
    close(t->rearm_fd);
    if (t->loop_fd >= 0)
        close(t->loop_fd);
    if (t->syscall_fd >= 0)
        close(t->syscall_fd);
    free(t);
}

kp_status kp_turn_loop_fd(kp_turn *t, int *fd_out, int *sys_errno)
{
    kp_status st = KP_OK;
    *fd_out = -1;
    if (sys_errno) *sys_errno = 0;
    pthread_mutex_lock(&t->mu);
    if (t->loop_fd < 0) {
        t->loop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (t->loop_fd < 0) {
            if (sys_errno) *sys_errno = errno;
            st = KP_ERR_SYS;
        }
    }
    *fd_out = t->loop_fd;
    pthread_mutex_unlock(&t->mu);
    return st;
}

void kp_turn_attach_loop(kp_turn *t, int delta, int grace_ms)
{
    pthread_mutex_lock(&t->mu);
    t->loops += delta;
    if (t->loops < 0)
        t->loops = 0;
    if (grace_ms >= 0)
        t->loop_grace_ms = grace_ms;
    if (delta > 0 && t->pending && t->loop_fd >= 0) {
        uint64_t one = 1;   /* a step already wanted: the loop runs it too */
        ssize_t w = write(t->loop_fd, &one, sizeof one);
        (void)w;
    }
    /* The I/O thread may be in its grace for application threads: it re-reads the rule. */
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

int kp_turn_pending(const kp_turn *t)
{
    return __atomic_load_n(&t->pending, __ATOMIC_ACQUIRE);
}

void kp_turn_raise(kp_turn *t)
{
    pthread_mutex_lock(&t->mu);
    raise_locked(t);
    if (t->polling)
        rearm(t);       /* the watcher hands this step over (hand_over) */
    pthread_mutex_unlock(&t->mu);
}

void kp_turn_begin(kp_turn *t)
{
    pthread_mutex_lock(&t->mu);
    t->hint_us = -1;
    pthread_mutex_unlock(&t->mu);
}

/* With mu held, at the end of a step: the application's mean interval between sends since the
 * last step that saw one (a moving average over steps). One clock read per step, none per
 * send: kp_turn_touch stays a store. */
static void note_sends(kp_turn *t)
{
    uint64_t a = __atomic_load_n(&t->activity, __ATOMIC_RELAXED);
    if (a == t->step_activity)
        return;
    int64_t now = kp_turn_now_us();
    if (t->step_at_us > 0) {
        int64_t sample = (now - t->step_at_us) / (int64_t)(a - t->step_activity);
        int64_t old = t->send_interval_us;
        __atomic_store_n(&t->send_interval_us, old > 0 ? (3 * old + sample) / 4 : sample,
                         __ATOMIC_RELAXED);
    }
    t->step_activity = a;
    t->step_at_us = now;
}

int64_t kp_turn_grace_us(const kp_turn *t, int floor_ms)
{
    int64_t floor_us = (int64_t)floor_ms * 1000;
    int64_t interval = __atomic_load_n(&t->send_interval_us, __ATOMIC_RELAXED);
    int64_t g = 2 * interval;
    return interval > 0 && g > floor_us && g <= KP_TURN_GRACE_MAX_US ? g : floor_us;
}

void kp_turn_done(kp_turn *t, int64_t due_us)
{
    pthread_mutex_lock(&t->mu);
    note_sends(t);
    t->due_us = due_us;
    t->io_wanted = 0;
    __atomic_store_n(&t->steps_ended, t->steps_ended + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&t->pending, 0, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&t->cv);
    /* A step nobody asked for (a closing Sender's) finds the watcher in poll(2) towards a
     * later deadline, or none: it must look at this one. */
    if (t->polling && due_us >= 0 && (t->poll_until < 0 || due_us < t->poll_until))
        rearm(t);
    pthread_mutex_unlock(&t->mu);
}

void kp_turn_due_by(kp_turn *t, int64_t due_us)
{
    pthread_mutex_lock(&t->mu);
    if (due_us >= 0 && (t->hint_us < 0 || due_us < t->hint_us)) {
        t->hint_us = due_us;
        if (t->polling && (t->poll_until < 0 || due_us < t->poll_until))
            rearm(t);
    }
    pthread_mutex_unlock(&t->mu);
}

static void deadline_in(struct timespec *until, int64_t timeout_us)
{
    clock_gettime(CLOCK_MONOTONIC, until);
    until->tv_sec += (time_t)(timeout_us / 1000000);
    until->tv_nsec += (long)(timeout_us % 1000000) * 1000L;
    if (until->tv_nsec >= 1000000000L) {
        until->tv_sec++;
        until->tv_nsec -= 1000000000L;
    }
}

static int64_t ms_to_us(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000;
}

/* With mu held: waits up to timeout_us (-1: no limit) until pending is `want`, the turn
 * stops, or (seen not NULL) a step ends after steps_ended read *seen. */
static void wait_for(kp_turn *t, int want, const uint64_t *seen, int64_t timeout_us)
{
    struct timespec until;
    if (timeout_us >= 0)
        deadline_in(&until, timeout_us);
    while (t->pending != want && !(seen && t->steps_ended != *seen) && !t->stop) {
        if (timeout_us < 0)
            pthread_cond_wait(&t->cv, &t->mu);
        else if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
            break;
    }
}

int kp_turn_wait(kp_turn *t, int timeout_ms)
{
    int r;
    pthread_mutex_lock(&t->mu);
    wait_for(t, 1, NULL, ms_to_us(timeout_ms));
    r = t->pending;
    pthread_mutex_unlock(&t->mu);
    return r;
}

uint64_t kp_turn_steps_ended(const kp_turn *t)
{
    return __atomic_load_n(&t->steps_ended, __ATOMIC_ACQUIRE);
}

int kp_turn_wait_step(kp_turn *t, uint64_t seen, int timeout_ms)
{
    int r;
    pthread_mutex_lock(&t->mu);
    wait_for(t, 1, &seen, ms_to_us(timeout_ms));
    r = t->pending;
    pthread_mutex_unlock(&t->mu);
    return r;
}

int kp_turn_wait_clear(kp_turn *t, int timeout_ms)
{
    int r;
    pthread_mutex_lock(&t->mu);
    wait_for(t, 0, NULL, ms_to_us(timeout_ms));
    r = !t->pending;
    pthread_mutex_unlock(&t->mu);
    return r;
}

/* The calling thread's kernel id, one gettid(2) per thread (glibc 2.17 has no gettid()). */
static pid_t own_tid(void)
{
    static __thread pid_t tid;
    if (tid == 0)
        tid = (pid_t)syscall(SYS_gettid);
    return tid;
}

void kp_turn_touch(kp_turn *t)
{
    __atomic_store_n(&t->activity, __atomic_load_n(&t->activity, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&t->sender_tid, own_tid(), __ATOMIC_RELAXED);
}

/* What thread `tid` of this process is blocked in, from /proc/self/task/<tid>/syscall
 * (proc(5): the number of the system call it is blocked in, then its arguments; "running"
 * when it is not blocked; -1 when it is blocked outside a system call). With mu held (the
 * I/O thread): the descriptor stays open for the same thread and is re-read with pread.
 * Returns the system call's number, -1 when it is not blocked in one or this cannot be read,
 * -2 when the thread is gone. */
static long blocked_in(kp_turn *t, pid_t tid)
{
    char buf[64];
    if (t->syscall_fd >= 0 && t->syscall_tid != tid) {
        close(t->syscall_fd);
        t->syscall_fd = -1;
    }
    if (t->syscall_fd < 0) {
        char path[64];
        int n = snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
        if (n <= 0 || (size_t)n >= sizeof path)
            return -1;
        t->syscall_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (t->syscall_fd < 0)
            return errno == ENOENT || errno == ESRCH ? -2 : -1;
        t->syscall_tid = tid;
    }
    ssize_t len = pread(t->syscall_fd, buf, sizeof buf - 1, 0);
    if (len <= 0) {
        int gone = len < 0 && errno == ESRCH;
        close(t->syscall_fd);
        t->syscall_fd = -1;
        return gone ? -2 : -1;
    }
    buf[len] = '\0';
    if (buf[0] < '0' || buf[0] > '9')
        return -1;                       /* "running", or "-1 ..." */
    char *end = NULL;
    long nr = strtol(buf, &end, 10);
    return end != buf && (*end == ' ' || *end == '\n' || *end == '\0') ? nr : -1;
}

/* 1 when the thread that sent last is blocked in a system call other than futex(2) (asleep
 * in time.sleep, waiting on a socket or a file) or gone: a thread there holds no GIL and runs
 * no step until it returns, so the grace below would only delay the step (an application
 * that sleeps between sends had each response wait for its next send). A futex wait may be
 * a wait for the GIL itself, by a busy sender the I/O thread just stepped beside: stepping
 * again at once would take the GIL from it again, so it keeps its grace, as do a running
 * sender and one whose state cannot be read. */
static int sender_asleep(kp_turn *t)
{
    pid_t tid = __atomic_load_n(&t->sender_tid, __ATOMIC_RELAXED);
    if (tid == 0 || tid == t->io_tid)
        return 0;
    long nr = blocked_in(t, tid);
    if (nr == -2)
        return 1;
#ifdef SYS_futex_waitv
    if (nr == SYS_futex_waitv)
        return 0;
#endif
    return nr >= 0 && nr != SYS_futex;
}

/* With mu held, on the watcher, just after pending rose: decides when the I/O thread steps.
 * An application thread that sent since the last look runs Python now and will run the step
 * at its next send: the step is left to it rather than have the I/O thread queue for the GIL
 * (which that thread would then wait a switch interval to get back; and a thread queued for
 * the GIL beside a busy one delays steps and responses by milliseconds). How long:
 * kp_turn_grace_us, about the time to its next send. The watcher keeps that time, not the I/O
 * thread: a step run by the application within it then wakes no thread but the watcher,
 * where the I/O thread woke twice per step (at the raise, at the step's end) for nothing. */
static void hand_over(kp_turn *t)
{
    t->handed = t->raised;
    if (!t->pending || t->stop)
        return;
    /* The grace below is this raise's. A step that ends within it answers this raise, and a
     * raise after that step (a response, a wake-up) is a new one, which may come before this
     * thread looks again: waiting for pending alone would carry the old grace over to it and
     * hand it over early, judged by an activity count read before it was raised. So the
     * grace ends with the step; the watcher loop then decides the new raise afresh. */
    uint64_t steps = t->steps_ended;
    uint64_t a = __atomic_load_n(&t->activity, __ATOMIC_RELAXED);
    if (t->loops > 0) {
        /* An attached event loop was woken (raise_locked) and runs the step on its own
         * thread; the I/O thread steps only if the loop is held up past its grace. */
        t->seen_activity = a;
        wait_for(t, 0, &steps, ms_to_us(t->loop_grace_ms));
    } else if (a != t->seen_activity) {
        t->seen_activity = a;
        /* A sender asleep in the kernel (time.sleep, a socket) will not step before
         * it wakes, and leaves the GIL free for the I/O thread now. It is looked at when the
         * grace begins and, for a sender seen asleep lately (one that sleeps between sends),
         * every KP_TURN_SENDER_LOOK_US of it: the wake-ups of a sliced grace beside a busy
         * sender make it step later, the I/O thread stepping instead. */
        int64_t end = kp_turn_now_us() + kp_turn_grace_us(t, t->grace_floor_ms), left;
        while (t->pending && t->steps_ended == steps && !t->stop
               && (left = end - kp_turn_now_us()) > 0) {
            if (sender_asleep(t)) {
                t->sender_sleeps = KP_TURN_SENDER_SLEEPS;
                __atomic_add_fetch(&t->asleep_steps, 1, __ATOMIC_RELAXED);
                break;
            }
            if (t->sender_sleeps > 0) {
                t->sender_sleeps--;
                if (left > KP_TURN_SENDER_LOOK_US)
                    left = KP_TURN_SENDER_LOOK_US;
            }
            wait_for(t, 0, &steps, left);
        }
    }
    if (t->pending && t->steps_ended == steps && !t->stop) {
        t->io_wanted = 1;       /* nobody stepped within the grace: the I/O thread does */
        pthread_cond_signal(&t->io_cv);
    }
}

int kp_turn_wait_io(kp_turn *t, int grace_ms)
{
    int r = 0;
    pthread_mutex_lock(&t->mu);
    t->grace_floor_ms = grace_ms;
    t->io_tid = own_tid();
    while (!t->stop) {
        if (t->io_wanted) {
            t->io_wanted = 0;
            if (t->pending) {
                r = 1;
                break;
            }
        }
        pthread_cond_wait(&t->io_cv, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return r;
}

int64_t kp_turn_raised_at_us(const kp_turn *t)
{
    return __atomic_load_n(&t->raised_at_us, __ATOMIC_RELAXED);
}

int64_t kp_turn_send_interval_us(const kp_turn *t)
{
    return __atomic_load_n(&t->send_interval_us, __ATOMIC_RELAXED);
}

uint64_t kp_turn_asleep_steps(const kp_turn *t)
{
    return __atomic_load_n(&t->asleep_steps, __ATOMIC_RELAXED);
}

long kp_turn_watcher_slack_ns(const kp_turn *t)
{
    return __atomic_load_n(&t->slack_ns, __ATOMIC_RELAXED);
}

uint64_t kp_turn_activity(const kp_turn *t)
{
    return __atomic_load_n(&t->activity, __ATOMIC_RELAXED);
}

uint64_t kp_turn_raised(const kp_turn *t)
{
    return __atomic_load_n(&t->raised, __ATOMIC_RELAXED);
}
