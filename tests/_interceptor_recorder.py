"""An interceptor that records every call (tests/broker/test_interceptors.py,
tests/unit/test_interceptor_setting.py)."""

from __future__ import annotations

import threading


class Recorder:
    """Records every call, with the thread it ran on."""

    def __init__(self, name="r", log=None):
        self.name = name
        self.log = log if log is not None else []

    def on_send(self, record):
        self.log.append((self.name, "send", record, threading.get_ident()))
        return record

    def on_acknowledgement(self, metadata, error):
        self.log.append((self.name, "ack", (metadata, error), threading.get_ident()))
