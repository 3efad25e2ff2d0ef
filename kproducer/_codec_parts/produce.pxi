# The Produce request and response, v3-v11 (csrc/kp_produce.c): the protocol pair of the
# producer's steady state. kproducer.protocol.produce is the public face (the wire layout is
# in csrc/kp_produce.h); the generic, schema-driven codec of kproducer.protocol is the
# reference that tests/unit/test_produce_fast.py holds these two against.

cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)

from kproducer.errors import ProtocolDecodeError, ProtocolError, UnsupportedVersionError

PRODUCE_MIN_VERSION = KP_PRODUCE_MIN_VERSION
PRODUCE_MAX_VERSION = KP_PRODUCE_MAX_VERSION
PRODUCE_FIRST_FLEXIBLE_VERSION = KP_PRODUCE_FIRST_FLEXIBLE_VERSION

cdef enum:
    # Results decoded into the stack before a response needs a heap array (a producer's
    # request has one entry per partition of one broker).
    PRODUCE_STACK_RESULTS = 32
    # NodeEndpoints read into the stack before they need a heap array (a response names
    # only the new leaders of the partitions it refuses: a few brokers at most).
    PRODUCE_STACK_ENDPOINTS = 8


cdef int _produce_version(object version, str what) except -1:
    if not isinstance(version, int) or not KP_PRODUCE_MIN_VERSION <= version <= KP_PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError(
            f"{what} version {version} is not implemented "
            f"(kproducer implements {KP_PRODUCE_MIN_VERSION}-{KP_PRODUCE_MAX_VERSION})")
    return version


cdef int64_t _wire_int(object value, str field, int64_t lo, int64_t hi) except? -1:
    if not isinstance(value, int):
        raise ProtocolError(f"cannot encode {field}={value!r}: expected an int")
    if not lo <= value <= hi:
        raise ProtocolError(f"cannot encode {field}={value}: out of range {lo}..{hi}")
    return value


cdef const uint8_t *_wire_text(object value, str field, size_t *n) except NULL:
    """The UTF-8 bytes of a str (CPython keeps them with the str: no copy, no allocation
    after the first call)."""
    cdef Py_ssize_t size
    if not PyUnicode_Check(value):
        raise ProtocolError(f"cannot encode {field}={value!r}: expected a str")
    try:
        p = PyUnicode_AsUTF8AndSize(value, &size)
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"cannot encode {field}: {exc.reason}") from None
    if size > KP_PRODUCE_MAX_STRING:
        raise ProtocolError(f"cannot encode {field}: {size} bytes is longer than {KP_PRODUCE_MAX_STRING}")
    n[0] = <size_t>size
    return <const uint8_t *>p


cdef tuple _pair(object item, str what):
    try:
        a, b = item
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {what}: expected a pair, got {item!r} ({exc})") from None
    return (a, b)


