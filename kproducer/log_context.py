"""Per-producer logging (Java's ``LogContext``): every module logs on its own logger
(``kproducer.network``, ``kproducer.sender``, ...), and what a producer logs starts with
``[Producer clientId=<client.id>] `` (with ``, transactionalId=<id>`` for a transactional
producer), the prefix Java's producer puts on its messages, so that the lines of several
producers in one process can be told apart.

With the ``logger`` setting (confluent-kafka's), a producer's records go to that
:class:`logging.Logger` (or :class:`logging.LoggerAdapter`) instead of the module loggers,
with the same messages.

A :class:`ProducerLog` checks the level before anything else: a disabled level costs one
``isEnabledFor`` call, and messages are %-formatted by :mod:`logging` only when a handler
emits them.
"""

from __future__ import annotations

import logging
from typing import Optional, Union

AnyLogger = Union[logging.Logger, logging.LoggerAdapter]


class ProducerLog(logging.LoggerAdapter):
    """A logger for one producer: ``logger`` (a module's, or the user's ``logger``) with the
    producer's prefix in front of every message."""

    def __init__(self, logger: AnyLogger, prefix: str):
        super().__init__(logger, None)
        self.prefix = prefix
        # With arguments, logging %-formats the whole message: a '%' of the client id must
        # reach it doubled, and must not be doubled in a message without arguments.
        self._prefix_formatted = prefix.replace("%", "%%")

    def log(self, level, msg, *args, **kwargs):
        logger = self.logger
        if logger.isEnabledFor(level):
            # The caller's frame for the record (funcName, lineno): one above this one
            # (logging skips its own frames, not this module's).
            kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
            logger.log(level, (self._prefix_formatted if args else self.prefix) + str(msg), *args,
                       **kwargs)

    def process(self, msg, kwargs):   # (log() above prefixes; process is not used)
        return msg, kwargs


class LogContext:
    """The prefix and the destination of one producer's log records: ``logger(name)``
    gives the :class:`ProducerLog` of module ``name`` (``"kproducer.network"``)."""

    def __init__(self, client_id: str, transactional_id: Optional[str] = None,
                 logger: Optional[AnyLogger] = None):
        self.client_id = client_id
        self.prefix = (f"[Producer clientId={client_id}, transactionalId={transactional_id}] "
                       if transactional_id is not None else f"[Producer clientId={client_id}] ")
        self.user_logger = logger

    def logger(self, name: str) -> ProducerLog:
        target = self.user_logger if self.user_logger is not None else logging.getLogger(name)
        return ProducerLog(target, self.prefix)
