"""The Sender without a broker (Java's SenderTest with MockClient and MockTime).

A MockClient stands in for the NetworkClient: it records every request the Sender sends
and completes them only when a test says so (``answer_produce``), except Metadata and
InitProducerId, which it answers at the next poll from the cluster it was given and a
producer id counter. The clocks are a MockTime and the tests run the Sender's steps
(``StepTurn.step``, around ``Sender.run_once``) themselves: the I/O thread is never started,
so every wait, backoff
and timeout below is in the mock clock's milliseconds and nothing sleeps. The records and
batches are the real RecordAccumulator's.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

from kproducer._core import RecordAccumulator
from kproducer.clock import SYSTEM_TIME, MockTime
from kproducer.config import ProducerConfig
from kproducer.errors import KafkaTimeoutError, NetworkError
from kproducer.metadata import Cluster, Metadata, Node, PartitionInfo, TopicInfo
from kproducer.protocol import InitProducerIdResponse
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode
from kproducer.sender import Sender
from kproducer.turn import StepTurn

pytestmark = pytest.mark.unit

TOPIC = "t"
RETRY_BACKOFF_MS = 100     # retry.backoff.ms = retry.backoff.max.ms: no growth, no jitter


@dataclass
class Request:
    node: int
    api_key: int
    request: Any
    callback: Callable
    expect_response: bool
    correlation_id: int
    wire: Optional[bytes]        # the encoder's output (Produce): the request as framed bytes
    record_counts: Optional[list] = None   # per batch when sent (a completed batch counts 0)

    @property
    def batches(self) -> list:
        """A Produce request's batches, in request order."""
        return [b for _, parts in self.request for _, b in parts]


class _PipeSelector:
    """What the Sender reads of the client's selector: a descriptor for its watcher thread
    (the read end of a pipe nobody writes) and needs_poll()."""

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def needs_poll(self) -> bool:
        return False


