"""Hypothesis strategies that build any Kafka request, at any version, from its schema (the
JSON schemas Kafka ships, as kafka-python's generated message classes hold them), with the
values handlers get wrong: nulls in every string, bytes and array field whether the schema
allows them there or not, empty and long arrays, huge and odd strings, names that exist in
the cluster under test, record sets that are valid, cut short or with a byte changed,
negative and extreme integers. Used by the Kafka fuzz test (tests/integration/
test_kafka_fuzz.py), as tests/proto_strategies.py is by the gRPC one; the strategies know
nothing about any one API.

A request class by api key comes from the codec's own classes (`request_classes`), so the
test covers whatever the listener advertises without a list of its own."""

from __future__ import annotations

import importlib
import math
import pkgutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kafka.protocol
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage

# Below the non-compact string's 32,767-byte limit (a longer one cannot be encoded at all),
# above a topic name's 249 characters.
HUGE_STRING_CHARS = 20_000
HUGE_BYTES = 20_000
# Arrays are short (handlers are per element: more elements find nothing fewer do), with
# one longer length now and then.
MAX_ELEMENTS = 3
LONG_ARRAY = 40
# Deeper structs are rare in Kafka's schemas and cost time.
MAX_DEPTH = 4
# Fields whose value is a wait: drawn short, so that an example answers in well under a
# second (a request that asks the broker to wait is answered after the wait, as asked; a
# long one tells nothing a short one does not, and would hold the test). Timeouts of 0 and
# -1 are in the range.
WAIT_FIELDS = {
    "max_wait_ms",
    "timeout_ms",
    "rebalance_timeout_ms",
    "session_timeout_ms",
    "throttle_time_ms",
}
MAX_WAIT_MS = 300

_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class Known:
    """Values of the cluster under test: names that exist, record sets that are well formed,
    and per-field overrides (a field's snake_case name -> the values to draw from)."""

    names: Sequence[str] = ()
    record_sets: Sequence[bytes] = ()
    fields: dict[str, Sequence[Any]] | None = None


def request_classes() -> dict[int, Any]:
    """Every request class of the codec, by api key."""
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".schemas" in module.name or module.name.endswith("generate_stubs"):
            continue
        importlib.import_module(module.name)
    classes: dict[int, Any] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        if cls.is_request():
            classes.setdefault(int(cls.API_KEY), cls)
    return classes


def _integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    edges = sorted({low, high, 0, 1, max(low, -1), min(high, 2**31 - 1), min(high, 2**15)})
    # Small values as often as edges and the rest: partition indexes, generations, counts.
    return st.one_of(
        st.sampled_from(edges),
        st.integers(max(low, -1), min(high, 3)),
        st.integers(max(low, -5), min(high, 100)),
    )


def _strings(known: Known) -> st.SearchStrategy[str]:
    odd = [
        "",
        "x" * HUGE_STRING_CHARS,
        "t" * 250,
        "\x00",
        "../../../etc/passwd",
        ".",
        "__consumer_offsets",
        "é☃\U0001f600\u202e",
        "*",
    ]
    if not known.names:
        return st.one_of(st.sampled_from(odd), st.text(max_size=12))
    return st.one_of(st.sampled_from(known.names), st.sampled_from(odd), st.text(max_size=12))


@st.composite
def _damaged(draw: st.DrawFn, whole: st.SearchStrategy[bytes]) -> bytes:
    """A valid record set cut short, with one byte changed, or twice over."""
    record_set = draw(whole)
    kind = draw(st.sampled_from(["cut", "changed", "doubled"]))
    if kind == "doubled":
        return record_set * 2
    position = draw(st.integers(0, len(record_set) - 1))
    if kind == "cut":
        return record_set[:position]
    changed = bytearray(record_set)
    changed[position] = draw(st.integers(0, 255))
    return bytes(changed)


