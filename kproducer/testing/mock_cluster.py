"""A Kafka cluster of several brokers from a second, independent implementation: librdkafka's
mock cluster (``rdkafka_mock.h``), driven through ``ctypes``.

The librdkafka that the ``confluent-kafka`` wheel bundles exports the ``rd_kafka_mock_*``
functions; confluent-kafka's Python API does not, so this module loads that shared library
and calls them. Nothing else is installed: the cluster's brokers are threads of this process
listening on 127.0.0.1, speaking Metadata, Produce, Fetch, InitProducerId, FindCoordinator and
the transaction APIs, and they can be made to fail in the ways a real cluster does: leaders
move, brokers go down and come back, round trips get long, coordinators move, answers carry
error codes.

    with MockCluster(3) as mc:
        mc.create_topic("t", partitions=6, replication_factor=3)
        p = Producer(bootstrap_servers=mc.bootstrap)
        mc.set_leader("t", 0, 2)
        mc.broker_down(2); ...; mc.broker_up(2)

What it checks and what it does not (observed with librdkafka 2.16; ``rdkafka_mock.c``):
sequence numbers are checked only for transactional producers (an idempotent producer
without a ``transactional.id`` is not checked: a batch written after an earlier one failed is
stored out of order, and a resend of a batch it stored is stored again); for a transactional
producer, a resend it recognises as a duplicate within its window of five moves the sequence
it expects back, so that a run of resends after it is stored again (its
``rd_kafka_mock_validate_records`` updates the window for duplicates too); its Produce answers
carry a ``log_append_time_ms`` of 1234 and a ThrottleTimeMs of 0; the commit and abort
markers it writes carry a CRC of 0, so a consumer that checks CRCs refuses a transactional
topic (:meth:`MockCluster.consumer_config`). Read records back with
:func:`kproducer.testing.readback` (confluent-kafka's consumer), never with kproducer's own
decoder alone.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Iterable, Sequence

from ._optional import require

__all__ = ["MockCluster", "MockClusterError", "librdkafka_path"]

# rd_kafka_type_t
_RD_KAFKA_PRODUCER = 0
# Coordinator kinds (rd_kafka_mock_coordinator_set's key_type).
_COORDINATOR_KINDS = ("transaction", "group")

_lock = threading.Lock()
_lib = None


class MockClusterError(RuntimeError):
    """A control call on the mock cluster failed; ``code`` is librdkafka's error code."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


def librdkafka_path() -> str:
    """The path of the librdkafka shared library that the confluent-kafka wheel bundles."""
    ck = require("confluent_kafka", "confluent-kafka", "test", "kproducer.testing.mock_cluster")
    site = os.path.dirname(os.path.dirname(os.path.abspath(ck.__file__)))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not found:
        raise ImportError(
            f"no librdkafka shared library in {os.path.join(site, 'confluent_kafka.libs')}: "
            f"kproducer.testing.mock_cluster needs the confluent-kafka wheel, which bundles it "
            f"(a confluent-kafka built against a system librdkafka: load that one instead)")
    return found[0]


