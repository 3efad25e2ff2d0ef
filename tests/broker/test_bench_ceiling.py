"""The broker's ceiling (bench/ceiling.py) run against the broker: requests encoded before the
clock, accepted by the broker and read back whole by confluent-kafka; the broker's refusal
of a sequence is an error that names the partition, a lost connection one that says so.
The plan and the report: tests/unit/test_bench_ceiling_plan_and_report.py."""

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)   # bench/ lives in the checkout, it is not an installed package

from bench import ceiling
from bench.verify import check_topic
from kproducer.codec import encode_batch
from kproducer.protocol.messages import ProduceResponse
from kproducer.protocol.versions import INIT_PRODUCER_ID, PRODUCE


def _spec(broker, topic, n, **kw):
    spec = {"client": ceiling.CLIENT, "bootstrap": broker.bootstrap, "topic": topic,
            "records": n, "value_size": 100, "keyed": True, "acks": "1", "idempotence": False,
            "compression": "none", "compression_level": None, "linger_ms": 5,
            "batch_size": 1_000_000, "commit_every": 0, "own_defaults": False, "partitions": 4}
    spec.update(kw)
    return spec


def _run(spec):
    return subprocess.run([sys.executable, "-m", "bench.ceiling", json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("case", [
    {"own_defaults": True},                                     # acks=all, idempotent, 256 KiB
    {"value_size": 1024, "acks": "all", "idempotence": True},
    {"keyed": False, "batch_size": 50_000}])
def test_the_runs_are_taken_and_read_back_whole(broker, case):
    n = 20_000
    topic = f"ceiling-{len(case)}-{case.get('value_size', 100)}-{case.get('keyed', True)}"
    broker.create_topic(topic, 4)
    proc = _run(_spec(broker, topic, n, **case))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["seconds"] > 0 and out["client_failed"] == 0 and out["requests"] > 1
    assert out["settings"]["idempotence"] == (case.get("own_defaults") or case.get("idempotence", False))
    check = check_topic(broker.bootstrap, topic, n)
    assert check["ok"], check["error"]


def test_sequences_are_the_broker_s_to_check(broker):
    """The idempotent runs above were checked: the broker refuses a batch whose sequence
    leaves a gap, and the ceiling names the partition and the error."""
    broker.create_topic("ceiling-seq", 1)
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        versions = ceiling.negotiate(sock)
        pid, epoch = ceiling.init_producer_id(sock, versions[INIT_PRODUCER_ID])
        version = versions[PRODUCE]

        def produce(cid, seq):
            batch = encode_batch([(b"k", b"v")], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq)
            return ceiling._call(sock, ceiling.produce_request("ceiling-seq", -1, [(0, batch)]),
                                 ProduceResponse, version, cid)

        ceiling.check_produce_response(produce(1, 0))
        with pytest.raises(ceiling.CeilingError,
                           match=r"partition 0: OUT_OF_ORDER_SEQUENCE_NUMBER \(error code 45\)"):
            ceiling.check_produce_response(produce(2, 5))


def test_a_broker_that_hangs_up_is_a_clear_error():
    """Tansu takes Produce requests for partitions it does not have (shared/TANSU.md), so the
    refusal is tested above, in-process; here the command's own exit on a connection that
    closes before any answer."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def hang_up():
        conn, _ = srv.accept()
        size = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
        assert len(conn.recv(size, socket.MSG_WAITALL)) == size     # read: a FIN, not a reset
        conn.close()

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    host, port = srv.getsockname()

    class Addr:
        bootstrap = f"{host}:{port}"
    proc = _run(_spec(Addr, "t", 100))
    t.join(10)
    srv.close()
    assert proc.returncode == 1
    assert proc.stderr.strip() == "broker ceiling: the broker closed the connection"