class MockClient:
    """The NetworkClient methods the Sender uses. ``down``: nodes that are not ready (their
    ``connection_delay`` in ``delay_ms``); at most ``max_in_flight`` requests per node."""

    def __init__(self, time, cluster: Cluster, *, max_in_flight: int = 5):
        self.time = time
        self.cluster = cluster
        self.nodes: dict = {n.node_id: (n.host, n.port) for n in cluster.nodes()}
        self.max_in_flight = max_in_flight
        self.down: set = set()
        self.delay_ms: dict = {}
        self.in_flight: list = []       # Request, in send order
        self.sent: list = []            # every Request ever sent
        self._answers: collections.deque = collections.deque()   # (api_key, answer(req))
        self.auth_failures: list = []
        self.pids = itertools.count(1000)
        self.log_end: dict = collections.defaultdict(int)      # (topic, partition) -> next offset
        self._cid = 0
        self._rfd, self._wfd = os.pipe()
        self.selector = _PipeSelector(self._rfd)
        self.wakeups = 0
        self.node_lost_listeners: list = []     # called by lose_node()
        self.hold_metadata = False              # Metadata requests stay unanswered while set
        self.throttles: list = []               # (node, throttle ms) of Produce answers

    # -- what tests script and read --
    def produce_requests(self) -> list:
        return [r for r in self.sent if r.api_key == v.PRODUCE]

    def answer_produce(self, errors: Optional[dict] = None) -> None:
        """Answers the oldest Produce request in flight at the next poll: an error code per
        ``(topic, partition)`` (default 0: appended at that partition's log end)."""
        def answer(req):
            parts = []
            for topic, pbs in req.request:
                for partition, b in pbs:
                    code = (errors or {}).get((topic, partition), 0)
                    offset = -1
                    if code == 0:
                        offset = self.log_end[(topic, partition)]
                        self.log_end[(topic, partition)] += b.record_count
                    parts.append((topic, partition, code, offset, -1, None))
            return (req.correlation_id, parts), None
        self._answers.append((v.PRODUCE, answer))

    def fail_next(self, api_key: int, error: Exception) -> None:
        """The oldest request of ``api_key`` in flight fails with ``error`` (a lost
        connection, a request timeout) at the next poll."""
        self._answers.append((api_key, lambda req: (None, error)))

    def _auto_answer(self, req):
        if req.api_key == v.METADATA:
            if self.hold_metadata:
                return None                 # in flight until released
            return self.cluster, None       # Metadata.update takes a Cluster as well
        if req.api_key == v.INIT_PRODUCER_ID:
            return InitProducerIdResponse(error_code=0, producer_id=next(self.pids), producer_epoch=0), None
        return None

    # -- NetworkClient API --
    def ready(self, node: int, now: int) -> bool:
        return node in self.nodes and node not in self.down and self.in_flight_count(node) < self.max_in_flight

    def connection_delay(self, node: int, now: int) -> int:
        return self.delay_ms.get(node, 0) if node in self.down else 0

    def least_loaded_node(self, now: int):
        ready = [n for n in self.nodes if self.ready(n, now)]
        return min(ready, key=self.in_flight_count, default=None)

    def state(self, node: int) -> str:
        if node not in self.nodes:
            return "UNKNOWN"
        return "DISCONNECTED" if node in self.down else "READY"

    def in_flight_count(self, node: Optional[int] = None) -> int:
        return sum(1 for r in self.in_flight if node is None or r.node == node)

    def windows_full(self, leaders=None, *, paced_at_us=None) -> bool:
        up = [n for n in self.nodes if n not in self.down and (leaders is None or n in leaders)]
        return bool(up) and all(self.in_flight_count(n) >= self.max_in_flight for n in up)

    def paced_until_us(self, node: int, now_us: int) -> int:
        return 0        # no round trip measured: nothing paced (tests/test_pacing.py paces)

    def api_version(self, node: int, api_key: int) -> int:
        return v.SUPPORTED_VERSIONS[api_key][1]

    def set_node(self, node: int, host: str, port: int) -> None:
        self.nodes[node] = (host, port)

    def remove_node(self, node: int) -> None:
        self.nodes.pop(node, None)

    def produce_answered(self, node: int, throttle_ms: int, trailing: int) -> None:
        self.throttles.append((node, throttle_ms))

    def take_auth_failures(self) -> list:
        out, self.auth_failures = self.auth_failures, []
        return out

    def send(self, node, api_key, request, callback, now, *, expect_response=True, encoder=None,
             decoder=None) -> None:
        if not self.ready(node, now):
            raise NetworkError(f"node {node} is not ready")
        self._cid += 1
        wire = encoder(self.api_version(node, api_key), self._cid, "test") if encoder else None
        req = Request(node, api_key, request, callback, expect_response, self._cid, wire)
        if api_key == v.PRODUCE:
            req.record_counts = [b.record_count for b in req.batches]
        self.in_flight.append(req)
        self.sent.append(req)

    def poll(self, timeout_ms: int, now: int) -> int:
        done = []
        for req in self.in_flight:
            if not req.expect_response:           # acks=0: complete once written
                done.append((req, None, None))
                continue
            auto = self._auto_answer(req)
            if auto is not None:
                done.append((req,) + auto)
        waiting = collections.deque()
        while self._answers:
            api_key, answer = self._answers.popleft()
            req = next((r for r in self.in_flight if r.api_key == api_key
                        and all(r is not d[0] for d in done)), None)
            if req is None:
                waiting.append((api_key, answer))
            else:
                done.append((req,) + answer(req))
        self._answers = waiting
        for req, resp, err in done:
            self.in_flight.remove(req)
            req.callback(resp, err)
        return len(done)

    def poll_timeout(self, now: int) -> int:
        return 1 << 30

    def wakeup(self) -> None:
        self.wakeups += 1

    def release_courier_ids(self, used) -> None:
        pass        # no courier here: nothing was reserved for it

    def close(self) -> None:
        pass

    def close_fds(self) -> None:
        os.close(self._rfd)
        os.close(self._wfd)