def encode_produce_request(version, correlation_id, client_id, acks, timeout_ms, topics,
                           transactional_id=None):
    """The complete Produce request frame (size prefix + header + body) at ``version``.

    ``topics`` is ``[(topic, [(partition, records), ...]), ...]``; records (bytes, or any
    object with a contiguous buffer, such as a ProducerBatch; or None) are written in the
    given order, each copied once. Raises :class:`~kproducer.errors.UnsupportedVersionError`
    outside v3-v11 and :class:`~kproducer.errors.ProtocolError` naming the field for a value
    that cannot be encoded.
    """
    cdef kp_produce_request req
    cdef kp_produce_topic *ctopics = NULL
    cdef kp_produce_partition *cparts = NULL
    cdef Py_buffer *views = NULL
    cdef Py_ssize_t n_views = 0, n_parts = 0, t, i, k = 0
    cdef size_t size = 0, written = 0
    cdef uint8_t *out
    cdef kp_status st
    req.version = _produce_version(version, "ProduceRequest")
    req.correlation_id = <int32_t>_wire_int(correlation_id, "RequestHeader.CorrelationId", INT32_MIN, INT32_MAX)
    req.acks = <int16_t>_wire_int(acks, "ProduceRequest.Acks", INT16_MIN, INT16_MAX)
    req.timeout_ms = <int32_t>_wire_int(timeout_ms, "ProduceRequest.TimeoutMs", INT32_MIN, INT32_MAX)
    req.client_id = NULL
    req.client_id_len = 0
    if client_id is not None:
        req.client_id = _wire_text(client_id, "RequestHeader.ClientId", &req.client_id_len)
    req.transactional_id = NULL
    req.transactional_id_len = 0
    if transactional_id is not None:
        req.transactional_id = _wire_text(transactional_id, "ProduceRequest.TransactionalId",
                                          &req.transactional_id_len)
    # The shape first (names and partition lists held here, so the pointers stay valid).
    entries = [_pair(entry, "TopicProduceData") for entry in topics]
    part_lists = []
    for name, partitions in entries:
        try:
            plist = [_pair(p, "PartitionProduceData") for p in partitions]
        except TypeError:
            raise ProtocolError(f"cannot encode TopicProduceData.PartitionData of {name!r}: "
                                f"{type(partitions).__name__} is not a sequence") from None
        part_lists.append(plist)
        n_parts += len(plist)
    try:
        ctopics = <kp_produce_topic *>calloc(max(1, len(entries)), sizeof(kp_produce_topic))
        cparts = <kp_produce_partition *>calloc(max(1, n_parts), sizeof(kp_produce_partition))
        views = <Py_buffer *>calloc(max(1, n_parts), sizeof(Py_buffer))
        if ctopics == NULL or cparts == NULL or views == NULL:
            raise MemoryError("ProduceRequest: out of memory")
        for t in range(len(entries)):
            ctopics[t].name = _wire_text(entries[t][0], "TopicProduceData.Name", &ctopics[t].name_len)
            plist = part_lists[t]
            ctopics[t].partitions = &cparts[k]
            ctopics[t].n_partitions = len(plist)
            for index, records in plist:
                cparts[k].index = <int32_t>_wire_int(index, "PartitionProduceData.Index", INT32_MIN, INT32_MAX)
                if records is None:
                    cparts[k].records = NULL
                    cparts[k].records_len = -1
                else:
                    if PyUnicode_Check(records):
                        raise ProtocolError("cannot encode PartitionProduceData.Records: "
                                            "a str is not bytes")
                    try:
                        PyObject_GetBuffer(records, &views[n_views], PyBUF_SIMPLE)
                    except (TypeError, BufferError) as exc:
                        raise ProtocolError(f"cannot encode PartitionProduceData.Records: "
                                            f"{type(records).__name__} has no contiguous buffer "
                                            f"({exc})") from None
                    n_views += 1
                    cparts[k].records = <const uint8_t *>views[n_views - 1].buf
                    cparts[k].records_len = views[n_views - 1].len
                k += 1
        req.topics = ctopics
        req.n_topics = len(entries)
        st = kp_produce_request_size(&req, &size)
        if st != KP_OK:
            raise_kp_error(st, NULL, f"cannot encode ProduceRequest v{version}", ProtocolError, 0,
                           None, "a topic name over 32767 bytes or a request over the int32 size field"
                           if st == KP_ERR_OVERFLOW else None)
        frame = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>size)
        # With the GIL: microseconds of copying, where a release could hand the GIL to a
        # waiting thread and leave this one (a step) to queue for it again.
        out = <uint8_t *>PyBytes_AS_STRING(frame)
        st = kp_produce_request_write(&req, out, size, &written)
        if st != KP_OK:
            raise_kp_error(st, NULL, f"ProduceRequest v{version}", ProtocolError)
        return frame
    finally:
        for i in range(n_views):
            PyBuffer_Release(&views[i])
        free(views)
        free(cparts)
        free(ctopics)


