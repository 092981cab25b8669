"""`__transaction_state` records in Kafka's formats (TransactionLogKey v0, TransactionLogValue
v0 as written and v1, flexible with tagged fields, as Kafka 4.x writes under
transaction.version 2), checked against bytes laid out by hand from Kafka's JSON schemas, and
the partition of a transactional id by Java's String.hashCode."""

import struct

import pytest

from seglog.errors import CorruptRecordError
from services.gateway.transactions.log_formats import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)
from services.gateway.transactions.state import TransactionMetadata, TxnState


def test_the_key_is_version_0_and_the_id_as_a_string():
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert decode_key(encode_key("ünïcode")) == "ünïcode"
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x01\x00\x01x")  # a key version Kafka never wrote


def test_a_v0_value_is_laid_out_as_kafka_s_schema_says():
    value = TxnLogValue(
        producer_id=1001,
        producer_epoch=3,
        timeout_ms=60_000,
        status=TxnState.ONGOING,
        partitions=frozenset({("b", 1), ("a", 2), ("b", 0)}),
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    expected = (
        struct.pack(">hqhib", 0, 1001, 3, 60_000, 1)
        + struct.pack(">i", 2)  # two topics, by name, partitions in order
        + b"\x00\x01a"
        + struct.pack(">ii", 1, 2)
        + b"\x00\x01b"
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_empty_writes_null_partitions_as_kafka_does():
    metadata = TransactionMetadata("t", 5, 0, 1000)
    encoded = encode_value(metadata.log_value())
    assert encoded[2 + 8 + 2 + 4 + 1 :][:4] == b"\xff\xff\xff\xff"
    assert decode_value(encoded).partitions == frozenset()


def _uvarint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_flexible_v1_value_with_tagged_fields_is_read():
    body = (
        struct.pack(">hqhib", 1, 42, 7, 30_000, 2)
        + _uvarint(1 + 1)  # compact array: one topic
        + _uvarint(1 + 3)
        + b"out"
        + _uvarint(1 + 2)
        + struct.pack(">ii", 0, 4)
        + _uvarint(0)  # the topic's tagged fields
        + struct.pack(">qq", 99, 11)
        + _uvarint(3)  # tagged: 0 previous producer id, 1 next producer id, 2 client TV
        + _uvarint(0)
        + _uvarint(8)
        + struct.pack(">q", 41)
        + _uvarint(1)
        + _uvarint(8)
        + struct.pack(">q", 43)
        + _uvarint(2)
        + _uvarint(2)
        + struct.pack(">h", 2)
    )
    decoded = decode_value(body)
    assert decoded == TxnLogValue(
        42,
        7,
        30_000,
        TxnState.PREPARE_COMMIT,
        frozenset({("out", 0), ("out", 4)}),
        99,
        11,
        previous_producer_id=41,
        next_producer_id=43,
        client_transaction_version=2,
    )


def test_a_truncated_value_is_corrupt_not_a_crash():
    encoded = encode_value(
        TransactionMetadata("t", 5, 0, 1000, TxnState.ONGOING, {("a", 0)}).log_value()
    )
    for cut in (3, 20, len(encoded) - 1):
        with pytest.raises(CorruptRecordError):
            decode_value(encoded[:cut])


def test_prepare_epoch_fence_is_logged_as_prepare_abort():
    metadata = TransactionMetadata("t", 5, 1, 1000, TxnState.PREPARE_EPOCH_FENCE, {("a", 0)})
    assert metadata.log_value().status == TxnState.PREPARE_ABORT


def test_the_partition_is_abs_of_java_s_hash_code_modulo_the_count():
    assert partition_for_transactional_id("hello", 50) == 99162322 % 50  # "hello".hashCode()
    # Integer.MIN_VALUE's Utils.abs is 0, not a negative number.
    assert partition_for_transactional_id("polygenelubricants", 50) == 0
    assert partition_for_transactional_id("Aa", 7) == partition_for_transactional_id("BB", 7)