class Env:
    """A Sender over a real accumulator and Metadata, a MockClient and a MockTime; one
    broker (node 0) leads both partitions of topic ``t``."""

    def __init__(self, **settings):
        self.clock = MockTime()
        self.cfg = ProducerConfig(bootstrap_servers="broker0:9092", linger_ms=0,
                                  retry_backoff_ms=RETRY_BACKOFF_MS, retry_backoff_max_ms=RETRY_BACKOFF_MS,
                                  **settings)
        cfg = self.cfg
        self.cluster = Cluster([Node(0, "broker0", 9092)],
                               [TopicInfo(TOPIC, 0, {p: PartitionInfo(p, 0) for p in (0, 1)})])
        self.client = MockClient(self.clock, self.cluster,
                                 max_in_flight=cfg.max_in_flight_requests_per_connection)
        # Built as Producer builds them: the turn first, given to the accumulator.
        self.turn = StepTurn(self.client.selector.fileno())
        self.acc = RecordAccumulator(
            batch_size=cfg.batch_size, batch_max_size=max(cfg.batch_max_size, cfg.batch_size),
            linger_ms=cfg.linger_ms, compression=cfg.compression_type, buffer_memory=cfg.buffer_memory,
            retry_backoff_ms=cfg.retry_backoff_ms, retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            max_request_size=cfg.max_request_size, turn=self.turn.watcher,
            step=self.turn.step_from_app, run_steps_until=self.turn.run_steps_until)
        self.metadata = Metadata(metadata_max_age_ms=cfg.metadata_max_age_ms,
                                 retry_backoff_ms=cfg.retry_backoff_ms,
                                 retry_backoff_max_ms=cfg.retry_backoff_max_ms)
        wall = self.clock.wall_ms()
        self.metadata.add(TOPIC, wall)
        self.metadata.update(self.cluster, wall)
        self.acc.set_partition_count(TOPIC, 2)
        self.sender = Sender(cfg, self.acc, self.metadata, self.client, self.turn, time=self.clock)
        if self.sender.idempotent:
            self.step()                    # InitProducerId, answered in the same step's poll
            assert self.sender.producer_id == 1000

    def append(self, partition: int = 0, value: bytes = b"v", key=None):
        fut = self.acc.append(TOPIC, partition, key, value, None, None, None)
        # The accumulator stamps batches (created_ms) with the real wall clock: the mock one
        # catches up, so no batch is from its future (a jump of the test's real run time).
        self.clock.wall = max(self.clock.wall, SYSTEM_TIME.wall_ms())
        return fut

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.turn.step()

    def step_until(self, cond, steps: int = 5) -> None:
        for _ in range(steps):
            if cond():
                return
            self.step()
        assert cond()

    def close(self) -> None:
        self.turn.close()             # stops the watcher thread before its descriptor closes
        self.client.close_fds()


@pytest.fixture
def make_env():
    envs = []

    def make(**settings) -> Env:
        env = Env(**settings)
        envs.append(env)
        return env
    yield make
    for env in envs:
        env.close()


def test_the_real_clock_is_the_default(make_env):
    env = make_env()
    assert env.sender.time is env.clock
    s = Sender(env.cfg, env.acc, env.metadata, env.client, StepTurn(env.client.selector.fileno()))
    try:
        assert s.time is SYSTEM_TIME and s.coordinator.time is SYSTEM_TIME
    finally:
        s.turn.close()


def test_a_record_is_sent_and_acknowledged(make_env):
    env = make_env()
    fut = env.append(1, b"hello")
    env.step()
    [req] = env.client.produce_requests()
    [b] = req.batches
    assert (b.topic, b.partition, b.record_count) == (TOPIC, 1, 1)
    assert (b.producer_id, b.base_sequence) == (1000, 0)
    assert req.wire and req.expect_response   # encoded by the Sender's encoder
    assert not fut.done()
    env.client.answer_produce()
    env.step()
    md = fut.result(0)
    assert (md.topic, md.partition, md.offset) == (TOPIC, 1, 0)
    assert env.sender.stats["records_acked"] == 1 and not env.sender.in_flight