def decode_produce_response(version, payload):
    """Decode a Produce response payload (header + body, no size prefix).

    Returns ``(correlation_id, results, throttle_time_ms, trailing, leaders, endpoints)``:

    - ``results`` is ``[(topic, partition, error_code, base_offset, log_append_time_ms,
      error_message), ...]`` in wire order (``error_message`` is None before v8);
    - ``throttle_time_ms`` is the response's ThrottleTimeMs (KIP-219: from v6 the broker
      answers first, and the client must send that connection nothing for that long);
    - ``trailing`` counts the bytes after the last field this version defines, which are
      ignored, as Java and librdkafka ignore them;
    - ``leaders`` is ``{(topic, partition): (leader_id, leader_epoch)}`` of the partitions
      whose CurrentLeader (v10+, KIP-951: sent with NOT_LEADER_OR_FOLLOWER or
      FENCED_LEADER_EPOCH) names a leader (``leader_id >= 0``), or **None** when none does
      (every response before v10, and nearly every one after: no dict is built for them);
    - ``endpoints`` is ``{node_id: (host, port)}`` of the response's NodeEndpoints (v10+,
      KIP-951: where those leaders listen), or **None** when it carries none.

    A repeated partition or node id keeps its last entry. Everything read is validated;
    truncated or malformed input raises :class:`~kproducer.errors.ProtocolDecodeError`
    with the Kafka field (``.field``) and the byte offset where the failing read started
    (``.offset``); a CurrentLeader or NodeEndpoints whose tag size disagrees with its
    content is one ("PartitionProduceResponse.CurrentLeader",
    "ProduceResponse.NodeEndpoints").
    """
    cdef int ver = _produce_version(version, "ProduceResponse")
    cdef Py_buffer view
    cdef kp_produce_result stack[PRODUCE_STACK_RESULTS]
    cdef kp_produce_result *res = stack
    cdef kp_produce_result *r
    cdef kp_produce_endpoint ep_stack[PRODUCE_STACK_ENDPOINTS]
    cdef kp_produce_endpoint *eps = ep_stack
    cdef kp_produce_endpoint *e
    cdef kp_produce_endpoints where
    cdef size_t cap, n = 0, i, topic_off = <size_t>-1, trailing = 0, n_eps = 0
    cdef int32_t correlation_id = 0, throttle_time_ms = 0
    cdef kp_error err
    cdef kp_status st
    cdef const char *p
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        cap = <size_t>view.len // KP_PRODUCE_MIN_PARTITION_BYTES + 1
        if cap > PRODUCE_STACK_RESULTS:
            res = <kp_produce_result *>malloc(cap * sizeof(kp_produce_result))
            if res == NULL:
                raise MemoryError(f"ProduceResponse v{ver}: out of memory")
        st = kp_produce_response_read(<const uint8_t *>view.buf, <size_t>view.len, ver,
                                      &correlation_id, res, cap, &n, &throttle_time_ms,
                                      &trailing, &where, &err)
        if st != KP_OK:
            raise_kp_error(st, &err, f"ProduceResponse v{ver}", ProtocolDecodeError)
        p = <const char *>view.buf
        out = []
        topic = None
        leaders = None
        for i in range(n):
            r = &res[i]
            if r.topic_off != topic_off:        # one str per topic, not per partition
                topic_off = r.topic_off
                topic = PyUnicode_DecodeUTF8(p + r.topic_off, <Py_ssize_t>r.topic_len, NULL)
            message = (None if r.message_len < 0 else
                       PyUnicode_DecodeUTF8(p + r.message_off, <Py_ssize_t>r.message_len, NULL))
            out.append((topic, r.partition, r.error_code, r.base_offset, r.log_append_time_ms, message))
            if r.current_leader_id >= 0:
                if leaders is None:
                    leaders = {}
                leaders[(topic, r.partition)] = (r.current_leader_id, r.current_leader_epoch)
        endpoints = None
        if where.count:
            if where.count > PRODUCE_STACK_ENDPOINTS:
                eps = <kp_produce_endpoint *>malloc(where.count * sizeof(kp_produce_endpoint))
                if eps == NULL:
                    raise MemoryError(f"ProduceResponse v{ver}: out of memory")
            st = kp_produce_endpoints_read(<const uint8_t *>view.buf, <size_t>view.len, &where,
                                           eps, where.count, &n_eps, &err)
            if st != KP_OK:
                raise_kp_error(st, &err, f"ProduceResponse v{ver}", ProtocolDecodeError)
            endpoints = {}
            for i in range(n_eps):
                e = &eps[i]
                endpoints[e.node_id] = (PyUnicode_DecodeUTF8(p + e.host_off, <Py_ssize_t>e.host_len, NULL),
                                        e.port)
        return correlation_id, out, throttle_time_ms, trailing, leaders, endpoints
    finally:
        PyBuffer_Release(&view)
        if res != stack:
            free(res)
        if eps != ep_stack:
            free(eps)
