"""Hypothesis strategies that build any protobuf request from its descriptor, with the values
handlers get wrong: empty, huge and odd Unicode strings (path separators, NUL), names that
exist in the cluster under test, negative and extreme integers, NaN, enum numbers no .proto
defines, repeated fields of odd sizes (none, one, hundreds of the same element), nested
messages a few levels deep. Used by the fuzz test over every RPC (tests/integration/
test_rpc_fuzz.py); the strategies know nothing about any one service."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

# A string large enough to hit length limits (topic names are ≤ 249 characters) yet small
# enough that a few of them stay far below the servers' request size cap.
HUGE_STRING_CHARS = 20_000
HUGE_BYTES = 20_000
# Deeper messages add nothing the handlers have not seen at these depths, and cost time.
MAX_DEPTH = 3
# One repeated field per request may be long: the same element many times.
LONG_REPEAT = 300

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UINT32 = (0, 2**32 - 1)
_UINT64 = (0, 2**64 - 1)

_T = FieldDescriptor


@dataclass(frozen=True)
class Known:
    """Values of the cluster under test: names that exist, payloads that are well formed."""

    names: Sequence[str] = ()
    payloads: Sequence[bytes] = ()


NOTHING_KNOWN = Known()


def _integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    edges = sorted({low, high, 0, 1, max(low, -1), min(high, 2**31), min(high, 2**31 - 1)})
    return st.one_of(st.sampled_from(edges), st.integers(max(low, -100), min(high, 10_000)))


def _strings(known: Sequence[str]) -> st.SearchStrategy[str]:
    odd = [
        "",
        "x" * HUGE_STRING_CHARS,
        "t" * 250,
        "\x00",
        "../../../etc/passwd",
        "a/b",
        ".",
        "..",
        "__consumer_offsets",
        "é☃\U0001f600\u202e",
        " ",
        "\ud7ff\ufffd",
    ]
    return st.one_of(st.sampled_from([*known, *odd]), st.text(max_size=16))


def _bytes(known: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    odd = st.one_of(
        st.sampled_from([b"", b"\x00" * HUGE_BYTES, b"\xff" * 61]), st.binary(max_size=96)
    )
    if not known:
        return odd
    # Well-formed payloads (record batches) whole, cut short, or with one byte changed: what
    # passes a first look and breaks a deeper one.
    return st.one_of(odd, st.sampled_from(known), _damaged(st.sampled_from(known)))


@st.composite
def _damaged(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> bytes:
    payload = bytearray(draw(payloads))
    position = draw(st.integers(0, max(len(payload) - 1, 0)))
    if draw(st.booleans()) or not payload:
        return bytes(payload[:position])
    payload[position] = draw(st.integers(0, 255))
    return bytes(payload)


def _scalar(field: FieldDescriptor, known: Known) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == _T.TYPE_STRING:
        return _strings(known.names)
    if kind == _T.TYPE_BYTES:
        return _bytes(known.payloads)
    if kind == _T.TYPE_BOOL:
        return st.booleans()
    if kind in (_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32):
        return _integers(_INT32)
    if kind in (_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64):
        return _integers(_INT64)
    if kind in (_T.TYPE_UINT32, _T.TYPE_FIXED32):
        return _integers(_UINT32)
    if kind in (_T.TYPE_UINT64, _T.TYPE_FIXED64):
        return _integers(_UINT64)
    if kind in (_T.TYPE_FLOAT, _T.TYPE_DOUBLE):
        return st.one_of(
            st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf, 1e300]),
            st.floats(allow_nan=False, allow_infinity=False, width=32),
        )
    if kind == _T.TYPE_ENUM:
        numbers = [value.number for value in field.enum_type.values]
        # proto3 enums are open: a number no .proto names arrives as that number.
        return st.one_of(st.sampled_from(numbers), st.integers(-3, 1000))
    raise TypeError(f"no strategy for field type {kind} ({field.full_name})")


def _repeat_count(depth: int) -> st.SearchStrategy[int]:
    counts = [0, 1, 2, 3, 17]
    if depth == 0:
        counts.append(LONG_REPEAT)
    return st.sampled_from(counts)


@st.composite
def messages(draw: st.DrawFn, descriptor: Descriptor, known: Known = NOTHING_KNOWN, depth: int = 0):
    """A message of `descriptor`'s type, each field set or not, with odd values; what is
    `known` (names of topics and groups that exist, valid payloads) makes some requests
    reach real state."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        is_message = field.type == _T.TYPE_MESSAGE
        if is_message and depth >= MAX_DEPTH:
            continue
        if not draw(st.booleans()):
            continue
        target = getattr(message, field.name)
        if field.is_repeated:
            if is_message and field.message_type.GetOptions().map_entry:
                _fill_map(draw, target, field.message_type, known, depth)
                continue
            count = draw(_repeat_count(depth))
            if count == 0:
                continue
            # Beyond a few, the same element repeated: long lists without drawing each.
            distinct = min(count, 3)
            elements = [draw(_element(field, known, depth)) for _ in range(distinct)] * -(
                -count // distinct
            )
            for element in elements[:count]:
                if is_message:
                    target.add().CopyFrom(element)
                else:
                    target.append(element)
        elif is_message:
            target.CopyFrom(draw(messages(field.message_type, known, depth + 1)))
            if not field.message_type.fields:
                # An empty message (a presence marker) is set only by touching it.
                target.SetInParent()
        else:
            setattr(message, field.name, draw(_scalar(field, known)))
    return message


def _element(field: FieldDescriptor, known: Known, depth: int) -> st.SearchStrategy:
    if field.type == _T.TYPE_MESSAGE:
        return messages(field.message_type, known, depth + 1)
    return _scalar(field, known)


def _fill_map(draw: st.DrawFn, target: Any, entry: Descriptor, known: Known, depth: int) -> None:
    key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
    for _ in range(draw(st.sampled_from([0, 1, 3]))):
        key = draw(_scalar(key_field, known))
        if value_field.type == _T.TYPE_MESSAGE:
            target[key].CopyFrom(draw(messages(value_field.message_type, known, depth + 1)))
        else:
            target[key] = draw(_scalar(value_field, known))
