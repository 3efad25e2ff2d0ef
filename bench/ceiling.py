"""The broker's ceiling: what it takes from one connection when the client does no work.

``python -m bench.ceiling SPEC_JSON`` (the spec of :mod:`bench.clients`, plus ``partitions``)
encodes the scenario's records into Produce requests before the clock starts, then writes
them over one socket, one at a time: each as soon as the last is answered. The timed part is
nothing but those writes and reads, so its records/s bound every client's on the same broker
and the same requests: a target above it asks for more than the broker gives, and a client's
share of it is how much its own work costs it. The runs are read back like every client's.

One at a time, not five in flight as the producers keep: the broker serves a connection's
requests one at a time anyway, and Tansu spends more per record when they queue up on the
connection. 750,000 records of 1 KiB in 1 MB batches, 3 alternating rounds on fresh brokers:
257,126 records/s (3.60 µs of the broker's CPU a record) one at a time, 233,019 (4.16 µs)
with five in flight; 1,000,000 idempotent records of 100 B in 256 KiB batches: 2.05 M records/s
either way (0.45 against 0.49 µs).

The requests are kproducer's at the scenario's settings: keyed records on Java's murmur2
partition; one batch per partition per request, up to ``max.request.size`` (1 MiB); batches
of ``batch.size`` (1 MB, librdkafka's) or, in the defaults scenario, of ``batch.max.size``
(256 KiB: the size kproducer's batches grow to while the broker is busy), acks=all and
idempotent there; the protocol versions kproducer picks with the broker (ApiVersions), and
kproducer's encoders (the record batch, the request schemas).
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

from bench.clients import WARMUP_VALUE, reset_peak_rss, status_kib
from bench.data import make_keys, make_values
from kproducer._reference import BATCH_HEADER_SIZE
from kproducer.codec import encode_batch, murmur2_partition
from kproducer.config import SETTINGS
from kproducer.protocol.errors_table import error_name
from kproducer.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse,
                                         InitProducerIdRequest, InitProducerIdResponse,
                                         ProduceRequest, ProduceResponse)
from kproducer.protocol.versions import INIT_PRODUCER_ID, PRODUCE, pick_versions

CLIENT = "broker ceiling"
SCENARIOS = ("base", "defaults", "value-1KiB")     # those with a throughput target
MAX_REQUEST_SIZE = SETTINGS["max.request.size"].default
DEFAULT_BATCH_BYTES = SETTINGS["batch.max.size"].default
TIMEOUT_MS = 30_000
CLIENT_ID = "bench-ceiling"
# A record's length, attributes, deltas, lengths and header count: its varints at the sizes a
# batch of up to a million records, written within a few seconds, gives them.
RECORD_OVERHEAD = 21


class CeilingError(Exception):
    """The broker refused a request or answered what was not asked."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise CeilingError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def _call(sock: socket.socket, request, response_class, version: int, cid: int):
    sock.sendall(request.encode_framed(version, cid, CLIENT_ID))
    return _receive(sock, response_class, version, cid)


def _receive(sock: socket.socket, response_class, version: int, cid: int):
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    response = response_class.decode(version, _recv_exact(sock, size))
    if response.correlation_id != cid:
        raise CeilingError(f"response correlation id {response.correlation_id}, expected {cid}")
    return response


def check_produce_response(response) -> None:
    """CeilingError for a partition answered with an error, naming it."""
    for topic in response.responses:
        for part in topic.partition_responses:
            if part.error_code:
                raise CeilingError(f"partition {part.index}: {error_name(part.error_code)} "
                                   f"(error code {part.error_code})")


def negotiate(sock: socket.socket) -> dict[int, int]:
    """The versions kproducer's producer picks with this broker (ApiVersions v3)."""
    response = _call(sock, ApiVersionsRequest(client_software_name="bench-ceiling",
                                              client_software_version="1"),
                     ApiVersionsResponse, 3, 0)
    if response.error_code:
        raise CeilingError(f"ApiVersions: {error_name(response.error_code)}")
    return pick_versions(response.version_ranges(), required=(PRODUCE, INIT_PRODUCER_ID))


def init_producer_id(sock: socket.socket, version: int) -> tuple[int, int]:
    response = _call(sock, InitProducerIdRequest(transaction_timeout_ms=60_000),
                     InitProducerIdResponse, version, 0)
    if response.error_code:
        raise CeilingError(f"InitProducerId: {error_name(response.error_code)}")
    return response.producer_id, response.producer_epoch


def produce_request(topic: str, acks: int, parts: list[tuple[int, bytes]]):
    return ProduceRequest(acks=acks, timeout_ms=TIMEOUT_MS, topic_data=[
        {"name": topic, "partition_data": [{"index": p, "records": b} for p, b in parts]}])