def test_a_retriable_error_is_retried_after_the_backoff(make_env):
    env = make_env()
    fut = env.append(0)
    env.step()
    [first] = env.client.produce_requests()
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.step()
    assert not fut.done() and env.sender.stats["retries"] == 1
    assert env.metadata.update_requested()            # NOT_LEADER_OR_FOLLOWER: refresh
    env.clock.sleep(RETRY_BACKOFF_MS - 1)
    env.step(3)
    assert len(env.client.produce_requests()) == 1    # still backing off
    env.clock.sleep(1)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    second = env.client.produce_requests()[1]
    assert second.batches == first.batches            # the same batch, same sequence
    assert second.batches[0].base_sequence == 0 and second.batches[0].attempts == 1
    assert not env.metadata.update_requested()        # refreshed meanwhile
    env.client.answer_produce()
    env.step()
    assert fut.result(0).offset == 0


def test_a_lost_connection_retries_the_request(make_env):
    env = make_env()
    fut = env.append(0)
    env.step()
    env.client.fail_next(v.PRODUCE, NetworkError("connection to node 0 (broker0:9092) lost: reset"))
    env.step()
    assert not fut.done() and env.sender.stats["retries"] == 1
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    env.client.answer_produce()
    env.step()
    assert fut.result(0).offset == 0


def test_message_too_large_splits_the_batch(make_env):
    env = make_env()
    futs = [env.append(0, b"v%d" % i) for i in range(4)]
    env.step()
    [req] = env.client.produce_requests()
    assert req.record_counts == [4]
    env.client.answer_produce({(TOPIC, 0): ErrorCode.MESSAGE_TOO_LARGE})
    env.step()
    assert not any(f.done() for f in futs)
    # Two batches of two take its place (after retry.backoff.ms), sent in order, one batch per
    # partition per request.
    for _ in range(6):
        env.clock.sleep(RETRY_BACKOFF_MS)
        env.step()
        if env.client.in_flight_count(0):
            env.client.answer_produce()
        if all(f.done() for f in futs):
            break
    sizes = [n for r in env.client.produce_requests()[1:] for n in r.record_counts]
    assert sizes == [2, 2]
    assert [f.result(0).offset for f in futs] == [0, 1, 2, 3]
    assert env.sender.stats["records_acked"] == 4 and env.sender.stats["records_failed"] == 0


