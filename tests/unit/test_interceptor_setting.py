"""The ``interceptor.classes`` setting (kproducer.interceptors): the forms it takes, what it
refuses, names that do not import, interceptors instantiated, configured and closed, and
nothing at all (the compiled send path kept) when none is set. The interceptors' contract
against the broker: tests/broker/test_interceptors.py."""

from __future__ import annotations

import sys
import types

import pytest

from kproducer import Producer
from kproducer.config import ProducerConfig
from kproducer.errors import ConfigError
from kproducer.interceptors import ProducerInterceptor

from _interceptor_recorder import Recorder

BS = "127.0.0.1:1"


# -- configuration ---------------------------------------------------------------------------


class Configured(ProducerInterceptor):
    instances: list = []

    def __init__(self):
        self.config = None
        self.closed = False
        Configured.instances.append(self)

    def configure(self, config):
        self.config = config

    def on_send(self, record):
        return record._replace(headers=list(record.headers or []) + [("configured", b"1")])

    def close(self):
        self.closed = True


def test_setting_forms():
    obj = Recorder()
    cfg = ProducerConfig(bootstrap_servers=BS, interceptor_classes=[obj, Configured, "a.b.C"])
    assert cfg.interceptor_classes == (obj, Configured, "a.b.C")
    assert cfg["interceptor.classes"] == cfg.interceptor_classes
    cfg = ProducerConfig({"bootstrap.servers": BS, "interceptor.classes": " a.b.C, d.e.F "})
    assert cfg.interceptor_classes == ("a.b.C", "d.e.F")
    assert ProducerConfig(bootstrap_servers=BS, interceptor_classes=obj).interceptor_classes == (obj,)
    assert ProducerConfig(bootstrap_servers=BS).interceptor_classes is None
    assert ProducerConfig(bootstrap_servers=BS, interceptor_classes=[]).interceptor_classes is None


@pytest.mark.parametrize("bad, words", [
    (object(), "is not an interceptor"),
    ([Recorder(), 5], "5 is not an interceptor"),
    ("not a name!", "is not a 'module.Class' name"),
    ("NoModule", "is not a 'module.Class' name"),
])
def test_setting_refuses_what_is_no_interceptor(bad, words):
    with pytest.raises(ConfigError, match="interceptor.classes") as exc:
        ProducerConfig(bootstrap_servers=BS, interceptor_classes=bad)
    assert words in str(exc.value)


def test_a_name_that_does_not_import_fails_when_the_producer_is_made():
    cfg = ProducerConfig(bootstrap_servers=BS, interceptor_classes="no_such_module_kp.Interceptor")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_kp.Interceptor'"):
        Producer(cfg)


def test_no_interceptor_keeps_the_compiled_send_path():
    p = Producer(bootstrap_servers=BS)
    try:
        assert p._interceptors is None
        assert p._send_path.needs_python is False      # send() never enters Python
    finally:
        p.close(0)
    p = Producer(bootstrap_servers=BS, interceptor_classes=[Recorder()])
    try:
        assert p._send_path.needs_python is True
    finally:
        p.close(0)


def test_classes_and_names_are_instantiated_configured_and_closed(monkeypatch):
    module = types.ModuleType("kp_test_interceptor_module")
    module.Configured = Configured
    monkeypatch.setitem(sys.modules, module.__name__, module)
    Configured.instances.clear()
    passed = Configured()           # an instance the application made: not closed by the producer
    Configured.instances.clear()
    p = Producer(bootstrap_servers=BS, client_id="ic",
                 interceptor_classes=[Configured, "kp_test_interceptor_module.Configured", passed])
    made = list(Configured.instances)
    assert len(made) == 2 and all(ic.config["client.id"] == "ic" for ic in made)
    assert passed.config is None
    p.close(0)
    assert all(ic.closed for ic in made) and not passed.closed
