"""Declarative message schemas and the one generic codec that walks them.

A message is described once, the way Apache Kafka's
``clients/src/main/resources/common/message/*.json`` specs describe it: an
ordered list of :class:`Field` objects, each with the versions it exists in,
the versions in which it may be null, an optional tag (tagged fields), and for
struct types the nested fields. From that description :class:`Struct` builds

* a plain dataclass (``Struct.cls``) whose attributes are the snake_case field
  names (``ThrottleTimeMs`` -> ``throttle_time_ms``); decoding returns
  instances of it, encoding accepts instances of it, dicts with the same keys,
  or any object with those attributes;
* per-(version, flexible) *plans*: the list of encode/decode steps for that
  version, built once and cached, so the per-request cost is a loop over
  closures rather than a re-interpretation of the schema.

Flexible versions (KIP-482) switch strings, bytes and arrays to their compact
forms and end every struct with a tagged-field section. Unknown tags are
skipped by size, known ones are decoded from a sub-reader bounded by that size
so a lying size cannot make a field read past its own bytes.

Encoding mirrors Kafka's generated code: a field absent from the target version
is dropped silently if it is ``ignorable`` or still has its default value, and
otherwise raises :class:`~kproducer.errors.UnsupportedVersionError` (the caller
asked for something that version cannot express). Tagged fields are written
only when they differ from their default.
"""

from __future__ import annotations

import dataclasses
import re
import struct as _struct
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import ProtocolError, UnsupportedVersionError
from .primitives import NULL_UUID, Reader, Writer

__all__ = ["Versions", "Field", "Struct", "Message", "snake_case", "MISSING"]

MISSING: Any = object()


class Versions:
    """An inclusive version range parsed from Kafka's spec syntax.

    ``"3+"`` (3 and later), ``"1-4"``, ``"5"`` or ``"none"``.
    """

    __slots__ = ("lo", "hi")

    # Versions are int16 on the wire; "3+" means up to the largest one.
    _TOP = 0x7FFF

    def __init__(self, lo: int, hi: int):
        self.lo = lo
        self.hi = hi

    @classmethod
    def parse(cls, spec) -> "Versions":
        if isinstance(spec, Versions):
            return spec
        if spec is None or spec == "none":
            return cls(1, 0)
        spec = str(spec).strip()
        if spec.endswith("+"):
            return cls(int(spec[:-1]), cls._TOP)
        if "-" in spec:
            lo, hi = spec.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(spec), int(spec))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __eq__(self, other) -> bool:
        return isinstance(other, Versions) and (self.lo, self.hi) == (other.lo, other.hi)

    def __hash__(self) -> int:
        return hash((self.lo, self.hi))

    def __repr__(self) -> str:
        if self.empty:
            return "Versions('none')"
        if self.hi == self._TOP:
            return f"Versions('{self.lo}+')"
        return f"Versions('{self.lo}-{self.hi}')"


