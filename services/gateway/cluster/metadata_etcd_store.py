"""The metadata log in etcd, shared by several gateways. Keys under the prefix:

    metadata/head                          {"seq": n}: the last batch's sequence number; its
                                           mod revision is that batch's offset
    metadata/log/<seq>/<chunk>             one batch, in chunks; their mod revision (the
                                           transaction's) is the batch's offset
    metadata/snapshot/<seq>/<chunk>        the whole image after batch <seq>, in chunks

(<seq> and <chunk> zero-padded to 20 and 4 digits, so keys sort in order.) A chunk's value
is base64 of zlib-compressed JSON: {"chunks": k, "records": [...]} (a snapshot's adds
"offset"). A chunk holds at most CHUNK_BYTES of records before compression, so no value grows
with the cluster: a 10,000-partition creation is several chunks in ONE transaction (etcd's
default --max-txn-ops is 128, its --max-request-bytes 1.5 MiB).

Writers serialise on the head key: a batch is stored only if the head's mod revision is
still the offset the writer's image is at (StaleRegistryError otherwise), and with a
controller's fence only if its election's key is still the one etcd holds
(ControllerFencedError). Other gateways watch the prefix and apply each batch as a delta.

History stays bounded: once enough records were written after the last snapshot, a writer
stores a new one (only if the head has not moved, in the same transaction deleting older
snapshots and every batch it covers), so etcd's compaction reclaims the rest.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

from ..coordination.election import Fence
from ..coordination.etcd_keys import Changes, KeyValue
from ..coordination.etcd_keyspace import EtcdKeyspace
from .metadata_records import MetadataRecordError, Record, check_records, from_document
from .registry_store import (
    DEFAULT_SNAPSHOT_INTERVAL_RECORDS,
    Batch,
    ControllerFencedError,
    StaleRegistryError,
)

logger = logging.getLogger(__name__)

ROOT = "metadata/"
HEAD = ROOT + "head"
LOG = ROOT + "log/"
SNAPSHOT = ROOT + "snapshot/"
LEGACY_KEY = "registry"  # the former whole document
CHUNK_BYTES = 128 * 1024
MAX_CHUNKS = 120  # room left under etcd's 128 operations per transaction


def _seq_name(seq: int) -> str:
    return f"{seq:020d}"


def _encode_chunk(body: dict[str, Any]) -> str:
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return base64.b64encode(zlib.compress(raw)).decode()


def _decode_chunk(value: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(value)))
    return body


def _chunks(records: list[Record]) -> list[list[Record]]:
    chunks: list[list[Record]] = [[]]
    size = 0
    for record in records:
        length = len(json.dumps(record, separators=(",", ":")))
        if chunks[-1] and size + length > CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(record)
        size += length
    if len(chunks) > MAX_CHUNKS:
        raise MetadataRecordError(
            f"a change of {len(records)} records needs {len(chunks)} chunks, over {MAX_CHUNKS}"
        )
    return chunks


def _parse_key(key: str) -> tuple[int, int]:
    """(seq, chunk) of a log or snapshot key."""
    *_, seq, chunk = key.split("/")
    return int(seq), int(chunk)


def _assemble(kvs: list[KeyValue]) -> list[Record]:
    """One batch's (or snapshot's) records from all its chunks, in order."""
    bodies = sorted(
        ((_parse_key(kv.key)[1], _decode_chunk(kv.value)) for kv in kvs), key=lambda b: b[0]
    )
    if not bodies or len(bodies) != bodies[0][1]["chunks"]:
        raise MetadataRecordError(f"a metadata batch with {len(bodies)} of its chunks")
    return check_records([r for _, body in bodies for r in body["records"]])


class EtcdMetadataStore:
    def __init__(
        self,
        keyspace: EtcdKeyspace,
        *,
        snapshot_interval_records: int = DEFAULT_SNAPSHOT_INTERVAL_RECORDS,
    ) -> None:
        self.keyspace = keyspace
        self.snapshot_interval_records = snapshot_interval_records
        self.seq = 0  # of the last batch seen (loaded, written or watched)
        self.offset = 0  # of the last batch loaded or written by this store
        self.records_since_snapshot = 0
        self.last_write_bytes = 0

    def load(self) -> list[Batch]:
        _, kvs = self.keyspace.range(ROOT, prefix=True)
        if not kvs:
            legacy = self.keyspace.get(LEGACY_KEY)
            if legacy is not None and legacy.value:
                self._migrate(legacy.value)
                _, kvs = self.keyspace.range(ROOT, prefix=True)
        return self._decode({kv.key: kv for kv in kvs})

    def _migrate(self, document: str) -> None:
        """The former whole document becomes the first batch (another gateway migrating
        at the same moment makes this one stale: its batch is the same)."""
        try:
            self.append(from_document(json.loads(document)), 0)
        except StaleRegistryError:
            pass

    def _decode(self, kvs: dict[str, KeyValue]) -> list[Batch]:
        head = kvs.get(HEAD)
        snapshots: dict[int, list[KeyValue]] = {}
        logs: dict[int, list[KeyValue]] = {}
        for key, kv in kvs.items():
            if kv is None:
                continue
            if key.startswith(SNAPSHOT):
                snapshots.setdefault(_parse_key(key)[0], []).append(kv)
            elif key.startswith(LOG):
                logs.setdefault(_parse_key(key)[0], []).append(kv)
        batches: list[Batch] = []
        snapshot_seq = 0
        if snapshots:
            snapshot_seq = max(snapshots)
            chunks = snapshots[snapshot_seq]
            records = _assemble(chunks)
            batches.append((int(_decode_chunk(chunks[0].value)["offset"]), records))
        self.records_since_snapshot = 0
        for seq in sorted(logs):
            if seq <= snapshot_seq:
                continue
            records = _assemble(logs[seq])
            batches.append((logs[seq][0].mod_revision, records))
            self.records_since_snapshot += len(records)
        self.seq = int(json.loads(head.value)["seq"]) if head is not None else 0
        self.offset = batches[-1][0] if batches else 0
        if head is not None and (not batches or batches[-1][0] != head.mod_revision):
            raise MetadataRecordError(
                f"the metadata head is at revision {head.mod_revision}, its batches are not"
            )
        return batches

    def append(self, records: list[Record], after_offset: int, fence: Fence | None = None) -> int:
        check_records(records)
        seq = self.seq + 1
        chunks = _chunks(records)
        values = [_encode_chunk({"chunks": len(chunks), "records": chunk}) for chunk in chunks]
        ops = [self.keyspace.put_op(HEAD, json.dumps({"seq": seq}))]
        ops += [
            self.keyspace.put_op(f"{LOG}{_seq_name(seq)}/{c:04d}", value)
            for c, value in enumerate(values)
        ]
        compare = [self.keyspace.compare_modified(HEAD, after_offset)]
        failure: list[dict[str, Any]] = []
        if fence is not None:
            compare.append(self.keyspace.compare_created(fence.key, fence.create_revision))
            failure.append(self.keyspace.range_op(fence.key))
        answer = self.keyspace.txn(compare, ops, failure)
        if not answer.get("succeeded"):
            if fence is not None:
                current = self.keyspace.txn_ranges(answer)
                if not current or current[0].create_revision != fence.create_revision:
                    raise ControllerFencedError(
                        f"this gateway's controller election (revision "
                        f"{fence.create_revision}) is over: another gateway is controller; "
                        "its decision was not stored"
                    )
            raise StaleRegistryError(
                f"the metadata log moved past offset {after_offset}: another gateway wrote "
                "it; this change was not stored"
            )
        self.seq = seq
        self.offset = int(answer["header"]["revision"])
        self.records_since_snapshot += len(records)
        self.last_write_bytes = sum(len(v) for v in values)
        return self.offset

    def wants_snapshot(self) -> bool:
        return self.records_since_snapshot >= self.snapshot_interval_records

    def snapshot(self, offset: int, records: list[Record]) -> None:
        seq = self.seq
        chunks = _chunks(records)
        ops = [
            self.keyspace.put_op(
                f"{SNAPSHOT}{_seq_name(seq)}/{c:04d}",
                _encode_chunk({"chunks": len(chunks), "offset": offset, "records": chunk}),
            )
            for c, chunk in enumerate(chunks)
        ]
        ops.append(self.keyspace.delete_range_op(SNAPSHOT, SNAPSHOT + _seq_name(seq)))
        ops.append(self.keyspace.delete_range_op(LOG, LOG + _seq_name(seq + 1)))
        answer = self.keyspace.txn([self.keyspace.compare_modified(HEAD, offset)], ops)
        if answer.get("succeeded"):
            self.records_since_snapshot = 0
        # else another gateway wrote meanwhile: a later change takes the snapshot

    def watch(
        self,
        on_batch: Callable[[int, list[Record]], None],
        on_reset: Callable[[list[Batch]], None],
    ) -> None:
        def changed(changes: Changes, full: bool) -> None:
            if full:
                on_reset(self._decode({k: v for k, v in changes.items() if v is not None}))
                return
            by_offset: dict[int, list[KeyValue]] = {}
            for key, kv in changes.items():
                if kv is None:
                    continue
                if key.startswith(LOG):
                    by_offset.setdefault(kv.mod_revision, []).append(kv)
                elif key.startswith(SNAPSHOT):
                    self.records_since_snapshot = 0
                elif key == HEAD:
                    self.seq = max(self.seq, int(json.loads(kv.value)["seq"]))
            for offset in sorted(by_offset):
                records = _assemble(by_offset[offset])
                if offset > self.offset:  # not this store's own write
                    self.records_since_snapshot += len(records)
                on_batch(offset, records)

        self.keyspace.subscribe(ROOT, changed)
