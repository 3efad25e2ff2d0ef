"""A minimal blocking Kafka client for tests and tools.

One plain socket, one request at a time, no retries. On connect it sends
ApiVersions and picks, for every API kproducer implements, the highest version
both sides support; later requests use those versions unless told otherwise::

    with BlockingClient("127.0.0.1", port) as c:
        c.metadata(["t"])                         # MetadataResponse
        err, base_offset = c.produce("t", 0, batch_bytes)
        pid = c.init_producer_id()                # InitProducerIdResponse
        resp = c.request(MetadataRequest(topics=None), version=1)
        resp = c.request(3, topics=None)          # same, by API key + fields

Every response's correlation id is checked against the request's. Errors:
``ConnectionError`` when the broker closes the socket, ``TimeoutError``
(``socket.timeout``) past ``timeout`` seconds,
:class:`~kproducer.errors.ProtocolError` for a bad frame or response.
"""

from __future__ import annotations

import socket
import struct
from typing import Dict, Iterable, Optional, Set, Tuple

from ..errors import ProtocolError
from ..protocol import messages as m
from ..protocol import versions as v
from ..protocol.errors_table import ErrorCode, raise_for_code

_SIZE = struct.Struct(">i")

CLIENT_SOFTWARE_NAME = "kproducer"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class BlockingClient:
    """Blocking request/response client over one TCP connection.

    ``versions`` maps api_key -> negotiated version; ``broker_versions`` maps
    api_key -> (min, max) as the broker advertised them.
    """

    def __init__(self, host: str, port: int, *, client_id: str = "kproducer-test",
                 timeout: float = 10.0, max_response_size: int = 100 * 1024 * 1024,
                 api_versions_version: Optional[int] = None):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_response_size = max_response_size
        self._next_id = 1
        # Correlation ids of acks=0 produce requests: Kafka sends nothing back,
        # Tansu answers anyway (TANSU.md), so such responses are skipped.
        self._discard: Set[int] = set()
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.api_versions_response = self._negotiate(api_versions_version)
        except BaseException:
            self.close()
            raise
        self.broker_versions: Dict[int, Tuple[int, int]] = self.api_versions_response.version_ranges()
        self.versions: Dict[int, int] = v.pick_versions(self.broker_versions, required=())

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> "BlockingClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- framing ----------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(
                    f"broker {self.host}:{self.port} closed the connection "
                    f"({len(buf)} of {n} bytes received)")
            buf += chunk
        return bytes(buf)

    def send_raw(self, payload: bytes) -> None:
        """Send one request payload (header + body), adding the size prefix."""
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)

    def recv_raw(self) -> bytes:
        """Receive one response frame and return its payload (no size prefix)."""
        (size,) = _SIZE.unpack(self._recv_exact(4))
        if size < 4 or size > self.max_response_size:
            raise ProtocolError(f"bad response frame size {size} from {self.host}:{self.port}")
        return self._recv_exact(size)

    def _recv_for(self, correlation_id: int) -> bytes:
        while True:
            payload = self.recv_raw()
            got = m.peek_correlation_id(payload)
            if got == correlation_id:
                return payload
            if got in self._discard:
                self._discard.discard(got)
                continue
            raise ProtocolError(f"correlation id mismatch: expected {correlation_id}, got {got}")

    def _take_id(self) -> int:
        cid = self._next_id
        self._next_id = (cid + 1) & 0x7FFFFFFF
        return cid

    # -- requests ---------------------------------------------------------------
    def _negotiate(self, version: Optional[int]):
        # Start from the newest version we implement; a broker that does not
        # support it answers UNSUPPORTED_VERSION with its own range (KIP-511).
        version = v.SUPPORTED_VERSIONS[v.API_VERSIONS][1] if version is None else version
        req = m.ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                   client_software_version=CLIENT_SOFTWARE_VERSION)
        resp = self._roundtrip(req, version)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            theirs = {k.api_key: k.max_version for k in resp.api_keys}.get(v.API_VERSIONS, 0)
            resp = self._roundtrip(req, min(theirs, version - 1))
        raise_for_code(resp.error_code, "ApiVersions")
        return resp

    def _roundtrip(self, req, version: int):
        cid = self._take_id()
        self.send_raw(m.encode_request(req, version, cid, self.client_id))
        return m.decode_response(req.API_KEY, version, self._recv_for(cid))

    def version_for(self, api_key: int) -> int:
        try:
            return self.versions[api_key]
        except KeyError:
            raise ProtocolError(
                f"no usable {v.api_name(api_key)} version with this broker "
                f"(broker: {self.broker_versions.get(api_key)}, kproducer: "
                f"{v.SUPPORTED_VERSIONS.get(api_key)})") from None

    def request(self, request, version: Optional[int] = None, **fields):
        """Send a request and return the decoded response.

        ``request`` is a request object (``MetadataRequest(...)``) or an API key,
        in which case ``fields`` are the request's fields. ``version`` defaults
        to the negotiated one.
        """
        if isinstance(request, int):
            request = m.request_class(request)(**fields)
        elif fields:
            raise TypeError("fields are only accepted together with an API key")
        if version is None:
            version = self.version_for(request.API_KEY)
        return self._roundtrip(request, version)

    def metadata(self, topics: Optional[Iterable[str]] = None, *, allow_auto_topic_creation: bool = True,
                 version: Optional[int] = None):
        """Metadata for ``topics`` (``None``: all topics). Returns MetadataResponse.

        ``allow_auto_topic_creation`` exists from v4; older versions leave
        auto-creation to the broker's configuration and ignore the argument.
        """
        version = self.version_for(v.METADATA) if version is None else version
        if topics is None:
            # v0 has no null array: an empty one means "all topics" there.
            req_topics = [] if version == 0 else None
        else:
            req_topics = [m.MetadataRequestTopic(name=t) for t in topics]
        fields = {"topics": req_topics}
        if version >= 4:
            fields["allow_auto_topic_creation"] = allow_auto_topic_creation
        return self.request(m.MetadataRequest(**fields), version)

    def produce(self, topic: str, partition: int, batch, *, acks: int = -1, timeout_ms: int = 30000,
                version: Optional[int] = None, transactional_id: Optional[str] = None) -> Tuple[int, int]:
        """Produce one record batch; return ``(error_code, base_offset)``.

        With ``acks=0`` no response is awaited and ``(0, -1)`` is returned.
        """
        version = self.version_for(v.PRODUCE) if version is None else version
        req = m.ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                               topic_data=[m.TopicProduceData(name=topic, partition_data=[
                                   m.PartitionProduceData(index=partition, records=batch)])])
        cid = self._take_id()
        self.send_raw(m.encode_request(req, version, cid, self.client_id))
        if acks == 0:
            self._discard.add(cid)
            return 0, -1
        resp = m.decode_response(v.PRODUCE, version, self._recv_for(cid))
        for t in resp.responses:
            for p in t.partition_responses:
                if t.name == topic and p.index == partition:
                    return p.error_code, p.base_offset
        raise ProtocolError(f"produce response has no entry for {topic}[{partition}]: {resp!r}")

    def init_producer_id(self, transactional_id: Optional[str] = None, *,
                         transaction_timeout_ms: int = 60000, producer_id: int = -1,
                         producer_epoch: int = -1, version: Optional[int] = None):
        """InitProducerId; returns InitProducerIdResponse (check ``error_code``)."""
        fields = {"transactional_id": transactional_id, "transaction_timeout_ms": transaction_timeout_ms}
        if producer_id != -1 or producer_epoch != -1:
            fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
        return self.request(m.InitProducerIdRequest(**fields), version)

    def create_topics(self, topics: Dict[str, int], *, replication_factor: int = 1,
                      timeout_ms: int = 30000, version: Optional[int] = None):
        """CreateTopics for ``{name: num_partitions}``; returns CreateTopicsResponse."""
        req = m.CreateTopicsRequest(
            topics=[m.CreatableTopic(name=name, num_partitions=n, replication_factor=replication_factor)
                    for name, n in topics.items()],
            timeout_ms=timeout_ms)
        return self.request(req, version)