@pytest.mark.parametrize("code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID])
def test_sequence_errors_get_a_new_producer_id_and_renumber(make_env, code):
    env = make_env()
    f1 = env.append(0, b"a")
    env.step()
    env.client.answer_produce()
    env.step()
    assert f1.result(0).offset == 0
    f2 = env.append(0, b"b")
    f3 = env.append(1, b"c")
    env.step()
    [req] = env.client.produce_requests()[1:]
    b2, b3 = sorted(req.batches, key=lambda b: b.partition)
    assert (b2.producer_id, b2.base_sequence, b3.base_sequence) == (1000, 1, 0)
    env.client.answer_produce({(TOPIC, 0): code})     # partition 1 is acknowledged
    # The step reads the answer first, so the same step asks for a new producer id (answered
    # at once, in its last poll); nothing is sent under the old one meanwhile.
    env.step()
    assert not env.sender._need_pid
    assert env.sender.producer_id == 1001 and env.sender.stats["producer_id_resets"] == 1
    assert len(env.client.produce_requests()) == 2
    assert f3.result(0).offset == 0 and not f2.done()
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step_until(lambda: len(env.client.produce_requests()) == 3)
    [again] = env.client.produce_requests()[2].batches
    # The unacknowledged batch, numbered from 0 under the new producer id.
    assert again is b2 and (again.producer_id, again.base_sequence) == (1001, 0)
    env.client.answer_produce()
    env.step()
    assert f2.result(0).offset == 1
    # The next batch of the partition follows it.
    f4 = env.append(0, b"d")
    env.step()
    [b4] = env.client.produce_requests()[3].batches
    assert (b4.producer_id, b4.base_sequence) == (1001, 1)
    env.client.answer_produce()
    env.step()
    assert f4.result(0).offset == 2


def test_a_step_that_reads_answers_drains_what_they_freed_and_wants_no_other(make_env):
    """The step reads answers before it drains, so what an answer frees (here room in flight
    for a batch that waited) is sent by the same step; a step whose first poll was all it
    handled asks for no other at once (half the steps at 50,000 records/s found nothing)."""
    env = make_env(max_in_flight_requests_per_connection=1)
    first = env.append(0)
    env.step()
    second = env.append(1)
    env.step()
    assert len(env.client.produce_requests()) == 1       # no room in flight for the second
    env.client.answer_produce()
    env.step()
    assert first.result(0).offset == 0
    assert len(env.client.produce_requests()) == 2       # sent by the step that read the answer
    env.client.answer_produce()
    env.step()
    assert second.result(0).offset == 0
    assert not env.turn.watcher.wait(200)                # nothing wanted: no step at once


def test_each_step_tells_the_accumulator_whether_every_window_is_full(make_env):
    """While every window is full, a batch that fills asks for no step of its own
    (RecordAccumulator._notify): the step that reads the answer sends it. The flag is the
    last step's view."""
    env = make_env(max_in_flight_requests_per_connection=1)
    env.append(0)
    env.step()
    assert len(env.client.produce_requests()) == 1 and env.sender.acc.windows_full
    env.client.answer_produce()
    env.step()
    assert not env.sender.acc.windows_full


def test_a_node_that_leads_no_partition_does_not_keep_the_windows_open(make_env):
    """The bootstrap connection stays READY and idle beside the brokers the metadata named,
    and takes no batch: the windows count as full when every leader's is (with every node
    counted, a single broker's producer never saw them full, and each batch that filled
    asked for a step that found nothing to send)."""
    env = make_env(max_in_flight_requests_per_connection=1)
    env.client.set_node(-1, "10.0.0.9", 9092)           # leads nothing, nothing in flight
    assert env.client.ready(-1, env.clock.mono_ms())
    env.append(0)
    env.step()
    assert len(env.client.produce_requests()) == 1 and env.sender.acc.windows_full
    assert not env.client.windows_full()                 # every node counted: -1 has room
    env.client.answer_produce()
    env.step()
    assert not env.sender.acc.windows_full


def test_a_step_that_wants_the_next_at_once_counts_as_a_look_by_a_waiting_thread(make_env):
    """With acks=0 a step's last poll completes what it wrote, so the step asks for the next
    at once. A thread in run_steps_until runs that step itself, and the step tells the turn
    so (a look, as a send is) before it ends: otherwise the watcher, raising it as the step
    ends, saw no look since its last and handed it to the I/O thread at once. A step run
    outside run_steps_until tells nothing. ``step_first`` runs the first step unasked."""
    env = make_env(acks=0, enable_idempotence=False)
    turn, watcher = env.turn, env.turn.watcher
    first = env.append(0)
    before = watcher.activity
    env.step()
    assert first.done() and turn.again
    assert watcher.activity == before                    # no thread waits for it
    second = env.append(1)
    before = watcher.activity
    assert turn.run_steps_until(second.done, None, step_first=True)
    assert turn.again
    # The loop's own look before its step, and the step's: it wanted the next at once.
    assert watcher.activity == before + 2
    assert not turn._waiting_threads                     # the thread left the loop
    assert second.result(0).offset == -1                 # acks=0: no offset


def test_a_closing_sender_ends_when_a_step_settles_the_last_batch(make_env):
    """The close loop steps until nothing is queued or in flight; when the step it runs
    settles the last batch it ends there, without waiting for a step nobody will want."""
    env = make_env()
    fut = env.append(0)
    env.step()
    env.client.answer_produce()
    env.sender.running = False
    closing = threading.Thread(target=env.sender._run, daemon=True)   # the I/O thread's close path
    closing.start()
    closing.join(10)
    assert not closing.is_alive()
    assert fut.result(0).offset == 0


def test_a_duplicate_answer_to_a_resend_is_success(make_env):
    """DUPLICATE_SEQUENCE_NUMBER for a batch sent before (its first request's answer was
    lost): the broker has it."""
    env = make_env()
    fut = env.append(0)
    env.step()
    env.client.fail_next(v.PRODUCE, NetworkError("connection to node 0 (broker0:9092) lost: reset"))
    env.step()
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    env.client.answer_produce({(TOPIC, 0): ErrorCode.DUPLICATE_SEQUENCE_NUMBER})
    env.step()
    assert fut.result(0).partition == 0 and fut.exception(0) is None
    assert env.sender.stats["records_acked"] == 1 and env.sender.producer_id == 1000
    assert env.sender.stats["duplicates_on_first_send"] == 0


def test_a_duplicate_answer_to_a_first_send_is_not_taken_for_success(make_env):
    """DUPLICATE_SEQUENCE_NUMBER for a batch's first send is no resend: another batch holds
    its producer id, epoch and sequence (two producers given one id), and its records were
    not written. It would vanish as a success; the producer takes a new id, renumbers and
    sends it again."""
    env = make_env()
    fut = env.append(0, b"a")
    env.step()
    [req] = env.client.produce_requests()
    assert req.batches[0].attempts == 0
    env.client.answer_produce({(TOPIC, 0): ErrorCode.DUPLICATE_SEQUENCE_NUMBER})
    env.step()
    assert not fut.done() and env.sender.stats["duplicates_on_first_send"] == 1
    env.step()                                         # InitProducerId, answered at once
    assert env.sender.producer_id == 1001
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    [again] = env.client.produce_requests()[1].batches
    assert (again.producer_id, again.base_sequence) == (1001, 0)
    env.client.answer_produce()
    env.step()
    assert fut.result(0).offset == 0


def test_delivery_timeout_expires_a_batch_that_cannot_be_sent(make_env):
    env = make_env(request_timeout_ms=1000, delivery_timeout_ms=5000)
    fut = env.append(0)
    env.step()
    [b] = env.client.produce_requests()[0].batches
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.client.down.add(0)                     # then the broker is gone
    env.client.delay_ms[0] = 1000
    env.step()
    assert not fut.done()
    env.clock.sleep(b.created_ms + 4999 - env.clock.wall_ms())
    env.step()
    assert not fut.done()
    env.clock.sleep(1)
    env.step()
    err = fut.exception(0)
    assert isinstance(err, KafkaTimeoutError)
    assert str(err) == (f"expiring 1 record(s) for {TOPIC}-0: 5000 ms has passed since batch "
                        f"creation (delivery.timeout.ms=5000)")
    assert len(env.client.produce_requests()) == 1 and env.sender.stats["records_failed"] == 1


def test_max_in_flight_one_keeps_order_through_a_retry(make_env):
    env = make_env(max_in_flight_requests_per_connection=1)
    fa = env.append(0, b"a")
    env.step()
    [first] = env.client.produce_requests()
    [a] = first.batches
    fb = env.append(0, b"b")                   # a new batch: A was closed when drained
    env.step(3)
    assert len(env.client.produce_requests()) == 1   # one request in flight at most
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.step()
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    assert env.client.produce_requests()[1].batches == [a]   # A again, before B
    env.client.answer_produce()
    env.step_until(lambda: len(env.client.produce_requests()) == 3)
    [b] = env.client.produce_requests()[2].batches
    assert b is not a and b.base_sequence == 1
    env.client.answer_produce()
    env.step()
    assert (fa.result(0).offset, fb.result(0).offset) == (0, 1)


def test_acks_0_completes_once_written(make_env):
    env = make_env(acks=0)
    assert not env.sender.idempotent
    fut = env.append(0)
    env.step()
    [req] = env.client.produce_requests()
    assert not req.expect_response
    [b] = req.batches
    assert (b.producer_id, b.base_sequence) == (-1, -1)
    md = fut.result(0)        # completed by the same step's poll: nothing to wait for
    assert md.offset == -1 and env.sender.acks0_nodes == {0}
    assert not env.client.in_flight


def _courier_request(batches, results):
    """What the courier hands over for a request whose acknowledgement it read (the
    attributes of kproducer._core.CourierRequest that the Sender reads)."""
    return types.SimpleNamespace(node_id=0, batches=batches, results=results)


def test_an_acknowledgement_the_courier_read_completes_its_batches_directly(make_env):
    """The courier's decoded acknowledgement (each batch's base offset and log append time)
    completes the batches as it is: no Produce response is rebuilt and decoded again."""
    env = make_env()
    fa, fb = env.append(0, b"a"), env.append(1, b"b")
    env.step()
    [req] = env.client.produce_requests()
    batches = sorted(req.batches, key=lambda b: b.partition)
    env.sender.on_acknowledged(_courier_request(batches, [(40, -1), (7, 1_700_000_000_123)]), None)
    assert (fa.result(0).offset, fb.result(0).offset) == (40, 7)
    assert fb.result(0).timestamp == 1_700_000_000_123         # the log append time
    assert env.sender.stats["records_acked"] == 2 and not env.sender.in_flight


def test_a_courier_request_whose_connection_was_lost_is_retried(make_env):
    """Its answer was read, but the connection was lost before the responses ahead of it:
    it fails as every request in flight then does, and its batches are retried."""
    env = make_env()
    fut = env.append(0)
    env.step()
    [req] = env.client.produce_requests()
    env.sender.on_acknowledged(_courier_request(req.batches, [(0, -1)]),
                               NetworkError("connection to node 0 (broker0:9092) lost: reset"))
    assert not fut.done() and env.sender.stats["retries"] == 1


# -- order across retries and leader moves (Java's rules; tests/resilience/test_failover.py on a cluster) --

def _batch_of(env, partition: int):
    """Appends a record to ``partition`` and sends its batch in a request of its own."""
    fut = env.append(partition, b"v%d" % len(env.client.produce_requests()))
    n = len(env.client.produce_requests())
    env.step_until(lambda: len(env.client.produce_requests()) == n + 1)
    return fut, env.client.produce_requests()[-1]


def test_a_retry_waits_while_an_earlier_retry_of_its_partition_is_in_flight(make_env):
    # Two batches of one partition in flight both fail: the first goes again alone; the
    # second waits until it is answered (a second try that failed again would otherwise be
    # written after the second batch's).
    env = make_env()
    f1, r1 = _batch_of(env, 0)
    f2, r2 = _batch_of(env, 0)
    assert (r1.batches[0].base_sequence, r2.batches[0].base_sequence) == (0, 1)
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.step()
    assert env.sender.stats["retries"] == 2
    env.clock.sleep(RETRY_BACKOFF_MS * 3)
    env.step(4)
    sent = env.client.produce_requests()[2:]
    assert [r.batches[0].base_sequence for r in sent] == [0], "only the first retry goes"
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})   # fails again
    env.step()
    env.clock.sleep(RETRY_BACKOFF_MS * 3)
    env.step(4)
    assert [r.batches[0].base_sequence for r in env.client.produce_requests()[3:]] == [0]
    env.client.answer_produce()
    env.step()
    env.step_until(lambda: len(env.client.produce_requests()) == 5)
    assert env.client.produce_requests()[4].batches[0].base_sequence == 1
    env.client.answer_produce()
    env.step()
    assert (f1.result(0).offset, f2.result(0).offset) == (0, 1)
    assert not env.sender.requeued and not env.sender.muted