def _bytes(known: Known, records: bool) -> st.SearchStrategy[bytes]:
    odd = st.one_of(
        st.sampled_from([b"", b"\x00" * HUGE_BYTES, b"\xff" * 61]), st.binary(max_size=64)
    )
    if not records or not known.record_sets:
        return odd
    whole = st.sampled_from(known.record_sets)
    return st.one_of(whole, whole, _damaged(whole), odd)


def _simple(type_str: str, name: str, known: Known) -> st.SearchStrategy[Any]:
    overrides = known.fields or {}
    if name in overrides:
        return st.sampled_from(list(overrides[name]))
    if type_str in _RANGES:
        if name in WAIT_FIELDS:
            return st.integers(-1, MAX_WAIT_MS)
        return _integers(_RANGES[type_str])
    if type_str == "bool":
        return st.booleans()
    if type_str == "float64":
        return st.one_of(st.sampled_from([math.nan, math.inf, -0.0]), st.floats())
    if type_str == "uuid":
        return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
    if type_str == "string":
        return _strings(known)
    if type_str in ("bytes", "records"):
        return _bytes(known, records=type_str == "records")
    raise ValueError(f"no strategy for field type {type_str!r}")


@dataclass(frozen=True)
class _Drawing:
    """What one request's fields are drawn with: the cluster's values, and whether a null may
    go where the schema has none (else only where it allows one)."""

    known: Known
    nulls_anywhere: bool


def _field(field: Any, version: int, drawing: _Drawing, depth: int) -> st.SearchStrategy[Any]:
    """A value for `field` at `version`: None now and then where the schema allows one, and,
    when the request draws nulls anywhere, in any field that has a null on the wire (strings,
    bytes, arrays)."""
    known = drawing.known
    if field.is_struct_array():
        element = _struct(field.array_of, version, drawing, depth + 1)
        value: st.SearchStrategy[Any] = _arrays(element, depth)
    elif field.is_struct():
        value = _struct(field, version, drawing, depth + 1)
    elif field.is_array():
        value = _arrays(_simple(field.array_of.type_str, field.name, known), depth)
    else:
        value = _simple(field.type_str, field.name, known)
    nullable = field.nullable_for_version_q(version)
    has_null = field.is_array() or field.is_struct_array() or field.type_str in ("string", "bytes")
    if nullable or (has_null and drawing.nulls_anywhere):
        # Mostly a value (one in eight null): a request with nulls in many fields stops at the
        # first, before its handler.
        return st.one_of(*[value] * 7, st.none())
    return value


def _arrays(element: st.SearchStrategy[Any], depth: int) -> st.SearchStrategy[list[Any]]:
    if depth >= MAX_DEPTH:
        return st.just([])
    return st.one_of(
        st.lists(element, max_size=MAX_ELEMENTS),
        element.map(lambda one: [one] * LONG_ARRAY),
    )


def _struct(
    struct: Any, version: int, drawing: _Drawing, depth: int, data_class: Any = None
) -> st.SearchStrategy[Any]:
    fields = [f for f in struct.fields.values() if f.for_version_q(version)]
    untagged = {
        f.name: _field(f, version, drawing, depth) for f in fields if not f.tagged_field_q(version)
    }
    tagged = {
        f.name: _field(f, version, drawing, depth) for f in fields if f.tagged_field_q(version)
    }

    def build(values: dict[str, Any]) -> Any:
        return (data_class or struct.data_class)(version=version, **values)

    return st.fixed_dictionaries(untagged, optional=tagged).map(build)


@st.composite
def requests(draw: st.DrawFn, request_class: Any, version: int, known: Known) -> Any:
    """A request of `request_class` at `version`, every field drawn from its schema; one in
    four with nulls anywhere (the listener's refusal), the others schema-valid (the handlers'
    answers)."""
    drawing = _Drawing(known, nulls_anywhere=draw(st.sampled_from([False, False, False, True])))
    return draw(_struct(request_class._struct, version, drawing, 0, data_class=request_class))
