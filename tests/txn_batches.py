"""Transactional batches and COMMIT/ABORT control batches in Kafka's format, built for tests:
a control batch is a transactional batch with the control bit (0x20) and one record, key
int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value int16 version 0 + int32 coordinator
epoch (Kafka's EndTransactionMarker). A node takes markers only through its WriteTxnMarkers
(write_marker); control_batch's bytes serve the decoder's tests."""

from __future__ import annotations

import struct

from seglog.records import RecordBatchBuilder
from seglog.records.batch import ATTRIBUTES_OFFSET, CONTROL_MASK, CRC_OFFSET, compute_crc
from seglog.v1 import storage_pb2

ABORT, COMMIT = 0, 1


def transactional_batch(
    producer_id: int, values: list[bytes], *, epoch: int = 0, sequence: int = 0
) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    for value in values:
        builder.append(None, value, None)
    return builder.build()


def control_batch(producer_id: int, kind: int, *, epoch: int = 0, coordinator_epoch: int = 0):
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, is_transactional=True
    )
    builder.append(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, coordinator_epoch), None)
    batch = bytearray(builder.build())
    (attributes,) = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, attributes | CONTROL_MASK)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def write_marker(
    stub, topic: str, partition: int, producer_id: int, kind: int, *, epoch: int = 0
) -> None:
    """Have the partition's leader write a COMMIT/ABORT marker (its WriteTxnMarkers, as a
    transaction coordinator does: a node refuses control batches appended by clients)."""
    marker = storage_pb2.TxnMarker(
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=kind == COMMIT,
        coordinator_epoch=0,
        partitions=[storage_pb2.HostedPartitionRef(topic=topic, partition=partition)],
    )
    request = storage_pb2.WriteTxnMarkersRequest(markers=[marker], timeout_ms=10_000)
    (result,) = stub.WriteTxnMarkers(request, timeout=15).markers
    assert [p.error for p in result.partitions] == [0], result
