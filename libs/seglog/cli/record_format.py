"""How `seglog consume` prints a record: the default tab-separated line, a kcat-style format
string, or a JSON line.

- Default: `partition<TAB>offset<TAB>timestamp<TAB>key<TAB>value[<TAB>headers]`. Keys, values
  and headers are UTF-8 text (invalid bytes as `\\xNN`) with backslash, tab, newline and
  carriage return escaped (`\\\\`, `\\t`, `\\n`, `\\r`), so a value holding a tab or a newline
  never adds a column or a line; a null is `null`. Headers (`--print-headers`) are `k=v`
  pairs joined by `,`, with `,` and `=` escaped as well.
- `--format`: kcat's `-f` tokens `%t` topic, `%p` partition, `%o` offset, `%T` timestamp,
  `%k` key, `%s` value, `%K` / `%S` their lengths (-1 for null), `%h` headers, `%%`; the
  escapes `\\n`, `\\t`, `\\r`, `\\\\` in the format itself. Fields are printed as text, not
  escaped: the format decides the separators.
- `--property print.key=true` (print.timestamp, print.partition, print.offset, print.headers,
  print.value, key.separator, headers.separator, line.separator, null.literal): the layout
  of kafka-console-consumer's DefaultMessageFormatter, fields as text, not escaped:
  `CreateTime:TS`, `Partition:P`, `Offset:O`, headers `k:v` (`NO_HEADERS` when none), key,
  value, joined by key.separator (a tab) and ended by line.separator (a newline).
- `--json`: one object per record with topic, partition, offset, timestamp, timestamp_type,
  key, value and headers; bytes are UTF-8 text when they decode, else base64, and each of
  them says which in `key_encoding` / `value_encoding` (`"utf-8"` or `"base64"`; null for
  null).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from ..records.record import LOG_APPEND_TIME, Record

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_HEADER_ESCAPES = str.maketrans(
    {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", ",": "\\,", "=": "\\="}
)
_TOKEN = re.compile(r"%[tpoTksKSh%]|\\[ntr\\]")
_FORMAT_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\"}


_UNDECODED = re.compile("[\udc80-\udcff]")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _escaped(data: bytes | None, table: dict[int, str] = _ESCAPES) -> str:
    """Text with the table's characters escaped, then bytes that are not UTF-8 as `\\xNN`
    (after, so that their backslash is not escaped again)."""
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="surrogateescape").translate(table)
    return _UNDECODED.sub(lambda m: f"\\x{ord(m.group(0)) - 0xDC00:02x}", text)


def _headers_text(record: Record) -> str:
    return ",".join(
        f"{key.translate(_HEADER_ESCAPES)}={_escaped(value, _HEADER_ESCAPES)}"
        for key, value in record.headers
    )


def default_line(record: Record, *, print_headers: bool) -> str:
    fields = [
        str(record.partition),
        str(record.offset),
        str(record.timestamp_ms),
        _escaped(record.key),
        _escaped(record.value),
    ]
    if print_headers:
        fields.append(_headers_text(record))
    return "\t".join(fields)


def format_line(record: Record, fmt: str) -> str:
    def token(match: re.Match[str]) -> str:
        name = match.group(0)
        if name in _FORMAT_ESCAPES:
            return _FORMAT_ESCAPES[name]
        producers: dict[str, Callable[[], str]] = {
            "%t": lambda: record.topic,
            "%p": lambda: str(record.partition),
            "%o": lambda: str(record.offset),
            "%T": lambda: str(record.timestamp_ms),
            "%k": lambda: _text(record.key),
            "%s": lambda: _text(record.value),
            "%K": lambda: str(-1 if record.key is None else len(record.key)),
            "%S": lambda: str(-1 if record.value is None else len(record.value)),
            "%h": lambda: _headers_text(record),
            "%%": lambda: "%",
        }
        return producers[name]()

    return _TOKEN.sub(token, fmt)


# kafka-console-consumer's formatter properties (everything else in --property configures
# the consumer), with their defaults.
KAFKA_FORMATTER_DEFAULTS = {
    "print.timestamp": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.key": "false",
    "print.value": "true",
    "key.separator": "\t",
    "headers.separator": ",",
    "line.separator": "\n",
    "null.literal": "null",
}


def kafka_line(record: Record, properties: dict[str, str]) -> str:
    """The record as kafka-console-consumer prints it under these formatter properties."""
    settings = {**KAFKA_FORMATTER_DEFAULTS, **properties}

    def enabled(name: str) -> bool:
        return settings[name].strip().lower() == "true"

    def text(data: bytes | None) -> str:
        return settings["null.literal"] if data is None else _text(data)

    fields = []
    if enabled("print.timestamp"):
        kind = "LogAppendTime" if record.timestamp_type == LOG_APPEND_TIME else "CreateTime"
        fields.append(f"{kind}:{record.timestamp_ms}")
    if enabled("print.partition"):
        fields.append(f"Partition:{record.partition}")
    if enabled("print.offset"):
        fields.append(f"Offset:{record.offset}")
    if enabled("print.headers"):
        headers = settings["headers.separator"].join(
            f"{name}:{text(value)}" for name, value in record.headers
        )
        fields.append(headers or "NO_HEADERS")
    if enabled("print.key"):
        fields.append(text(record.key))
    if enabled("print.value"):
        fields.append(text(record.value))
    return settings["key.separator"].join(fields) + settings["line.separator"]


def _encoded(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def json_line(record: Record) -> str:
    key, key_encoding = _encoded(record.key)
    value, value_encoding = _encoded(record.value)
    headers: list[dict[str, Any]] = []
    for name, raw in record.headers:
        text, encoding = _encoded(raw)
        headers.append({"key": name, "value": text, "value_encoding": encoding})
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "timestamp_type": "LogAppendTime"
            if record.timestamp_type == LOG_APPEND_TIME
            else "CreateTime",
            "key": key,
            "key_encoding": key_encoding,
            "value": value,
            "value_encoding": value_encoding,
            "headers": headers,
        },
        ensure_ascii=False,
    )
