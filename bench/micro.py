"""Codec microbenchmark: kproducer's compiled batch encoder and CRC-32C against peers.

Peers, all measured in the same run:

- encode: aiokafka's Cython ``DefaultRecordBatchBuilder`` (``aiokafka.record._crecords``) and
  kafka-python's pure-Python ``DefaultRecordBatchBuilder`` (whose CRC comes from the crc32c
  package when installed), against ``kproducer.codec.encode_batch``;
- CRC-32C: the crc32c package, against ``kproducer.codec.crc32c`` (and its table-driven
  software path, for reference).

Method. Every input is generated before any timing. Each encoder first runs once, untimed, over
all of a scenario's batches (the warm-up); that output is verified: every batch's
RecordCount and Length, then the first and last batch decoded by ``kproducer.codec.decode_batch``
(which checks the CRC) and compared with the input. Then ``--repeat`` timed samples run
(``time.perf_counter``, gc paused as ``timeit`` does), each repeating the pass until it lasts
at least 50 ms (10 ms with ``--quick``), and the best is kept. Throughput counts key + value
bytes; MB = 10**6 bytes, GB = 10**9 bytes. A ratio is kproducer's throughput over the peer's.
The issue's targets are printed for context only: the exit status is non-zero only when a
verification fails, never because of a timing.

    python -m bench.micro [--records N] [--repeat K] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import importlib.machinery
import itertools
import json
import math
import platform
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Callable

from kproducer import codec
from kproducer.errors import CodecError

DEFAULT_RECORDS = 200_000
QUICK_RECORDS = 20_000
DEFAULT_REPEAT = 5
# A timed sample repeats a pass (over all of a scenario's batches, or one CRC call) until it
# lasts this long, so that fast passes are not lost in timer and scheduler noise.
MIN_SAMPLE_S, MIN_SAMPLE_S_QUICK = 0.05, 0.01

KEY_SIZE = 16
VALUE_SIZES = (100, 1024)
BASE_TIMESTAMP_MS = 1_700_000_000_000
PRODUCER_BATCH_SIZE = 16384          # the producer's batch.size default
BIG_BATCH_RECORDS = 1000
BATCH_HEADER_SIZE = 61               # record batch v2 header, up to and including RecordCount
# Upper bound of a record's framing for these inputs: Length (2) + Attributes (1) +
# TimestampDelta (2) + OffsetDelta (2) + KeyLength (1) + ValueLength (2) + HeadersCount (1).
RECORD_OVERHEAD = 11
# Same bound as the peers' own estimate (MAX_RECORD_OVERHEAD), used to size their batch_size.
PEER_RECORD_OVERHEAD = 21

CRC_SIZES = (1 << 20, 64 << 10)
CRC_CHECK_INPUT, CRC_CHECK_VALUE = b"123456789", 0xE3069283   # the CRC-32C check value

TARGET_ENCODE_RATIO = 5.0            # encode_batch >= 5x aiokafka's Cython builder, 100 B values
TARGET_CRC_SLOWDOWN = 1.5            # CRC-32C within 1.5x of the crc32c package

NO_HEADERS: list = []

KPRODUCER = "kproducer"
KPRODUCER_LIST_HEADERS = "kproducer (headers=[])"
AIOKAFKA = "aiokafka"
KAFKA_PYTHON = "kafka-python"
CRC32C_PKG = "crc32c-pkg"
KPRODUCER_SW = "kproducer-sw"


class VerificationError(Exception):
    """What an encoder or CRC function produced is not what it was given."""


# ---- inputs -------------------------------------------------------------------------------

@dataclass
class Scenario:
    name: str
    value_size: int
    batches: dict        # headers form -> lists of (key, value, timestamp_ms, headers)
    records: int
    payload_bytes: int   # key + value bytes over all batches
    peer_batch_size: int  # a batch_size limit the peers' builders never reach


def make_records(n: int, value_size: int) -> dict[str, list[tuple]]:
    """Distinct 16-byte keys, distinct random values, explicit increasing timestamps.

    Returned in both forms of "no headers": ``None`` (kproducer's idiom) and ``[]`` (what
    aiokafka's Cython ``append`` insists on; one shared list, never mutated).
    """
    rnd = random.Random(value_size)
    as_list = [(b"key-%012d" % i, rnd.randbytes(value_size), BASE_TIMESTAMP_MS + i, NO_HEADERS)
               for i in range(n)]
    return {"list": as_list, "none": [(k, v, ts, None) for k, v, ts, _ in as_list]}


def records_per_batch(value_size: int) -> int:
    """How many records fill a ``batch.size`` batch (the producer closes it at that size)."""
    record = KEY_SIZE + value_size + RECORD_OVERHEAD
    return max(1, (PRODUCER_BATCH_SIZE - BATCH_HEADER_SIZE) // record)


def make_scenario(name: str, value_size: int, records: dict[str, list], per_batch: int) -> Scenario:
    batches = {form: [recs[i:i + per_batch] for i in range(0, len(recs), per_batch)]
               for form, recs in records.items()}
    largest = max(sum(len(k) + len(v) + PEER_RECORD_OVERHEAD for k, v, _, _ in b)
                  for b in batches["list"])
    return Scenario(name=name, value_size=value_size, batches=batches,
                    records=len(records["list"]),
                    payload_bytes=sum(len(k) + len(v) for k, v, _, _ in records["list"]),
                    peer_batch_size=2 * (BATCH_HEADER_SIZE + largest))


def make_scenarios(n: int) -> list[Scenario]:
    scenarios = []
    for value_size in VALUE_SIZES:
        records = make_records(n, value_size)
        label = f"{value_size} B" if value_size < 1024 else f"{value_size // 1024} KiB"
        per = records_per_batch(value_size)
        scenarios.append(make_scenario(f"{label} values, 16 KiB batches ({per} rec)",
                                       value_size, records, per))
        scenarios.append(make_scenario(f"{label} values, {BIG_BATCH_RECORDS}-record batches",
                                       value_size, records, BIG_BATCH_RECORDS))
    return scenarios


# ---- encoders -----------------------------------------------------------------------------

# An encoder factory takes (batch_size limit, checked) and returns encode(batch) -> bytes-like.
EncoderFactory = Callable[[int, bool], Callable[[list], bytes]]


@dataclass
class Encoder:
    name: str
    factory: EncoderFactory
    headers: str         # which form of "no headers" it is given: "none" or "list"


def is_compiled(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def kproducer_factory(batch_size: int, checked: bool):
    return codec.encode_batch


def peer_factory(builder_cls) -> EncoderFactory:
    """Per-record ``append`` then ``build``, as the peers' producers drive their builders.

    The timed variant does not test append()'s result (that would bill the peer for our
    check); the checked variant, used for the verified warm-up, does, and the timed one must
    produce the same bytes.
    """
    def factory(batch_size: int, checked: bool):
        def new_builder():
            return builder_cls(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                               producer_epoch=-1, base_sequence=-1, batch_size=batch_size)

        def encode(batch):
            builder = new_builder()
            append = builder.append
            for offset, (key, value, timestamp, headers) in enumerate(batch):
                append(offset, timestamp, key, value, headers)
            return builder.build()

        def encode_checked(batch):
            builder = new_builder()
            for offset, (key, value, timestamp, headers) in enumerate(batch):
                if builder.append(offset, timestamp, key, value, headers) is None:
                    raise VerificationError(f"{builder_cls.__module__} refused record {offset} "
                                            f"(batch_size {batch_size})")
            return builder.build()

        return encode_checked if checked else encode
    return factory


def load_encoders() -> tuple[list[Encoder], dict[str, str]]:
    """Returns (encoders, {name: why skipped}); kproducer comes first, it is the reference.

    kproducer also runs on the ``[]`` inputs the peers get, so that a slow path for an empty
    headers list shows up here rather than hiding behind the idiomatic ``None``.
    """
    encoders = [Encoder(KPRODUCER, kproducer_factory, "none"),
                Encoder(KPRODUCER_LIST_HEADERS, kproducer_factory, "list")]
    skipped: dict[str, str] = {}
    try:
        import aiokafka  # noqa: F401
        from aiokafka.record._crecords import DefaultRecordBatchBuilder as aio_builder
    except ImportError as exc:
        skipped[AIOKAFKA] = f"not installed ({exc})"
    else:
        if is_compiled(aio_builder.__module__):
            encoders.append(Encoder(AIOKAFKA, peer_factory(aio_builder), "list"))
        else:
            skipped[AIOKAFKA] = f"Cython builder not compiled ({aio_builder.__module__})"
    try:
        from kafka.record.default_records import DefaultRecordBatchBuilder as kp_builder
    except ImportError as exc:
        skipped[KAFKA_PYTHON] = f"not installed ({exc})"
    else:
        encoders.append(Encoder(KAFKA_PYTHON, peer_factory(kp_builder), "list"))
    return encoders, skipped


# ---- verification -------------------------------------------------------------------------

def check_framing(batch: list, out) -> None:
    """Every record made it in: RecordCount and Length agree with the input and the output."""
    length = int.from_bytes(out[8:12], "big", signed=True)
    count = int.from_bytes(out[57:61], "big", signed=True)
    if count != len(batch) or length + 12 != len(out):
        raise VerificationError(f"RecordCount {count} / Length {length} for {len(batch)} records "
                                f"in {len(out)} bytes")


def check_decoded(batch: list, out) -> None:
    """Decodes with kproducer (validating the CRC) and compares with the input."""
    try:
        decoded = codec.decode_batch(bytes(out))
    except CodecError as exc:
        raise VerificationError(f"decode_batch failed: {exc}") from exc
    if decoded.records_count != len(batch) or len(decoded.records) != len(batch):
        raise VerificationError(f"decoded {len(decoded.records)} records, expected {len(batch)}")
    for where, want, got in (("first", batch[0], decoded.records[0]),
                             ("last", batch[-1], decoded.records[-1])):
        key, value, timestamp, _ = want
        if (got.key, got.value, got.timestamp, got.headers) != (key, value, timestamp, []):
            raise VerificationError(f"{where} record differs from the input")


def verified_warmup(batches: list, factory: EncoderFactory, batch_size: int) -> list:
    """The untimed warm-up pass; returns its outputs once they are verified."""
    encode_checked = factory(batch_size, True)
    outputs = [encode_checked(batch) for batch in batches]
    for index, (batch, out) in enumerate(zip(batches, outputs)):
        try:
            check_framing(batch, out)
        except VerificationError as exc:
            raise VerificationError(f"batch {index}: {exc}") from None
    for index in sorted({0, len(outputs) - 1}):
        try:
            check_decoded(batches[index], outputs[index])
        except VerificationError as exc:
            raise VerificationError(f"batch {index}: {exc}") from None
    if bytes(factory(batch_size, False)(batches[0])) != bytes(outputs[0]):
        raise VerificationError("the timed encoder's output differs from the checked one's")
    return outputs


# Record batch v2 header fields (offset, end, Kafka's name), then the Records section.
HEADER_FIELDS = (
    (0, 8, "BaseOffset"), (8, 12, "Length"), (12, 16, "PartitionLeaderEpoch"), (16, 17, "Magic"),
    (17, 21, "CRC"), (21, 23, "Attributes"), (23, 27, "LastOffsetDelta"),
    (27, 35, "BaseTimestamp"), (35, 43, "MaxTimestamp"), (43, 51, "ProducerId"),
    (51, 53, "ProducerEpoch"), (53, 57, "BaseSequence"), (57, 61, "RecordCount"),
    (61, None, "Records"),
)


def differing_fields(a: bytes, b: bytes) -> list[str]:
    """Names the wire fields in which two encodings of the same batch differ."""
    return [name for start, end, name in HEADER_FIELDS if a[start:end] != b[start:end]]


# ---- timing -------------------------------------------------------------------------------

@contextmanager
def gc_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loops_for(run: Callable[[int], object], min_seconds: float) -> int:
    """How many loops make ``run(loops)`` last at least ``min_seconds`` (as timeit's autorange)."""
    loops = 1
    while True:
        start = time.perf_counter()
        run(loops)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds / 10:
            return max(1, math.ceil(loops * min_seconds / elapsed))
        loops *= 10


def best_of(run: Callable[[int], object], repeat: int, min_seconds: float) -> tuple[float, int]:
    """Best time per loop over ``repeat`` samples of ``run(loops)``; returns (seconds, loops)."""
    loops = loops_for(run, min_seconds)
    best = math.inf
    with gc_paused():
        for _ in range(repeat):
            start = time.perf_counter()
            run(loops)
            best = min(best, (time.perf_counter() - start) / loops)
    return best, loops


def encode_passes(encode: Callable, batches: list, loops: int) -> None:
    for _ in itertools.repeat(None, loops):
        for batch in batches:
            encode(batch)


# ---- encode benchmark ---------------------------------------------------------------------

@dataclass
class EncodeResult:
    scenario: str
    value_size: int
    encoder: str
    batches: int
    records: int
    avg_batch_bytes: float
    seconds: float       # per pass over all batches
    loops: int           # passes per timed sample
    records_per_s: float
    mb_per_s: float
    differs_from_kproducer: list | None  # wire fields of the first batch unlike kproducer's
    #                                      (None: this is kproducer, or it was not measured)


def bench_encoder(scenario: Scenario, encoder: Encoder, repeat: int, min_seconds: float,
                  reference: bytes | None) -> tuple[EncodeResult, bytes]:
    """Verified warm-up, then best-of-``repeat``; also returns the first batch's bytes."""
    batches = scenario.batches[encoder.headers]
    outputs = verified_warmup(batches, encoder.factory, scenario.peer_batch_size)
    avg_bytes = sum(len(out) for out in outputs) / len(outputs)
    first = bytes(outputs[0])
    del outputs
    encode = encoder.factory(scenario.peer_batch_size, False)
    seconds, loops = best_of(lambda n: encode_passes(encode, batches, n), repeat, min_seconds)
    result = EncodeResult(
        scenario=scenario.name, value_size=scenario.value_size, encoder=encoder.name,
        batches=len(batches), records=scenario.records, avg_batch_bytes=avg_bytes,
        seconds=seconds, loops=loops, records_per_s=scenario.records / seconds,
        mb_per_s=scenario.payload_bytes / seconds / 1e6,
        differs_from_kproducer=None if reference is None else differing_fields(first, reference))
    return result, first


def bench_encode(scenarios: list[Scenario], encoders: list[Encoder], repeat: int,
                 min_seconds: float, errors: list[str]) -> list[EncodeResult]:
    results = []
    for scenario in scenarios:
        reference = None
        for encoder in encoders:
            try:
                result, first = bench_encoder(scenario, encoder, repeat, min_seconds, reference)
            except VerificationError as exc:
                errors.append(f"encode [{scenario.name}] {encoder.name}: {exc}")
                continue
            if encoder.name == KPRODUCER:
                reference = first
            results.append(result)
    return results


# ---- CRC-32C benchmark --------------------------------------------------------------------

@dataclass
class CrcResult:
    impl: str
    size: int
    calls: int           # calls per timed sample
    seconds: float       # per call
    gb_per_s: float


def load_crc_impls() -> tuple[dict[str, Callable], dict[str, str]]:
    impls: dict[str, Callable] = {KPRODUCER: codec.crc32c}
    skipped: dict[str, str] = {}
    try:
        import crc32c as crc32c_pkg
    except ImportError as exc:
        skipped[CRC32C_PKG] = f"not installed ({exc})"
    else:
        impls[CRC32C_PKG] = crc32c_pkg.crc32c
    impls[KPRODUCER_SW] = codec.crc32c_sw
    return impls, skipped


def check_crc_agreement(impls: dict[str, Callable], buffers: dict[int, bytes]) -> None:
    for name, fn in impls.items():
        if fn(CRC_CHECK_INPUT) != CRC_CHECK_VALUE:
            raise VerificationError(f"{name}: wrong CRC-32C check value")
    for size, buf in buffers.items():
        values = {name: fn(buf) for name, fn in impls.items()}
        if len(set(values.values())) != 1:
            raise VerificationError(f"CRC-32C disagreement on {size} bytes: {values}")


def bench_crc(impls: dict[str, Callable], buffers: dict[int, bytes], repeat: int,
              min_seconds: float) -> list[CrcResult]:
    results = []
    for size, buf in buffers.items():
        for name, fn in impls.items():
            def crc_calls(loops, fn=fn, buf=buf):
                for _ in itertools.repeat(None, loops):
                    fn(buf)

            seconds, calls = best_of(crc_calls, repeat, min_seconds)
            results.append(CrcResult(impl=name, size=size, calls=calls, seconds=seconds,
                                     gb_per_s=size / seconds / 1e9))
    return results


# ---- ratios and targets -------------------------------------------------------------------

def encode_ratios(results: list[EncodeResult]) -> dict[str, dict[str, float]]:
    """{scenario: {peer: kproducer records/s over peer records/s}}."""
    by_scenario: dict[str, dict[str, float]] = {}
    for r in results:
        by_scenario.setdefault(r.scenario, {})[r.encoder] = r.records_per_s
    return {scenario: {peer: rates[KPRODUCER] / rate for peer, rate in rates.items()
                       if peer != KPRODUCER}
            for scenario, rates in by_scenario.items() if KPRODUCER in rates}


def crc_ratios(results: list[CrcResult]) -> dict[int, float]:
    """{size: kproducer GB/s over crc32c-package GB/s}."""
    rates = {(r.impl, r.size): r.gb_per_s for r in results}
    return {size: rates[(KPRODUCER, size)] / rates[(CRC32C_PKG, size)]
            for (impl, size) in rates if impl == CRC32C_PKG and (KPRODUCER, size) in rates}


def evaluate_targets(results: list[EncodeResult], enc_ratios: dict, crc: dict[int, float]) -> list:
    small = dict.fromkeys(r.scenario for r in results if r.value_size == 100)  # in run order
    encode_vals = {s: enc_ratios[s][AIOKAFKA] for s in small if AIOKAFKA in enc_ratios.get(s, {})}
    return [
        {"target": f"encode_batch >= {TARGET_ENCODE_RATIO:g}x aiokafka's Cython builder "
                   "on 100-byte values",
         "values": encode_vals,
         "met": (all(v >= TARGET_ENCODE_RATIO for v in encode_vals.values())
                 if encode_vals else None)},
        {"target": f"CRC-32C within {TARGET_CRC_SLOWDOWN:g}x of the crc32c package",
         "values": {fmt_size(size): ratio for size, ratio in crc.items()},
         "met": all(r * TARGET_CRC_SLOWDOWN >= 1 for r in crc.values()) if crc else None},
    ]


# ---- report -------------------------------------------------------------------------------

def fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def print_table(headers: list[str], rows: list[list[str]], right: set[int]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def describe_difference(r: EncodeResult) -> str:
    if r.differs_from_kproducer is None:
        return "(reference)" if r.encoder == KPRODUCER else "n/a"
    return ", ".join(r.differs_from_kproducer) or "identical"


def print_encode(results: list[EncodeResult], ratios: dict, params: dict) -> None:
    print(f"\nEncode: {params['records']:,} records per scenario, {KEY_SIZE}-byte keys, "
          "explicit timestamps, no headers, no compression.\nms per pass over all batches, "
          f"best of {params['repeat']} samples of >= {params['min_sample_s'] * 1e3:.0f} ms; "
          "MB/s of key+value")
    rows = []
    for r in results:
        ratio = ratios.get(r.scenario, {}).get(r.encoder)
        rows.append([r.scenario, r.encoder, f"{r.batches:,}", f"{r.avg_batch_bytes:,.0f}",
                     f"{r.seconds * 1e3:,.1f}", f"{r.records_per_s / 1e6:,.3f}",
                     f"{r.mb_per_s:,.1f}", f"{ratio:,.1f}x" if ratio else "",
                     describe_difference(r)])
    print_table(["scenario", "encoder", "batches", "B/batch", "ms", "Mrec/s", "MB/s",
                 "kproducer/x", "bytes vs kproducer"], rows, right={2, 3, 4, 5, 6, 7})
    print("kproducer/x: kproducer's records/s over x's. kproducer gets headers=None, the peers "
          "[] (aiokafka requires a list).\nPartitionLeaderEpoch is not under the CRC and the "
          "broker sets it; kafka-python writes 0, the others -1.")


def print_crc(results: list[CrcResult], ratios: dict[int, float], hw: bool, params: dict) -> None:
    print(f"\nCRC-32C: GB/s, best of {params['repeat']} samples of >= "
          f"{params['min_sample_s'] * 1e3:.0f} ms; kproducer hardware path available: "
          f"{'yes' if hw else 'no'}")
    if not results:
        print("  not measured")
        return
    rows = []
    for r in results:
        ratio = ratios.get(r.size) if r.impl == CRC32C_PKG else None
        rows.append([fmt_size(r.size), r.impl, f"{r.calls:,}", f"{r.gb_per_s:,.2f}",
                     f"{ratio:.2f}x" if ratio else ""])
    print_table(["buffer", "impl", "calls/sample", "GB/s", "kproducer/x"], rows, right={2, 3, 4})


def print_targets(targets: list[dict]) -> None:
    print("\nTargets (informational; they do not set the exit status)")
    for t in targets:
        values = (", ".join(f"{k}: {v:.2f}x" for k, v in t["values"].items())
                  or "kproducer and the peer were not both measured")
        verdict = {True: "MET", False: "NOT MET", None: "not evaluated"}[t["met"]]
        print(f"  {t['target']}: {verdict}  ({values})")


def print_report(report: dict) -> None:
    env = report["environment"]
    print(f"kproducer codec microbenchmark — Python {env['python']} on {env['machine']}")
    for name, version in env["versions"].items():
        print(f"  {name}: {version}")
    for name, why in report["skipped"].items():
        print(f"  {name}: skipped, {why}")
    print_encode([EncodeResult(**r) for r in report["encode"]], report["encode_ratios"],
                 report["params"])
    print_crc([CrcResult(**r) for r in report["crc"]],
              {int(k): v for k, v in report["crc_ratios"].items()}, env["crc32c_hw"],
              report["params"])
    print_targets(report["targets"])
    if report["errors"]:
        print("\nVERIFICATION FAILED")
        for err in report["errors"]:
            print(f"  {err}")
    else:
        print("\nVerification passed: every batch's RecordCount and Length; the first and last "
              "batch of each\nencoder decoded (CRC checked) and equal to the input; CRC-32C "
              "values agree.")
    print(f"Total wall time: {report['elapsed_s']:.1f} s")


# ---- driver -------------------------------------------------------------------------------

def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for dist in ("kproducer", "aiokafka", "kafka-python", "crc32c"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    compiled = is_compiled("kproducer._codec")
    out["kproducer"] += " (compiled _codec)" if compiled else " (_codec NOT compiled)"
    return out


def run(records: int, repeat: int, quick: bool = False) -> dict:
    """Runs everything and returns the report as plain data (JSON-serialisable)."""
    started = time.perf_counter()
    errors: list[str] = []
    min_seconds = MIN_SAMPLE_S_QUICK if quick else MIN_SAMPLE_S
    if not is_compiled("kproducer._codec"):
        errors.append("kproducer._codec is not a compiled extension")
    encoders, skipped = load_encoders()
    crc_impls, crc_skipped = load_crc_impls()
    skipped.update(crc_skipped)

    scenarios = make_scenarios(records)
    buffers = {size: random.Random(size).randbytes(size) for size in CRC_SIZES}

    encode_results = bench_encode(scenarios, encoders, repeat, min_seconds, errors)
    del scenarios
    crc_results: list[CrcResult] = []
    try:
        check_crc_agreement(crc_impls, buffers)
    except VerificationError as exc:
        errors.append(f"crc32c: {exc}")
    else:
        crc_results = bench_crc(crc_impls, buffers, repeat, min_seconds)

    enc_ratios = encode_ratios(encode_results)
    crc = crc_ratios(crc_results)
    return {
        "environment": {"python": platform.python_version(), "machine": platform.machine(),
                        "versions": versions(), "crc32c_hw": codec.crc32c_hw_available()},
        "params": {"records": records, "repeat": repeat, "quick": quick,
                   "min_sample_s": min_seconds},
        "skipped": skipped,
        "encode": [asdict(r) for r in encode_results],
        "encode_ratios": enc_ratios,
        "crc": [asdict(r) for r in crc_results],
        "crc_ratios": {str(k): v for k, v in crc.items()},
        "targets": evaluate_targets(encode_results, enc_ratios, crc),
        "errors": errors,
        "elapsed_s": time.perf_counter() - started,
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.micro",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=None, metavar="N",
                        help=f"records per scenario (default {DEFAULT_RECORDS:,}; "
                             f"{QUICK_RECORDS:,} with --quick)")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, metavar="K",
                        help=f"timed samples, best kept (default {DEFAULT_REPEAT})")
    parser.add_argument("--quick", action="store_true",
                        help="fewer records, shorter samples (whole run well under 20 s)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.records is None:
        args.records = QUICK_RECORDS if args.quick else DEFAULT_RECORDS
    if args.records < 1 or args.repeat < 1:
        parser.error("--records and --repeat must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args.records, args.repeat, args.quick)
    print_report(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
