# Part of the kproducer._core extension (included by _core.pyx): the courier, a C
# thread that writes a lingering batch's Produce request when its linger.ms is over, between
# two Sender steps and without the GIL (csrc/kp_courier.h says why and how). The accumulator
# owns it: its mutex is the accumulator's lock. Here: Courier (the lock and the thread), the
# plan a step arms it with (_courier_arm) and what the next step takes back from it
# (_courier_take: one CourierRequest per request it wrote). kproducer.courier_handover is
# the Sender's side of the hand-over.

from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from kproducer._cdefs.courier cimport *


# How long a thread spins for the accumulator's lock before it waits without the GIL: longer
# than the courier holds it to seal and write a request (tens of microseconds).
cdef int64_t LOCK_SPIN_US = 200


cdef class Courier:
    """The accumulator's lock and the courier thread behind it (kp_courier.h)."""
    cdef kp_courier *c

    def __cinit__(self):
        cdef int err = 0
        cdef kp_status st = kp_courier_new(&self.c, &err)
        if st != KP_OK:
            raise_kp_error(st, NULL, "starting the courier thread", None, err)

    def __dealloc__(self):
        kp_courier_free(self.c)
        self.c = NULL

    cdef inline void lock(self):
        # Spin a little first, with the GIL: see kp_courier_trylock_spin.
        if not kp_courier_trylock_spin(self.c, LOCK_SPIN_US):
            with nogil:
                kp_courier_lock(self.c)

    cdef inline void unlock(self):
        kp_courier_unlock(self.c)

    @property
    def sent(self):
        """Requests the courier wrote."""
        return kp_courier_sent(self.c)

    @property
    def answered(self):
        """Responses the courier read and found good (the step's requests' and its own)."""
        return kp_courier_answered(self.c)


@cython.final
cdef class CourierRequest:
    """A Produce request the courier wrote between two steps, as the next step takes it
    (:meth:`RecordAccumulator.take_courier_sends`):

    - ``node_id``, ``correlation_id``, ``version``: where it went, with which id, in which
      Produce version;
    - ``send_us``: when it went out (``SenderTurn.now_us()``'s clock); ``whole``: it was
      written whole (no poll reports it sent);
    - ``batches``: its ProducerBatches, one per partition, out of their queues, closed and
      finished as the courier finished them;
    - ``results``: ``[(base_offset, log_append_time_ms)]`` by batch when the courier read a
      response that acknowledged every batch, else None (not answered yet, or the answer is
      left to the step's poll); ``answer_us``: when it read that response (None without
      ``results``)."""
    cdef readonly int32_t node_id
    cdef readonly int32_t correlation_id
    cdef readonly int version
    cdef readonly int64_t send_us
    cdef readonly bint whole
    cdef readonly list batches
    cdef readonly list results
    cdef readonly object answer_us

    @property
    def acknowledged(self):
        """Whether the courier read the response, and it acknowledged every batch."""
        return self.results is not None

    def __repr__(self):
        return (f"<CourierRequest node {self.node_id} correlation id {self.correlation_id} "
                f"v{self.version}: {len(self.batches or ())} batch(es)"
                f"{', acknowledged' if self.results is not None else ''}>")