def test_a_partition_sends_nothing_to_a_new_leader_while_the_old_one_holds_its_batches(make_env):
    env = make_env()
    env.client.nodes[1] = ("broker1", 9093)
    f1, r1 = _batch_of(env, 0)
    assert r1.node == 0
    # The metadata now names node 1; the batch in flight to node 0 is not answered yet.
    moved = Cluster([Node(0, "broker0", 9092), Node(1, "broker1", 9093)],
                    [TopicInfo(TOPIC, 0, {0: PartitionInfo(0, 1), 1: PartitionInfo(1, 0)})])
    env.client.cluster = moved
    env.metadata.request_update()
    env.clock.sleep(RETRY_BACKOFF_MS)
    env.step()
    assert env.metadata.cluster.leader_for(TOPIC, 0).node_id == 1
    assert (TOPIC, 0) in env.sender.muted
    f2 = env.append(0, b"later")
    env.step(3)
    assert len(env.client.produce_requests()) == 1, "nothing goes to node 1 before node 0 answers"
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.step()
    env.clock.sleep(RETRY_BACKOFF_MS * 3)
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    retry = env.client.produce_requests()[1]
    assert retry.node == 1 and retry.batches[0].base_sequence == 0     # the old batch first
    env.client.answer_produce()
    env.step_until(lambda: len(env.client.produce_requests()) == 3)
    later = env.client.produce_requests()[2]
    assert later.node == 1 and later.batches[0].base_sequence == 1
    env.client.answer_produce()
    env.step()
    assert (f1.result(0).offset, f2.result(0).offset) == (0, 1)


