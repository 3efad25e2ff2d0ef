"""kproducer.testing ships in the wheel: it imports without the packages only some helpers
need, and its TLS helpers name a missing openssl command. The helpers that need an optional
package say which: tests/broker/test_testing_package_names_missing_packages.py."""

from __future__ import annotations

import importlib

import pytest

from _optional_packages import without_optional_packages


def test_the_package_and_its_dependency_free_helpers_import(without_optional_packages):
    testing = without_optional_packages
    assert {"TansuBroker", "FaultProxy", "BlockingClient", "SaslGateway", "free_port"} <= set(testing.__all__)
    for module in ("readback", "txnlog", "spark", "procfs", "heap", "client", "proxy", "sasl_gateway", "broker",
                   "tls"):
        importlib.import_module(f"kproducer.testing.{module}")


def test_the_tls_helpers_import_and_name_a_missing_openssl_command(without_optional_packages, monkeypatch,
                                                                    tmp_path):
    tls = importlib.import_module("kproducer.testing.tls")
    monkeypatch.setenv("PATH", str(tmp_path))          # no openssl command on it
    with pytest.raises(RuntimeError, match=r"openssl command, which is not on PATH: install it"):
        tls.TestPki(tmp_path / "pki")


def test_read_back_assigns_offset_0_not_the_brokers_earliest():
    """messages_to_end starts every partition at offset 0. Tansu answers "earliest" with the
    batch it wrote first, not the lowest offset: after concurrent transactional producers it
    named a later producer's batch (5,000 of 15,000 records skipped in 2 of 15 runs on a
    loaded machine), and a read-back from OFFSET_BEGINNING came up short without an error."""
    from kproducer.testing import readback

    class Recording:
        assigned = None

        def assign(self, parts):
            self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in parts]

        def consume(self, num_messages, timeout):
            raise AssertionError("only the assignment is checked")

    c = Recording()
    with pytest.raises(AssertionError, match="only the assignment"):
        next(readback.messages_to_end(c, "t", [0, 2], deadline=float("inf"), what="x"))
    assert c.assigned == [("t", 0, 0), ("t", 2, 0)]