_SNAKE_1 = re.compile(r"(.)([A-Z][a-z]+)")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``, ``timeoutMs`` -> ``timeout_ms``."""
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()


# Minimum encoded size of each leaf type, used to bound array counts.
_FIXED_SIZE = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8,
               "float64": 8, "bool": 1, "uuid": 16}
_LEAF_KINDS = frozenset(_FIXED_SIZE) | {"string", "bytes", "records"}
_LEAF_DEFAULTS = {"int8": 0, "int16": 0, "uint16": 0, "int32": 0, "int64": 0,
                  "float64": 0.0, "bool": False, "string": "", "bytes": b"",
                  "records": None, "uuid": NULL_UUID}
_PY_TYPES = {"int8": int, "int16": int, "uint16": int, "int32": int, "int64": int,
             "float64": float, "bool": bool, "string": str, "bytes": bytes,
             "records": Any, "uuid": Any}


class Field:
    """One field of a message or struct, as in Kafka's JSON spec.

    ``type`` is a leaf kind (``"int32"``, ``"string"``, ``"records"`` ...),
    ``"[]kind"`` for an array of leaves, or ``"StructName"`` /
    ``"[]StructName"`` together with ``fields=[...]``.
    ``flexible="none"`` pins a field to the non-compact encoding (the request
    header's ClientId, which old brokers must always be able to read).
    """

    __slots__ = ("name", "attr", "type", "versions", "nullable", "tag", "tagged",
                 "default", "ignorable", "flexible_override", "fields", "is_array",
                 "elem", "struct")

    def __init__(self, name: str, type: str, versions="0+", *, nullable=None, tag: Optional[int] = None,
                 tagged=None, default=MISSING, ignorable: bool = False, flexible=None,
                 fields: Optional[List["Field"]] = None):
        self.name = name
        self.attr = snake_case(name)
        self.type = type
        self.versions = Versions.parse(versions)
        self.nullable = Versions.parse(nullable)
        self.tag = tag
        self.tagged = Versions.parse(tagged if tagged is not None else (versions if tag is not None else None))
        self.ignorable = ignorable
        self.flexible_override = Versions.parse(flexible) if flexible is not None else None
        self.is_array = type.startswith("[]")
        self.elem = type[2:] if self.is_array else type
        self.fields = fields
        self.struct: Optional[Struct] = None
        if self.elem in _LEAF_KINDS:
            if fields:
                raise ValueError(f"{name}: leaf type {type} cannot have nested fields")
        elif not fields:
            raise ValueError(f"{name}: struct type {type} needs nested fields")
        if self.elem not in _LEAF_KINDS and not self.is_array and not self.nullable.empty:
            # Nullable inline structs (an int8 presence marker) are not used by
            # any message kproducer speaks; refuse rather than guess.
            raise ValueError(f"{name}: nullable non-array structs are not supported")
        self.default = default

    def resolved_default(self):
        """The value an absent field takes (a fresh object for mutable kinds)."""
        if self.default is not MISSING:
            return self.default
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct.cls()
        return _LEAF_DEFAULTS[self.elem]

    def is_default(self, value) -> bool:
        if self.default is MISSING and self.struct is not None and not self.is_array:
            return value == self.struct.cls()
        return value == self.resolved_default()

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {self.versions!r})"


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class _Plan:
    """The encode/decode steps of one struct at one (version, flexible)."""

    __slots__ = ("regular", "strict_absent", "tagged_enc", "tagged_dec", "min_size", "tag_label")

    def __init__(self):
        self.regular: List[Tuple[str, "Field", Callable, Callable]] = []
        self.strict_absent: List["Field"] = []
        self.tagged_enc: List[Tuple[int, "Field", Callable]] = []
        self.tagged_dec: Dict[int, Tuple[str, Callable]] = {}
        self.min_size = 0
        self.tag_label = ""


class Struct:
    """A named list of fields with a generated dataclass and cached plans."""

    def __init__(self, name: str, fields: List[Field], *, aliases: Optional[Dict[str, str]] = None,
                 extra_fields: Tuple[Tuple[str, type, Any], ...] = (),
                 namespace: Optional[Dict[str, Any]] = None):
        self.name = name
        self.fields: Tuple[Field, ...] = tuple(fields)
        seen_attrs, seen_tags = set(), set()
        for f in self.fields:
            if f.attr in seen_attrs:
                raise ValueError(f"{name}: duplicate field {f.attr}")
            seen_attrs.add(f.attr)
            if f.tag is not None:
                if f.tag in seen_tags:
                    raise ValueError(f"{name}: duplicate tag {f.tag}")
                seen_tags.add(f.tag)
            if f.fields:
                f.struct = Struct(f.elem, f.fields, aliases=_NESTED_ALIASES.get(f.elem))
        self._attrs = frozenset(seen_attrs)
        self.cls = self._make_class(aliases or {}, extra_fields, namespace or {})
        self._plans: Dict[Tuple[int, bool], _Plan] = {}

    # -- class generation -------------------------------------------------
    def _make_class(self, aliases, extra_fields, namespace):
        specs = []
        for f in self.fields:
            hint = List[Any] if f.is_array else (f.struct.cls if f.struct else _PY_TYPES[f.elem])
            if not f.nullable.empty or f.default is None:
                hint = Optional[hint]
            if f.is_array or f.struct is not None and f.default is MISSING:
                specs.append((f.attr, hint, dataclasses.field(default_factory=f.resolved_default)))
            else:
                specs.append((f.attr, hint, dataclasses.field(default=f.resolved_default())))
        for attr, hint, default in extra_fields:
            # Extra attributes (the response correlation id) are not part of
            # the message value: excluded from equality.
            specs.append((attr, hint, dataclasses.field(default=default, compare=False)))
        ns = dict(namespace)
        for alias, target in aliases.items():
            ns[alias] = property(lambda self, _t=target: getattr(self, _t),
                                 doc=f"Alias of ``{target}``, the name other messages use.")
        ns.setdefault("__doc__", f"Kafka ``{self.name}`` (generated from its schema).")
        cls = dataclasses.make_dataclass(self.name, specs, namespace=ns, kw_only=True, slots=True)
        cls.__module__ = "kproducer.protocol.messages"
        cls.__qualname__ = self.name
        return cls

    def nested(self):
        """Yield every nested :class:`Struct`, depth first."""
        for f in self.fields:
            if f.struct is not None:
                yield f.struct
                yield from f.struct.nested()

    # -- plans --------------------------------------------------------------
    def plan(self, version: int, flexible: bool) -> _Plan:
        key = (version, flexible)
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = self._build_plan(version, flexible)
        return p

    def min_size(self, version: int, flexible: bool) -> int:
        return self.plan(version, flexible).min_size

    def _build_plan(self, version: int, flexible: bool) -> _Plan:
        p = _Plan()
        p.tag_label = f"{self.name}._tagged_fields"
        for f in self.fields:
            label = f"{self.name}.{f.name}"
            if version not in f.versions:
                if not f.ignorable:
                    p.strict_absent.append(f)
                continue
            flex = flexible and (f.flexible_override is None or version in f.flexible_override)
            nullable = version in f.nullable
            enc, dec, size = self._field_codec(f, label, version, flex, nullable)
            if f.tag is not None and version in f.tagged:
                if not flexible:
                    raise ValueError(f"{label}: tagged field in a non-flexible version {version}")
                p.tagged_enc.append((f.tag, f, enc))
                p.tagged_dec[f.tag] = (f.attr, dec)
            else:
                p.regular.append((f.attr, f, enc, dec))
                p.min_size += size
        p.tagged_enc.sort(key=lambda t: t[0])
        if flexible:
            p.min_size += 1  # the tagged-field count
        return p

    def _field_codec(self, f: Field, label: str, version: int, flex: bool, nullable: bool):
        """Return ``(encode(w, v), decode(r), min_size)`` for one field."""
        if f.struct is not None:
            sub = f.struct
            def s_enc(w, v, _sub=sub, _label=label):
                if v is None:
                    raise ProtocolError(f"cannot encode {_label}: null is not allowed at version {version}")
                _sub.encode_into(w, v, version, flex)
            def s_dec(r, _sub=sub):
                return _sub.decode_from(r, version, flex)
            elem_enc, elem_dec = s_enc, s_dec
            elem_min = sub.min_size(version, flex)
        else:
            elem_enc, elem_dec, elem_min = _leaf_codec(f.elem, label, version, flex,
                                                        nullable and not f.is_array)
        if not f.is_array:
            return elem_enc, elem_dec, elem_min

        def a_enc(w, v):
            if v is None:
                if not nullable:
                    raise ProtocolError(f"cannot encode {label}: null array is not allowed at version {version}")
                w.array_length(None, flex)
                return
            try:
                n = len(v)
            except TypeError:
                raise ProtocolError(f"cannot encode {label}: expected a list, got {_short(v)}") from None
            w.array_length(n, flex)
            for item in v:
                elem_enc(w, item)

        def a_dec(r):
            n = r.array_length(label, flex, nullable, elem_min)
            if n < 0:
                return None
            return [elem_dec(r) for _ in range(n)]

        return a_enc, a_dec, (1 if flex else 4)

    # -- encode / decode ------------------------------------------------------
    def _getter(self, obj):
        if isinstance(obj, dict):
            unknown = obj.keys() - self._attrs
            if unknown:
                raise ProtocolError(f"{self.name} has no field(s) {sorted(unknown)}")
            return obj.get
        if obj is None:
            raise ProtocolError(f"cannot encode {self.name}: got None")
        return lambda attr, default: getattr(obj, attr, default)

    def encode_into(self, w: Writer, obj, version: int, flexible: bool) -> None:
        """Append ``obj`` encoded at ``version`` to ``w``."""
        p = self._plans.get((version, flexible)) or self.plan(version, flexible)
        if isinstance(obj, self.cls):
            # Fast path for the generated dataclass: every attribute exists.
            for attr, _f, enc, _dec in p.regular:
                enc(w, getattr(obj, attr))
            get = None
        else:
            get = self._getter(obj)
            for attr, f, enc, _dec in p.regular:
                v = get(attr, MISSING)
                enc(w, f.resolved_default() if v is MISSING else v)
        if p.strict_absent:
            for f in p.strict_absent:
                v = getattr(obj, f.attr) if get is None else get(f.attr, MISSING)
                if v is not MISSING and not f.is_default(v):
                    raise UnsupportedVersionError(
                        f"{self.name}.{f.name}={_short(v)} cannot be sent at version {version} "
                        f"(field exists in versions {f.versions!r})")
        if flexible:
            if not p.tagged_enc:
                w.buf.append(0)  # no tagged fields defined at this version
                return
            tagged = []
            for tag, f, enc in p.tagged_enc:
                v = getattr(obj, f.attr) if get is None else get(f.attr, MISSING)
                if v is MISSING or f.is_default(v):
                    continue
                sub = Writer()
                enc(sub, v)
                tagged.append((tag, sub.buf))
            w.uvarint(len(tagged))
            for tag, data in tagged:
                w.uvarint(tag)
                w.uvarint(len(data))
                w.raw(data)

    def decode_from(self, r: Reader, version: int, flexible: bool):
        """Decode one instance of this struct at ``version`` from ``r``."""
        p = self.plan(version, flexible)
        kw = {}
        for attr, _f, _enc, dec in p.regular:
            kw[attr] = dec(r)
        if flexible:
            label = p.tag_label
            tagged_dec = p.tagged_dec
            for _ in range(r.uvarint(label)):
                tag = r.uvarint(label)
                size = r.uvarint(label)
                sub = r.sub(size, label)
                known = tagged_dec.get(tag)
                if known is not None:
                    # A known field is read from its own bounded window; any
                    # bytes it leaves are ignored like an unknown tag's would be.
                    kw[known[0]] = known[1](sub)
        return self.cls(**kw)


# Read-only aliases so callers can use one name for the partition index
# whichever message they hold (Produce calls it Index, Metadata PartitionIndex).
_NESTED_ALIASES: Dict[str, Dict[str, str]] = {
    "PartitionProduceData": {"partition_index": "index"},
    "PartitionProduceResponse": {"partition_index": "index"},
}


def _leaf_codec(kind: str, label: str, version: int, flex: bool, nullable: bool):
    """Encoder, decoder and minimum size for one leaf kind."""
    if kind in ("string",):
        if flex:
            wfn = Writer.compact_nullable_string if nullable else Writer.compact_string
            rfn = Reader.compact_nullable_string if nullable else Reader.compact_string
        else:
            wfn = Writer.nullable_string if nullable else Writer.string
            rfn = Reader.nullable_string if nullable else Reader.string
        size = 1 if flex else 2
    elif kind in ("bytes", "records"):
        if flex:
            wfn = Writer.compact_nullable_bytes if nullable else Writer.compact_bytes
            rfn = Reader.compact_nullable_bytes if nullable else Reader.compact_bytes
        else:
            wfn = Writer.nullable_bytes if nullable else Writer.bytes
            rfn = Reader.nullable_bytes if nullable else Reader.bytes
        size = 1 if flex else 4
    else:
        wfn = getattr(Writer, kind)
        rfn = getattr(Reader, kind)
        size = _FIXED_SIZE[kind]

    def enc(w, v):
        if v is None and not nullable:
            raise ProtocolError(f"cannot encode {label}: null is not allowed at version {version}")
        try:
            wfn(w, v)
        except (ProtocolError, _struct.error, TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"cannot encode {label}={_short(v)} at version {version}: {exc}") from None

    def dec(r):
        return rfn(r, label)

    return enc, dec, size


class Message(Struct):
    """A top-level request or response body with its API key and versions."""

    def __init__(self, name: str, *, api_key: int, kind: str, valid: str, flexible: str,
                 fields: List[Field], extra_fields=(), namespace=None):
        self.api_key = api_key
        self.kind = kind
        self.valid = Versions.parse(valid)
        self.flexible = Versions.parse(flexible)
        ns = dict(namespace or {})
        ns["API_KEY"] = api_key
        super().__init__(name, fields, extra_fields=extra_fields, namespace=ns)
        self.cls.SCHEMA = self

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def __repr__(self) -> str:
        return (f"<Message {self.name} api_key={self.api_key} valid={self.valid!r} "
                f"flexible={self.flexible!r}>")

    def check_version(self, version: int) -> None:
        if version not in self.valid:
            raise UnsupportedVersionError(
                f"{self.name} version {version} is not implemented "
                f"(kproducer implements {self.valid.lo}-{self.valid.hi})")

    def encode_body(self, obj, version: int) -> bytes:
        """Encode just the body (no header) at ``version``."""
        self.check_version(version)
        w = Writer()
        self.encode_into(w, obj, version, self.is_flexible(version))
        return w.getvalue()

    def decode_body(self, data, version: int, *, strict: bool = True):
        """Decode a body (no header) at ``version``; ``strict`` rejects trailing bytes."""
        self.check_version(version)
        r = data if isinstance(data, Reader) else Reader(data)
        obj = self.decode_from(r, version, self.is_flexible(version))
        if strict:
            r.expect_end(f"{self.name} v{version}")
        return obj