def test_a_lost_node_refreshes_metadata_and_forgets_its_coordinators(make_env):
    env = make_env()
    env.sender.coordinator.coordinators[(1, "tx")] = 0
    env.sender.coordinator.coordinators[(1, "other")] = 5
    env.metadata.update(env.cluster, env.clock.wall_ms())
    assert not env.metadata.update_requested()
    for listener in env.client.node_lost_listeners:
        listener(0)
    assert env.metadata.update_requested()
    assert env.sender.coordinator.coordinators == {(1, "other"): 5}


def test_a_broker_that_stores_past_a_refused_batch_is_reported(make_env, caplog):
    # A broker that checks sequences refuses the second batch once the first was refused
    # (OUT_OF_ORDER_SEQUENCE_NUMBER); one that stores it has put the partition out of order,
    # which nothing can undo: counted and logged (librdkafka raises a fatal error).
    env = make_env()
    f1, r1 = _batch_of(env, 0)
    f2, r2 = _batch_of(env, 0)
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.client.answer_produce()                       # stored past the refused one
    with caplog.at_level("WARNING", logger="kproducer"):
        env.step()
    assert env.sender.stats["sequence_violations"] == 1
    assert "does not check idempotent sequences" in caplog.text
    assert f2.result(0).offset == 0 and not f1.done()
    env.clock.sleep(RETRY_BACKOFF_MS * 3)
    env.step_until(lambda: len(env.client.produce_requests()) == 3)
    env.client.answer_produce()
    env.step()
    assert f1.result(0).offset == 1
    # In order, nothing is reported.
    f3, _ = _batch_of(env, 0)
    env.client.answer_produce()
    env.step()
    assert f3.result(0).offset == 2 and env.sender.stats["sequence_violations"] == 1


