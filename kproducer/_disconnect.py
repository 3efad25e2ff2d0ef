"""Why the selector dropped a connection: the kind, for code to decide on, and the text, for people.

:meth:`kproducer._net.Selector.poll` reports each lost connection as a :class:`Disconnect`
``(id, kind, detail)``. The kind is derived in one place from the C selector's status code
and whether the connection had been established (``disconnect_info`` in
kproducer/_codec.pyx, next to the status-to-exception mapping), so
:class:`~kproducer.network.NetworkClient` picks its exception class from the kind and never
reads the text. ``detail`` is the complete human-readable reason
(``"connect failed: Connection refused (ECONNREFUSED)"``), meant for messages and logs.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["Disconnect", "DisconnectKind"]


class DisconnectKind(enum.IntEnum):
    """What ended a connection (csrc/kp_selector.h, "Disconnect reasons")."""

    CONNECT_FAILED = 1          # KP_ERR_SYS before the connection was established (refused, unreachable)
    IO_ERROR = 2                # KP_ERR_SYS on an established connection (reset, broken pipe)
    PEER_CLOSED = 3             # KP_ERR_EOF at a frame boundary
    PEER_CLOSED_MID_FRAME = 4   # KP_ERR_EOF with part of a frame received: the frame is lost
    FRAME_SIZE = 5              # KP_ERR_FRAME_SIZE: a negative or oversized frame; the stream is lost
    TLS_HANDSHAKE = 6           # KP_ERR_TLS before the handshake completed (certificate, host name, alert)
    TLS = 7                     # KP_ERR_TLS afterwards (an alert, a bad record)
    NOMEM = 8                   # KP_ERR_NOMEM: no memory for a received frame
    OTHER = 9                   # a status the selector does not document for disconnects

    @property
    def is_tls(self) -> bool:
        """The failure was in TLS itself (certificate verification, an alert, a protocol
        error), not in the network underneath."""
        return self is DisconnectKind.TLS_HANDSHAKE or self is DisconnectKind.TLS


class Disconnect(NamedTuple):
    """One lost connection reported by :meth:`~kproducer._net.Selector.poll`; its id is free
    again."""

    id: int
    kind: DisconnectKind
    detail: str