def _load():
    """The library with argtypes/restype set for every function this module calls."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(librdkafka_path())
        vp, cp, i16, i32, sz = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int16,
                                ctypes.c_int32, ctypes.c_size_t)
        err_t = ctypes.c_int
        sigs = {
            "rd_kafka_conf_new": (vp, []),
            "rd_kafka_conf_set": (ctypes.c_int, [vp, cp, cp, cp, sz]),
            "rd_kafka_new": (vp, [ctypes.c_int, vp, cp, sz]),
            "rd_kafka_destroy": (None, [vp]),
            "rd_kafka_err2name": (cp, [err_t]),
            "rd_kafka_mock_cluster_new": (vp, [vp, ctypes.c_int]),
            "rd_kafka_mock_cluster_destroy": (None, [vp]),
            "rd_kafka_mock_cluster_bootstraps": (cp, [vp]),
            "rd_kafka_mock_topic_create": (err_t, [vp, cp, ctypes.c_int, ctypes.c_int]),
            "rd_kafka_mock_topic_set_error": (None, [vp, cp, err_t]),
            "rd_kafka_mock_partition_set_leader": (err_t, [vp, cp, i32, i32]),
            "rd_kafka_mock_partition_set_follower": (err_t, [vp, cp, i32, i32]),
            "rd_kafka_mock_broker_set_down": (err_t, [vp, i32]),
            "rd_kafka_mock_broker_set_up": (err_t, [vp, i32]),
            "rd_kafka_mock_broker_set_rtt": (err_t, [vp, i32, ctypes.c_int]),
            "rd_kafka_mock_broker_set_rack": (err_t, [vp, i32, cp]),
            "rd_kafka_mock_coordinator_set": (err_t, [vp, cp, cp, i32]),
            "rd_kafka_mock_push_request_errors_array": (None, [vp, i16, sz, vp]),
            "rd_kafka_mock_clear_request_errors": (None, [vp, i16]),
            "rd_kafka_mock_set_apiversion": (err_t, [vp, i16, i16, i16]),
            "rd_kafka_mock_broker_push_request_error_rtts": (err_t, [vp, i32, i16, sz]),
        }
        optional = {
            # Newer librdkafka releases only: used when present.
            "rd_kafka_mock_broker_remove_from_metadata": (err_t, [vp, i32]),
            # Request tracking (librdkafka >= 2.4).
            "rd_kafka_mock_start_request_tracking": (None, [vp]),
            "rd_kafka_mock_stop_request_tracking": (None, [vp]),
            "rd_kafka_mock_get_requests": (ctypes.POINTER(vp), [vp, ctypes.POINTER(sz)]),
            "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(vp), sz]),
            "rd_kafka_mock_clear_requests": (None, [vp]),
            "rd_kafka_mock_request_id": (i32, [vp]),
            "rd_kafka_mock_request_api_key": (i16, [vp]),
            "rd_kafka_mock_request_timestamp": (ctypes.c_int64, [vp]),
        }
        for name, (res, args) in list(sigs.items()) + list(optional.items()):
            fn = getattr(lib, name, None)
            if fn is None:
                if name in sigs:
                    raise ImportError(f"{librdkafka_path()} does not export {name}: "
                                      f"kproducer.testing.mock_cluster needs librdkafka >= 2.3")
                continue
            fn.restype = res
            if name != "rd_kafka_mock_broker_push_request_error_rtts":   # variadic
                fn.argtypes = args
        _lib = lib
        return lib


class MockCluster:
    """``brokers`` mock Kafka brokers (ids 1..brokers) on 127.0.0.1, alive until :meth:`close`.

    Every control is a method with a Python name; librdkafka's error codes raise
    :class:`MockClusterError` naming the call and the code. The cluster's own log (librdkafka's
    ``log_level``, 0-7) goes to stderr; 3 (errors) by default; ``debug="mock"`` (with
    ``log_level=7``) logs what the brokers do with each request.
    """

    def __init__(self, brokers: int = 3, *, log_level: int = 3, debug: str | None = None):
        if not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers must be a positive int, not {brokers!r}")
        self._lib = lib = _load()
        self.broker_ids = list(range(1, brokers + 1))
        conf = lib.rd_kafka_conf_new()
        err = ctypes.create_string_buffer(512)
        settings = [("log_level", str(log_level))]
        if debug:
            settings.append(("debug", debug))       # librdkafka's contexts, e.g. "mock"
        for key, value in settings:
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), err, len(err)) != 0:
                raise MockClusterError(f"rd_kafka_conf_set({key}={value}): {err.value.decode()}")
        # The handle owns the cluster: it lives as long as the handle.
        self._rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, err, len(err))
        if not self._rk:
            raise MockClusterError(f"rd_kafka_new: {err.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            self._rk = None
            raise MockClusterError(f"rd_kafka_mock_cluster_new({brokers}) failed")
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self.addresses = dict(zip(self.broker_ids, self.bootstrap.split(",")))
        self.down: set = set()

    @staticmethod
    def consumer_config(*, read_committed: bool = False) -> dict:
        """librdkafka settings for reading this cluster back: the markers of transactions
        the mock writes carry a CRC of 0, which a consumer checking CRCs refuses; records of
        transactional topics are therefore read without that check (the same producer's
        batches are CRC-checked against Tansu by the other suites)."""
        if not read_committed:
            return {}
        return {"isolation.level": "read_committed", "check.crcs": False}

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stops every broker (idempotent)."""
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> "MockCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, what: str, code: int) -> None:
        if code:
            name = self._lib.rd_kafka_err2name(code)
            raise MockClusterError(f"{what} failed: {name.decode() if name else code}", code)

    def _live(self):
        if not self._mc:
            raise MockClusterError("the mock cluster is closed")
        return self._mc

    # -- topics and partitions -------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Creates ``topic``; leaders are spread over the brokers."""
        self._check(f"create_topic({topic!r}, {partitions}, {replication_factor})",
                    self._lib.rd_kafka_mock_topic_create(self._live(), topic.encode(),
                                                         partitions, replication_factor))

    def set_topic_error(self, topic: str, code: int) -> None:
        """Metadata answers ``code`` for ``topic`` (0 clears it)."""
        self._lib.rd_kafka_mock_topic_set_error(self._live(), topic.encode(), code)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Moves the leadership of ``topic``-``partition`` to ``broker_id`` (-1: no leader)."""
        self._check(f"set_leader({topic!r}, {partition}, {broker_id})",
                    self._lib.rd_kafka_mock_partition_set_leader(self._live(), topic.encode(),
                                                                 partition, broker_id))

    def set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """The preferred replica a consumer should fetch ``topic``-``partition`` from."""
        self._check(f"set_follower({topic!r}, {partition}, {broker_id})",
                    self._lib.rd_kafka_mock_partition_set_follower(self._live(), topic.encode(),
                                                                   partition, broker_id))

    # -- brokers --------------------------------------------------------------------------

    def broker_down(self, broker_id: int) -> None:
        """Closes the broker's connections and refuses new ones until :meth:`broker_up`."""
        self._check(f"broker_down({broker_id})",
                    self._lib.rd_kafka_mock_broker_set_down(self._live(), broker_id))
        self.down.add(broker_id)

    def broker_up(self, broker_id: int) -> None:
        self._check(f"broker_up({broker_id})",
                    self._lib.rd_kafka_mock_broker_set_up(self._live(), broker_id))
        self.down.discard(broker_id)

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Every answer of ``broker_id`` is delayed by ``rtt_ms`` (0: none)."""
        self._check(f"set_rtt({broker_id}, {rtt_ms})",
                    self._lib.rd_kafka_mock_broker_set_rtt(self._live(), broker_id, rtt_ms))

    def set_rtt_all(self, rtt_ms: int) -> None:
        for b in self.broker_ids:
            self.set_rtt(b, rtt_ms)

    def set_rack(self, broker_id: int, rack: str) -> None:
        self._check(f"set_rack({broker_id}, {rack!r})",
                    self._lib.rd_kafka_mock_broker_set_rack(self._live(), broker_id, rack.encode()))

    def remove_from_metadata(self, broker_id: int) -> None:
        """Metadata answers stop listing ``broker_id`` (it keeps running)."""
        fn = getattr(self._lib, "rd_kafka_mock_broker_remove_from_metadata", None)
        if fn is None:
            raise MockClusterError("this librdkafka has no rd_kafka_mock_broker_remove_from_metadata")
        self._check(f"remove_from_metadata({broker_id})", fn(self._live(), broker_id))

    # -- requests received ----------------------------------------------------------------

    def _tracking_fn(self, name: str):
        fn = getattr(self._lib, name, None)
        if fn is None:
            raise MockClusterError(f"this librdkafka has no {name} (request tracking: 2.4 or later)")
        return fn

    def start_request_tracking(self) -> None:
        """From now on the brokers keep every request they receive (:meth:`requests`)."""
        self._tracking_fn("rd_kafka_mock_start_request_tracking")(self._live())

    def stop_request_tracking(self) -> None:
        self._tracking_fn("rd_kafka_mock_stop_request_tracking")(self._live())

    def clear_requests(self) -> None:
        """Forgets the requests kept so far."""
        self._tracking_fn("rd_kafka_mock_clear_requests")(self._live())

    def requests(self) -> list[tuple[int, int, int]]:
        """The requests received since :meth:`start_request_tracking` (or the last
        :meth:`clear_requests`), in the order received: ``(broker id, api key, when)``,
        ``when`` in µs of CLOCK_MONOTONIC (``time.monotonic_ns() // 1000``'s clock) at which
        the broker read the request."""
        n = ctypes.c_size_t(0)
        arr = self._tracking_fn("rd_kafka_mock_get_requests")(self._live(), ctypes.byref(n))
        lib = self._lib
        try:
            return [(lib.rd_kafka_mock_request_id(arr[i]), lib.rd_kafka_mock_request_api_key(arr[i]),
                     lib.rd_kafka_mock_request_timestamp(arr[i])) for i in range(n.value)]
        finally:
            if arr:
                lib.rd_kafka_mock_request_destroy_array(arr, n.value)

    # -- coordinators ---------------------------------------------------------------------

    def set_coordinator(self, kind: str, key: str, broker_id: int) -> None:
        """``kind`` "transaction" (key: the transactional.id) or "group" (key: the group id)."""
        if kind not in _COORDINATOR_KINDS:
            raise ValueError(f"kind must be one of {_COORDINATOR_KINDS}, not {kind!r}")
        self._check(f"set_coordinator({kind!r}, {key!r}, {broker_id})",
                    self._lib.rd_kafka_mock_coordinator_set(self._live(), kind.encode(),
                                                            key.encode(), broker_id))

    # -- answers --------------------------------------------------------------------------

    def push_request_errors(self, api_key: int, codes: Sequence[int]) -> None:
        """The next ``len(codes)`` requests of ``api_key`` to any broker are answered with
        these error codes, in order."""
        codes = list(codes)
        arr = (ctypes.c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._live(), api_key, len(codes),
                                                          ctypes.cast(arr, ctypes.c_void_p))

    def push_broker_errors(self, broker_id: int, api_key: int,
                           errors: Iterable[tuple[int, int]]) -> None:
        """The next requests of ``api_key`` to ``broker_id`` are answered, in order, with
        each ``(error code, round-trip ms)``."""
        pairs = list(errors)
        args = []
        for code, rtt in pairs:
            args += [ctypes.c_int(code), ctypes.c_int(rtt)]
        fn = self._lib.rd_kafka_mock_broker_push_request_error_rtts
        self._check(f"push_broker_errors({broker_id}, {api_key})",
                    fn(ctypes.c_void_p(self._live()), ctypes.c_int32(broker_id),
                       ctypes.c_int16(api_key), ctypes.c_size_t(len(pairs)), *args))

    def clear_request_errors(self, api_key: int) -> None:
        self._lib.rd_kafka_mock_clear_request_errors(self._live(), api_key)

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        """The versions of ``api_key`` the brokers announce and accept."""
        self._check(f"set_api_version({api_key}, {min_version}, {max_version})",
                    self._lib.rd_kafka_mock_set_apiversion(self._live(), api_key,
                                                           min_version, max_version))