cdef int _courier_arm(RecordAccumulator acc, object selector_io, dict nodes, dict leaders,
                      object muted, object only, object next_seq, int64_t producer_id,
                      int producer_epoch, int acks, int32_t timeout_ms, bytes client_id,
                      bytes transactional_id, dict pacing) except -1:
    """Builds the courier's plan (the accumulator's lock is held): ``nodes`` {node_id:
    (connection id, Produce version, first reserved correlation id, ids reserved,
    max.in.flight, [(correlation id, api key, version) of each request in flight, in order])}
    can take requests now, ``pacing`` {node_id: (pace µs, when its last Produce request in
    flight went out: µs, -1)} paces them (kp_courier.h; None, or a node not named: not paced;
    nothing is while the producer flushes or closes, when every batch is as full as it will
    get); ``leaders`` {topic:
    [leader node id by partition]}. Every partition they lead that is not ``muted`` (and is
    in ``only``, unless it is None) and whose queue holds first attempts only gets a slot,
    and its queue is offered, in order."""
    cdef kp_courier *c = acc._courier.c
    cdef kp_courier_plan plan
    cdef dict index = {}
    cdef _TopicState st
    cdef ProducerBatch b
    cdef int32_t p, part, node
    cdef Py_ssize_t i, n
    cdef bint eligible
    cdef int64_t due
    cdef const char *name
    cdef Py_ssize_t name_len
    cdef bint at_once = acc.pool.waiters > 0 or acc.closed or acc.flushes_in_progress > 0
    kp_courier_reset(c)
    cdef bint at_once_all = acc.closed or acc.flushes_in_progress > 0
    for node_id, (conn_id, version, first_cid, block, max_in_flight, prior) in nodes.items():
        node = kp_courier_add_node(c, node_id, conn_id, version, first_cid, block, max_in_flight)
        if node >= 0:
            index[node_id] = node
            for cid, api_key, prior_version in prior:
                kp_courier_add_prior(c, node, cid, api_key, prior_version)
            paced = None if pacing is None else pacing.get(node_id)
            if paced is not None and not at_once_all:
                kp_courier_pace_node(c, node, paced[0], paced[1])
    for st in acc._topics.values():
        st.ensure_slots()
        name = PyUnicode_AsUTF8AndSize(st.topic, &name_len)
        by_partition = leaders.get(st.topic)
        n_known = 0 if by_partition is None else len(<list>by_partition)
        for p in range(st.num_partitions):
            st.courier_slot[p] = -1
            if p >= n_known:
                continue        # not in this metadata yet: the steps send it
            q = st.queues[p]
            # First attempts only, never drained: a retry (and what follows it) is a step's.
            eligible = True
            for item in q:
                b = <ProducerBatch>item
                if b.attempts > 0 or b.closed or b.base_sequence >= 0:
                    eligible = False
                    break
            if not eligible:
                continue
            leader = index.get((<list>by_partition)[p])
            if leader is None or (muted and (st.topic, p) in muted):
                continue
            if only is not None and (st.topic, p) not in only:
                continue
            part = kp_courier_add_part(c, leader, <const uint8_t *>name, <size_t>name_len, p,
                                       -1 if next_seq is None else next_seq.get((st.topic, p), 0))
            if part < 0:
                continue
            st.courier_slot[p] = part
            n = len(q)
            i = 0
            for item in q:
                b = <ProducerBatch>item
                # Sendable at once: a batch behind another, a full one (batch.size reached, or
                # no longer open), or anything while memory is short or the producer flushes
                # or closes (as _wait_left); the last open one when its linger.ms is over.
                if at_once or i < n - 1 or b.reached_size or st.open_batches[p] is not b:
                    due = 0
                else:
                    due = kp_turn_wall_to_mono_us(b.created_ms + acc.linger_ms)
                kp_courier_offer(c, part, &b.w, <void *>b, due)
                i += 1
    plan.io = <const kp_selector_fns *>PyCapsule_GetPointer(selector_io[1], b"kproducer.kp_selector_fns")
    plan.selector = <kp_selector *>PyCapsule_GetPointer(selector_io[0], b"kproducer.kp_selector")
    plan.turn = NULL if acc.turn is None else acc.turn.t
    plan.producer_id = producer_id
    plan.producer_epoch = <int16_t>producer_epoch
    plan.acks = <int16_t>acks
    plan.timeout_ms = timeout_ms
    plan.client_id = NULL
    plan.client_id_len = 0
    if client_id is not None:
        plan.client_id = <const uint8_t *>PyBytes_AS_STRING(client_id)
        plan.client_id_len = <size_t>PyBytes_GET_SIZE(client_id)
    acc._courier_client_id = client_id      # the plan borrows it
    plan.transactional_id = NULL
    plan.transactional_id_len = 0
    if transactional_id is not None:
        plan.transactional_id = <const uint8_t *>PyBytes_AS_STRING(transactional_id)
        plan.transactional_id_len = <size_t>PyBytes_GET_SIZE(transactional_id)
    acc._courier_txn_id = transactional_id  # the same
    plan.max_request_size = <size_t>acc.max_request_size
    plan.codec = acc.codec
    plan.level = 0 if acc.level is None else <int>acc.level
    if kp_courier_arm(c, &plan) != KP_OK:
        kp_courier_reset(c)     # no memory for the scratch: the steps send everything
    return 0


cdef list _courier_take(RecordAccumulator acc, int64_t now):
    """What the courier did since it was armed: one CourierRequest per request, in the order
    it wrote them, each batch out of its queue, closed and finished as the courier finished
    it. Disarms the courier (the accumulator's lock is held)."""
    cdef kp_courier *c = acc._courier.c
    cdef size_t nn = 0, nr = 0, nb = 0, i
    cdef const kp_courier_node *nodes = kp_courier_nodes(c, &nn)
    cdef const kp_courier_request *requests = kp_courier_requests(c, &nr)
    cdef const kp_courier_batch *batches = kp_courier_batches(c, &nb)
    cdef const kp_courier_plan *plan = kp_courier_current_plan(c)
    cdef const kp_courier_request *r
    cdef const kp_courier_node *node
    cdef list out = []
    cdef CourierRequest req
    cdef ProducerBatch b
    cdef _TopicState st
    cdef int32_t p
    cdef int64_t now_us = kp_turn_now_us()
    if nr == 0:
        kp_courier_reset(c)
        return out
    for i in range(nr):
        r = &requests[i]
        node = &nodes[r.node]
        req = CourierRequest.__new__(CourierRequest)
        req.node_id = node.node_id
        req.correlation_id = r.correlation_id
        req.version = node.version
        req.send_us = r.send_us
        req.whole = r.whole != 0
        req.batches = []
        req.results = [] if r.answered else None
        req.answer_us = r.answer_us if r.answer_us >= 0 else None
        out.append(req)
    # Offer order is each partition's queue order: its sent batches are its queue's head.
    for i in range(nb):
        if batches[i].request < 0:
            continue
        b = <ProducerBatch>batches[i].owner
        p = b.partition
        st = acc._topics[b.topic]
        q = st.queues[p]
        if not q or q[0] is not b:
            # Nothing but a step (which takes these first) removes a batch from a queue.
            kp_courier_reset(c)
            raise RuntimeError(f"the courier's batch of {b.topic}[{p}] left its queue")
        q.popleft()
        if st.open_batches[p] is b:
            st.open_batches[p] = None
        b.closed = True
        b.w.buf.fixed = 0
        b.finished = True
        req = <CourierRequest>out[batches[i].request]
        # When its request went out, on the wall clock of created_ms: its queue time
        # (record-queue-time, int_latency) ends there, not at this take.
        b.drained_ms = now - (now_us - req.send_us) // 1000 if req.send_us <= now_us else now
        b.producer_id = plan.producer_id
        b.producer_epoch = plan.producer_epoch
        b.base_sequence = batches[i].base_sequence
        req.batches.append(b)
        if req.results is not None:
            req.results.append((batches[i].base_offset, batches[i].log_append_time_ms))
    kp_courier_reset(c)
    return out