def test_a_partition_whose_leader_refused_it_waits_for_the_next_metadata(make_env):
    # NOT_LEADER_OR_FOLLOWER: sent again to the same node the retry would be refused again
    # (and wait a doubled backoff): it waits for the snapshot that names the leader.
    env = make_env()
    env.client.hold_metadata = True
    fut, first = _batch_of(env, 0)
    env.client.answer_produce({(TOPIC, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    env.step()
    assert (TOPIC, 0) in env.sender.awaiting_leader
    env.clock.sleep(RETRY_BACKOFF_MS * 5)                # the retry's backoff is long over
    env.step(4)
    assert len(env.client.produce_requests()) == 1, "sent again before the metadata came"
    assert [r.api_key for r in env.client.in_flight] == [v.METADATA]
    env.client.hold_metadata = False
    env.step_until(lambda: len(env.client.produce_requests()) == 2)
    assert not env.sender.awaiting_leader
    env.client.answer_produce()
    env.step()
    assert fut.result(0).offset == 0


def test_a_refusal_that_names_the_new_leader_is_retried_there_at_once(make_env):
    # KIP-951: NOT_LEADER_OR_FOLLOWER with the partition's new leader and its address: the
    # retry goes to it without a backoff and without waiting for the refresh.
    env = make_env()
    env.client.hold_metadata = True
    env.client.nodes[1] = ("broker1", 9093)
    fut, first = _batch_of(env, 0)

    def answer(req):
        parts = [(TOPIC, 0, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1, None)]
        return (req.correlation_id, parts, 0, 0, {(TOPIC, 0): (1, 7)}, {1: ("broker1", 9093)}), None
    env.client._answers.append((v.PRODUCE, answer))
    env.step()
    assert env.metadata.cluster.leader_for(TOPIC, 0).node_id == 1
    assert not env.sender.awaiting_leader
    env.step_until(lambda: len(env.client.produce_requests()) == 2)   # no backoff waited
    retry = env.client.produce_requests()[1]
    assert retry.node == 1 and retry.batches[0].base_sequence == 0
    env.client.answer_produce()
    env.step()
    assert fut.result(0).offset == 0
