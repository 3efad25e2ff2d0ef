/* kp_thread.h - how the C core's own threads (the turn's watcher, the courier) set themselves
 * up as they start: one definition for both, which wake for microseconds at a time beside the
 * interpreter's threads. */
#ifndef KP_THREAD_H
#define KP_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr (sched_setattr(2)), its first version: glibc before 2.41
 * declares neither it nor a wrapper. */
typedef struct kp_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
} kp_sched_attr;

/* The slice the turn's watcher asks the scheduler for (sched_runtime of a SCHED_OTHER thread;
 * the kernel's least, since Linux 6.12's EEVDF takes it): a thread that wakes with a shorter
 * slice than the running one's may preempt it at once, where one with the default slice
 * (0.7-3 ms, by CPU count) waits until the running thread's slice ends. An application that
 * keeps its CPU busy in Python is that running thread, and the watcher that raises a step for
 * a response would otherwise wait out its slice, on the acknowledgements' tail.
 * The courier keeps the default: it wakes for every write and every response while the
 * application sends at full speed, and preempting the application each time would cost it
 * throughput; the watcher's slice alone gives most of the latency gain. */
#define KP_THREAD_SLICE_NS 100000ULL

/* Blocks signals, sets a timer slack of 1 ns and, with short_slice, asks for
 * KP_THREAD_SLICE_NS; returns the timer slack the thread got, in ns. Each step is best
 * effort: a kernel before 6.12 keeps its own slice (it ignores sched_runtime for SCHED_OTHER),
 * a thread the application runs under another policy (real time, SCHED_IDLE) is left to it,
 * and a refusal (a seccomp filter) leaves the defaults. */
static inline long kp_thread_begin(int short_slice)
{
    sigset_t all;
    /* Signals belong to the interpreter's threads: never interrupt this one for them. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    /* Deadlines to the microsecond: with the kernel's default timer slack (50 µs for a thread
     * of normal priority, prctl(2)) ppoll(2) wakes these threads that much after a batch's
     * linger.ms. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    kp_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    if (short_slice && syscall(SYS_sched_getattr, 0, &attr, (unsigned)sizeof attr, 0U) == 0
            && (attr.sched_policy == SCHED_OTHER || attr.sched_policy == SCHED_BATCH)) {
        attr.size = (uint32_t)sizeof attr;
        attr.sched_flags &= 0x01;       /* SCHED_FLAG_RESET_ON_FORK: the others need fields
                                           past this version of the struct */
        attr.sched_runtime = KP_THREAD_SLICE_NS;
        (void)syscall(SYS_sched_setattr, 0, &attr, 0U);
    }
    return (long)prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
}

#endif
