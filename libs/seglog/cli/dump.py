"""`seglog dump FILE...`: Kafka's DumpLogSegments for seglog's (and Kafka's) files.

- `.log`: one line per batch (base/last offset, position, size, record count, codec, CRC
  valid, timestamps); `--records` adds each record; legacy entries are shown as well.
- `.index` / `.timeindex`: one line per entry; `--verify` checks each entry against the
  `.log` beside it (the offset exists at that position / the timestamp is that offset's
  batch max so far).
- `--json`: one JSON object per line instead of text.
- `--topic T [--partition N] [--data-dir data]`: every file of those partitions found under a
  cluster's data dir (each node's directory under it too), instead of naming files.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..errors import SeglogError
from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, RecordBatch
from ..records.legacy import read_message, records_of
from ..storage import log_files

_LENGTH = struct.Struct(">i")


def _log_entries(path: Path, with_records: bool) -> Iterator[dict[str, Any]]:
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        if len(data) - pos <= MAGIC_OFFSET:
            yield {"error": "truncated entry", "position": pos, "bytes": len(data) - pos}
            return
        (length,) = _LENGTH.unpack_from(data, pos + 8)
        size = length + LOG_OVERHEAD
        if length < 0 or pos + size > len(data):
            yield {
                "error": "truncated batch",
                "position": pos,
                "declared_size": size,
                "available": len(data) - pos,
            }
            return
        magic = data[pos + MAGIC_OFFSET]
        try:
            yield _describe(data, pos, magic, with_records)
        except SeglogError as exc:
            yield {"error": str(exc), "position": pos}
            return
        pos += size


def _describe(data: bytes, pos: int, magic: int, with_records: bool) -> dict[str, Any]:
    if magic == MAGIC_V2 and len(data) - pos >= HEADER_BYTES:
        batch = RecordBatch(data, pos)
        h = batch.header
        entry: dict[str, Any] = {
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "position": pos,
            "size": h.size_in_bytes,
            "count": h.record_count,
            "magic": h.magic,
            "codec": h.compression.name.lower(),
            "crc": h.crc,
            "crc_valid": batch.is_valid(),
            "base_timestamp": h.base_timestamp,
            "max_timestamp": h.max_timestamp,
            "timestamp_type": "LogAppendTime" if h.timestamp_type else "CreateTime",
            "producer_id": h.producer_id,
            "partition_leader_epoch": h.partition_leader_epoch,
            "is_transactional": h.is_transactional,
            "is_control": h.is_control,
        }
        records = batch.records() if with_records and entry["crc_valid"] else None
    else:
        message = read_message(data, pos)
        entry = {
            "offset": message.offset,
            "position": pos,
            "size": message.size_in_bytes,
            "magic": message.magic,
            "codec": message.codec,
            "crc_valid": True,
            "timestamp": message.timestamp_ms,
        }
        records = records_of(message) if with_records else None
    if records is not None:
        entry["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "key": _text(r.key),
                "value": _text(r.value),
                "headers": [[k, _text(v)] for k, v in r.headers],
            }
            for r in records
        ]
    return entry


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", errors="backslashreplace")


def _index_entries(path: Path, verify: bool) -> Iterator[dict[str, Any]]:
    base = log_files.offset_from_name(path.name)
    time_index = path.name.endswith(log_files.TIME_INDEX_SUFFIX)
    entry_struct = struct.Struct(">qi" if time_index else ">ii")
    data = path.read_bytes()
    log_data = None
    if verify:
        log_path = log_files.log_path(path.parent, base)
        log_data = log_path.read_bytes() if log_path.exists() else b""
    batches = _batch_table(log_data) if log_data is not None else []
    for n in range(len(data) // entry_struct.size):
        a, b = entry_struct.unpack_from(data, n * entry_struct.size)
        # An active segment's index is preallocated with zeros (and a crash leaves it so):
        # the slots past the real entries are all-zero. No real entry is: the first batch of
        # a segment is never indexed (an entry needs index.interval.bytes before it), so no
        # offset entry points at position 0, and a time entry has a timestamp. As
        # DumpLogSegments, also stop at a later entry back at the segment's base offset.
        if not (a or b) or (n > 0 and (b if time_index else a) == 0):
            return
        if time_index:
            entry: dict[str, Any] = {"timestamp": a, "offset": base + b}
        else:
            entry = {"offset": base + a, "position": b}
        if verify:
            entry["valid"], entry["problem"] = _verify(entry, batches, time_index)
        yield entry
    if len(data) % entry_struct.size:
        yield {"error": f"{len(data) % entry_struct.size} trailing bytes after the last entry"}


def _batch_table(log_data: bytes) -> list[tuple[int, int, int, int]]:
    """(position, base offset, last offset, running max timestamp) per v2 batch."""
    out = []
    pos = 0
    running_max = -1
    while pos + HEADER_BYTES <= len(log_data):
        batch = RecordBatch(log_data, pos)
        h = batch.header
        running_max = max(running_max, h.max_timestamp)
        out.append((pos, h.base_offset, h.last_offset, running_max))
        pos += h.size_in_bytes
    return out


def _verify(
    entry: dict[str, Any], batches: list[tuple[int, int, int, int]], time_index: bool
) -> tuple[bool, str | None]:
    if time_index:
        for _, base, last, running_max in batches:
            if base <= entry["offset"] <= last:
                if running_max < entry["timestamp"]:
                    return (
                        False,
                        f"log's max timestamp up to offset {entry['offset']} is {running_max}",
                    )
                return True, None
        return False, f"offset {entry['offset']} not found in the log"
    for pos, base, last, _ in batches:
        if pos == entry["position"]:
            if base <= entry["offset"] <= last:
                return True, None
            return False, f"batch at position {pos} holds offsets {base}..{last}"
    return False, f"no batch starts at position {entry['position']}"


def dump(paths: list[str], *, records: bool, verify: bool, as_json: bool, out: TextIO) -> int:
    failures = 0
    for name in paths:
        path = Path(name)
        if not as_json:
            out.write(f"Dumping {path}\n")
        if path.name.endswith(log_files.LOG_SUFFIX):
            entries = _log_entries(path, records)
        elif path.name.endswith((log_files.INDEX_SUFFIX, log_files.TIME_INDEX_SUFFIX)):
            entries = _index_entries(path, verify)
        else:
            out.write(json.dumps({"file": str(path), "error": "unknown file type"}) + "\n")
            failures += 1
            continue
        for entry in entries:
            if "error" in entry or entry.get("crc_valid") is False or entry.get("valid") is False:
                failures += 1
            if as_json:
                out.write(json.dumps({"file": str(path), **entry}) + "\n")
            else:
                out.write(_as_text(entry) + "\n")
    return 1 if failures else 0


def _as_text(entry: dict[str, Any]) -> str:
    records = entry.pop("records", None)
    line = " ".join(f"{k}: {v}" for k, v in entry.items())
    if records:
        line += "".join("\n| " + " ".join(f"{k}: {v}" for k, v in r.items()) for r in records)
    return line


def partition_files(data_dir: Path, topic: str, partition: int | None, verify: bool) -> list[str]:
    """The `.log` files (and with `verify` the indexes) of a topic's partitions anywhere under
    a cluster's data dir (`make run` keeps each node's under `node-N/`), in offset order."""
    log_files.check_topic_name(topic)
    pattern = f"{topic}-{'*' if partition is None else partition}"
    suffixes = [log_files.LOG_SUFFIX]
    if verify:
        suffixes += [log_files.INDEX_SUFFIX, log_files.TIME_INDEX_SUFFIX]
    found = []
    for directory in sorted({*data_dir.glob(pattern), *data_dir.glob(f"*/{pattern}")}):
        try:
            if log_files.parse_topic_partition(directory)[0] != topic:
                continue
        except ValueError:
            continue
        found += sorted(str(f) for f in directory.iterdir() if f.name.endswith(tuple(suffixes)))
    return found


def main_dump(args: Any) -> int:
    files = list(args.files)
    if args.topic is not None:
        files += partition_files(Path(args.data_dir), args.topic, args.partition, args.verify)
        if not files:
            where = f"{args.topic}-{'*' if args.partition is None else args.partition}"
            print(f"seglog: no {where} partition directory under {args.data_dir}", file=sys.stderr)
            return 1
    elif not files:
        print("seglog: dump needs FILE arguments or --topic", file=sys.stderr)
        return 2
    return dump(files, records=args.records, verify=args.verify, as_json=args.json, out=sys.stdout)
