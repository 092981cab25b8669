"""A request body decoded whole against its schema, as Kafka's generated readers decode it:
what they refuse is a malformed request (Kafka's InvalidRequestException: the broker closes
the connection, no answer), never something a handler meets.

kafka-python's compiled decoders are lenient where Kafka's are strict, in two ways:
- A length that runs past the end of the frame is not noticed: a `bytes`, `records` or
  `string` field is sliced from the frame's buffer, and a slice past its end is just shorter.
  A Produce whose records field says 2^31-1 bytes while the frame ends after one batch was
  read as that batch, and written. Kafka's reader fails on it (a slice past the buffer's
  limit); here the position the decoder reached is checked against the body's length.
- A null (length -1) is taken in any string, bytes or array field, and in a struct array,
  whether the schema says it may be null at that version or not. Kafka's reader refuses it
  ("non-nullable field X was serialized as null"); here every field of the decoded request is
  checked against the schema's `nullableVersions`, so no handler meets a None it was promised
  would not come (a null topic array, a null group id).

Bytes after the body are left alone, as Kafka's reader leaves them.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple


class MalformedRequest(ValueError):
    """A body Kafka's reader would refuse; the listener closes the connection."""


class _Check(NamedTuple):
    """One field to look at in a struct of one version: its attribute name, whether it may be
    None, and the struct of its elements (or of itself) when it has one."""

    name: str
    schema_name: str
    nullable: bool
    inner: Any  # StructField or None


# (id of a struct, version) -> its checks. The structs are the message classes' own, alive for
# the process; their fields define __eq__ without __hash__, hence their ids.
_CHECKS: dict[tuple[int, int], tuple[_Check, ...]] = {}


def _checks(struct: Any, version: int) -> tuple[_Check, ...]:
    """The fields of `struct` at `version` that can be None or hold structs (ints, booleans and
    the like are decoded as values: nothing to check). Worked out once per struct and version:
    a request's check walks only these."""
    key = (id(struct), version)
    known = _CHECKS.get(key)
    if known is None:
        known = _CHECKS[key] = _fields_to_check(struct, version)
    return known


def _fields_to_check(struct: Any, version: int) -> tuple[_Check, ...]:
    checks = []
    for field in struct.fields.values() if isinstance(struct.fields, dict) else struct.fields:
        if not field.for_version_q(version):
            continue
        is_struct = field.is_struct() or field.is_struct_array()
        if not (is_struct or field.is_array() or _may_be_null(field)):
            continue
        # An absent tagged field takes its default, None for a struct: only an untagged
        # field, or a tagged one whose default is not null, must never be None.
        tagged = field.tagged_field_q(version)
        nullable = field.nullable_for_version_q(version) or (
            tagged and (field.is_struct() or field.default is None)
        )
        inner = field.array_of if field.is_struct_array() else (field if is_struct else None)
        checks.append(_Check(field.name, field._name, bool(nullable), inner))
    return tuple(checks)


def _may_be_null(field: Any) -> bool:
    """Strings, bytes and records: what a length of -1 decodes to None."""
    return field.type_str in ("string", "bytes", "records")


def check_nulls(struct: Any, value: Any, version: int, path: str) -> None:
    """MalformedRequest naming the first field that is None where the schema says it is not
    nullable at `version`."""
    for check in _checks(struct, version):
        field_value = getattr(value, check.name, None)
        if field_value is None:
            if not check.nullable:
                where = f"{path}.{check.schema_name}" if path else check.schema_name
                raise MalformedRequest(f"non-nullable field {where} was serialized as null")
            continue
        if check.inner is None:
            continue
        # The path is made once per field, not per element: a Produce of 1,000 partitions
        # walks 1,000 of them.
        where = f"{path}.{check.schema_name}" if path else check.schema_name
        if isinstance(field_value, list):
            for element in field_value:
                check_nulls(check.inner, element, version, where)
        else:
            check_nulls(check.inner, field_value, version, where)


def decode_request(request_class: Any, body: memoryview, version: int) -> Any:
    """The request of `request_class` at `version` from `body`, read as Kafka reads it;
    MalformedRequest (or the codec's own error) when Kafka's reader would refuse it."""
    flexible = request_class.flexible_version_q(version)
    data_class = request_class[None]
    decoder = request_class._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=data_class
    )
    try:
        request, end = decoder(body, 0)
    except (struct.error, IndexError):
        raise MalformedRequest(f"the {len(body)}-byte body ends inside a field") from None
    except UnicodeDecodeError as exc:
        # Its repr holds the whole string: up to 32 KiB of a stranger's bytes in a log line.
        raise MalformedRequest(
            f"a string is not UTF-8 ({exc.reason} at its byte {exc.start})"
        ) from None
    if end > len(body):
        raise MalformedRequest(
            f"a length in the request runs {end - len(body)} bytes past the end of its "
            f"{len(body)}-byte body"
        )
    check_nulls(request_class._struct, request, version, "")
    return request