def plan_requests(values: list[bytes], keys: list[bytes] | None, partitions: int,
                  batch_bytes: int) -> list[list[tuple[int, list[tuple]]]]:
    """Requests as lists of (partition, records), in send order: each partition's records
    cut into batches of at most ``batch_bytes``, then each request the next batch of every
    partition that has one, up to ``max.request.size``. Unkeyed records go to the partitions
    a batch at a time, as the sticky partitioner sends them."""
    queues: list[list[list[tuple]]] = [[] for _ in range(partitions)]
    sizes: list[list[int]] = [[] for _ in range(partitions)]     # each batch's bytes
    sticky = 0
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        size = RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        if key is not None:
            p = murmur2_partition(key, partitions)
        else:
            p = sticky
            if queues[p] and sizes[p][-1] + size > batch_bytes:
                sticky = p = (p + 1) % partitions
        if not queues[p] or sizes[p][-1] + size > batch_bytes:
            queues[p].append([])
            sizes[p].append(BATCH_HEADER_SIZE)
        queues[p][-1].append((key, value))
        sizes[p][-1] += size
    requests = []
    heads = [0] * partitions
    while any(heads[p] < len(queues[p]) for p in range(partitions)):
        parts, total = [], 0
        for p in range(partitions):
            if heads[p] == len(queues[p]):
                continue
            size = sizes[p][heads[p]]
            if parts and total + size > MAX_REQUEST_SIZE:
                continue
            parts.append((p, queues[p][heads[p]]))
            total += size
            heads[p] += 1
        requests.append(parts)
    return requests


def encode_requests(topic: str, plan, acks: int, producer: tuple[int, int] | None,
                    compression: str, level: int | None, version: int) -> list[bytes]:
    """The framed requests, correlation ids from 1; sequences per partition from 0 when
    ``producer`` is (producer id, epoch)."""
    pid, epoch = producer if producer else (-1, -1)
    sequences: dict[int, int] = {}
    out = []
    for cid, parts in enumerate(plan, start=1):
        encoded = []
        for p, records in parts:
            seq = sequences.get(p, 0) if producer else -1
            encoded.append((p, encode_batch(records, compression=compression,
                                            compression_level=level, producer_id=pid,
                                            producer_epoch=epoch, base_sequence=seq)))
            if producer:
                sequences[p] = seq + len(records)
        out.append(produce_request(topic, acks, encoded).encode_framed(version, cid, CLIENT_ID))
    return out


def run(spec: dict) -> dict:
    n = spec["records"]
    values = make_values(n, spec["value_size"])
    keys = make_keys(n) if spec["keyed"] else None
    if spec.get("own_defaults"):
        acks, idempotent, batch_bytes = -1, True, DEFAULT_BATCH_BYTES
    else:
        acks = -1 if spec["acks"] == "all" else int(spec["acks"])
        idempotent, batch_bytes = spec["idempotence"], spec["batch_size"]
        if acks == 0:
            raise CeilingError("acks=0: the broker answers nothing, so nothing would be timed")
    compression, level = spec.get("compression", "none"), spec.get("compression_level")
    host, port = spec["bootstrap"].split(",")[0].rsplit(":", 1)
    rss_before_kib = status_kib("VmRSS")
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        versions = negotiate(sock)
        version = versions[PRODUCE]
        producer = init_producer_id(sock, versions[INIT_PRODUCER_ID]) if idempotent else None
        topic = spec["topic"]
        # The warm-up record, alone in partition 0 and outside the producer's sequences:
        # the topic's leader is up before the clock starts.
        warm = encode_batch([(None, WARMUP_VALUE)])
        check_produce_response(_call(sock, produce_request(topic, -1, [(0, warm)]),
                                     ProduceResponse, version, 0))
        requests = encode_requests(topic, plan_requests(values, keys, spec["partitions"],
                                                        batch_bytes),
                                   acks, producer, compression, level, version)
        del values, keys
        reset_peak_rss()
        t0, c0 = time.perf_counter(), time.process_time()
        for cid, request in enumerate(requests, start=1):
            sock.sendall(request)
            check_produce_response(_receive(sock, ProduceResponse, version, cid))
        t1, c1 = time.perf_counter(), time.process_time()
    return {"seconds": t1 - t0, "cpu_seconds": c1 - c0, "client_failed": 0,
            "client_first_error": None, "rss_data_mib": rss_before_kib / 1024,
            "peak_rss_mib": status_kib("VmHWM") / 1024, "requests": len(requests),
            "settings": {"acks": "all" if acks == -1 else acks, "idempotence": idempotent,
                         "batch bytes": batch_bytes, "compression": compression,
                         "requests": len(requests), "produce version": version},
            "defaults": f"requests encoded before the clock, one at a time, Produce v{version}"}


if __name__ == "__main__":
    try:
        print(json.dumps(run(json.loads(sys.argv[1]))))
    except (CeilingError, OSError) as exc:      # OSError: no broker there, a timeout
        raise SystemExit(f"broker ceiling: {exc}") from None
