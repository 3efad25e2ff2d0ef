# Part of the kproducer._core extension (included by _core.pyx): SendPath, the
# send() and poll() fast paths, and fork detection.

# Bumped in a forked child: producers compare it instead of calling os.getpid() (a system
# call) on every send().
cdef long _fork_generation = 0


def _after_fork_in_child():
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_generation():
    return _fork_generation


cdef class SendPath:
    """``Producer.send`` without Python frames (each producer binds ``send`` to this
    ``send``): straight into the accumulator, whose ``append`` checks the record, when
    nothing needs Python (no serializer, no custom partitioner, same process) and the
    accumulator has the topic's metadata and the memory. Otherwise
    ``slow(topic, ..., why)`` (``Producer._send_slow``) does the rest and every wait:
    ``why`` is None when nothing was tried, else what ``append`` answered
    (NEED_METADATA, NEED_MEMORY, or the RecordTooLargeError the slow path fails the
    record's future with)."""
    cdef RecordAccumulator acc
    cdef object slow
    cdef long generation
    # Settable: a transactional producer routes send() through Python (which raises the
    # transaction's state error) whenever no transaction is open.
    cdef public bint needs_python
    # The turn's watcher and StepTurn.step_from_app (kproducer.turn): when a step is wanted
    # (a response came, a deadline is due) the sending thread, which holds the GIL already,
    # runs ``step()`` itself rather than leave the I/O thread waiting for the GIL.
    cdef SenderTurn turn
    cdef object step
    # Producer._poll: poll() beyond its fast path (a step to run, a wait, a bad timeout).
    cdef public object slow_poll
    # Settable: an event loop runs the wanted steps (kproducer.aio._LoopTurn, woken by the
    # watcher): try_send leaves them to it, one per turn of the loop, rather than run one
    # in the middle of the turn's sends.
    cdef public bint loop_steps

    def __cinit__(self, RecordAccumulator acc, slow, bint needs_python, SenderTurn turn=None,
                  step=None):
        self.acc = acc
        self.slow = slow
        self.needs_python = needs_python
        self.generation = _fork_generation
        self.turn = turn
        self.step = step

    def send(self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        """Queues one record and returns its future; see Producer.send."""
        cdef object fut
        if self.needs_python or self.generation != _fork_generation or type(topic) is not str:
            return self.slow(topic, value, key, partition, timestamp_ms, headers, on_delivery, None)
        fut = self.acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
        if type(fut) is not RecordFuture:
            # NEED_METADATA, NEED_MEMORY, or the error of a record that cannot be sent (its
            # failed future): one comparison on the path of a queued record.
            return self.slow(topic, value, key, partition, timestamp_ms, headers, on_delivery, fut)
        if self.turn is not None:
            self.turn.touch()
            if self.turn.wanted():
                self.step()
        return fut

    def poll(self, timeout=0):
        """Producer.poll without a Python frame when no step is wanted (an application's
        compute loop calls it often); see Producer.poll."""
        if ((type(timeout) is int or type(timeout) is float) and timeout == 0
                and self.turn is not None and not self.acc.closed
                and self.generation == _fork_generation):
            self.turn.touch()
            if not self.turn.wanted():
                # Nothing to run; and nothing is settled while this thread holds the GIL.
                return 0
        return self.slow_poll(timeout)

    def try_send(self, topic, value=None, key=None, partition=None, timestamp_ms=None,
                 headers=None, on_delivery=None):
        """send() that never waits (the asyncio front's fast path): the record's future; or,
        with nothing queued, what it lacks: NEED_METADATA (the topic's partition count) or
        NEED_MEMORY (room in the pool; ``acc.last_need`` bytes), or None when it needs
        Python (serializers, a custom partitioner, a transaction's checks, a fork), or the
        RecordTooLargeError of a record that cannot be sent (the caller fails its future)."""
        return self.try_queue(topic, value, key, partition, timestamp_ms, headers, on_delivery)

    cdef object try_queue(self, topic, value, key, partition, timestamp_ms, headers,
                          on_delivery):
        cdef object fut
        if self.needs_python or self.generation != _fork_generation or type(topic) is not str:
            return None
        fut = self.acc.append(topic, partition, key, value, timestamp_ms, headers, on_delivery)
        if self.turn is not None:
            self.turn.touch()
            if not self.loop_steps and self.turn.wanted():
                self.step()     # the loop's thread settles what is due (its own futures too)
        return fut
