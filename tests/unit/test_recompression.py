"""A topic's compression.type: the leader stores every batch in the topic's codec, as Kafka's
LogValidator does, read back by kafka-python's codec (an independent implementation)."""

from __future__ import annotations

import random

import pytest
from kafka.record.default_records import DefaultRecordBatch

from seglog.errors import RecordTooLargeError, RequestTimedOutError
from seglog.records import CompressionType, RecordBatchBuilder, compression
from seglog.records.batch import read_header
from seglog.records.inflation_budget import PROCESS_BUDGET
from seglog.storage import Log, LogConfig, recompression
from seglog.storage.recompression import recompress
from seglog.storage.validation import validate_records


def _batch(codec, values, *, producer_id=-1, timestamp_ms=1_700_000_000_000):
    builder = RecordBatchBuilder(compression=codec)
    for i, value in enumerate(values):
        builder.append(b"k%d" % i, value, timestamp_ms, headers=[("h", b"%d" % i)])
    return builder.build()


def _stored(log):
    """(attributes, offsets, keys, values, headers) of each batch, read by kafka-python."""
    out = []
    data = bytes(log.read(0, 1 << 24))
    pos = 0
    while pos < len(data):
        size = read_header(data, pos).size_in_bytes
        raw = DefaultRecordBatch(bytearray(data[pos : pos + size]))
        pos += size
        assert raw.validate_crc()
        records = list(raw)
        out.append(
            (
                raw.compression_type,
                [r.offset for r in records],
                [r.key for r in records],
                [r.value for r in records],
                [r.headers for r in records],
            )
        )
    return out


@pytest.mark.parametrize("target", ["zstd", "gzip", "lz4", "snappy", "uncompressed"])
def test_batches_in_another_codec_are_stored_in_the_topics_codec(tmp_path, target, now_ms):
    codec = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[target]
    source = CompressionType.GZIP if target == "uncompressed" else CompressionType.NONE
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type=target))
    log.append(_batch(source, [b"a" * 100, b"b" * 100, b"c"], timestamp_ms=now_ms))
    log.append(_batch(source, [b"d", b"e"], timestamp_ms=now_ms))
    stored = _stored(log)
    assert [s[0] for s in stored] == [codec, codec]
    assert [s[1] for s in stored] == [[0, 1, 2], [3, 4]]
    assert [s[3] for s in stored] == [[b"a" * 100, b"b" * 100, b"c"], [b"d", b"e"]]
    assert stored[0][2] == [b"k0", b"k1", b"k2"] and stored[1][4] == [[("h", b"0")], [("h", b"1")]]


def test_producer_or_the_same_codec_passes_the_validated_input_untouched(now_ms):
    batch = _batch(CompressionType.ZSTD, [b"x"] * 3, timestamp_ms=now_ms)
    for config in (LogConfig(), LogConfig(compression_type="zstd")):
        validated = validate_records(batch, config, now_ms)
        assert recompress(validated, config) is validated  # no copy, no rebuild


def test_a_mixed_input_keeps_batches_already_in_the_codec_and_producer_fields(tmp_path, now_ms):
    builder = RecordBatchBuilder(
        compression=CompressionType.NONE, producer_id=7, producer_epoch=1, base_sequence=0
    )
    builder.append(b"k", b"v", now_ms)
    idempotent = builder.build()
    config = LogConfig(compression_type="lz4")
    kept = _batch(CompressionType.LZ4, [b"y"], timestamp_ms=now_ms)
    validated = recompress(validate_records(idempotent + kept, config, now_ms), config)
    (first, _), (second, _) = [(h, p) for p, h in validated.batches]
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 1, 0)
    assert first.compression is CompressionType.LZ4 and second.compression is CompressionType.LZ4
    assert bytes(validated.view[validated.batches[1][0] :]) == kept


def test_a_batch_too_large_once_recompressed_refuses_the_input(now_ms):
    # Random values grow under gzip's framing: past a max.message.bytes they fit before.
    values = [random.Random(53).randbytes(1000)]
    batch = _batch(CompressionType.NONE, values, timestamp_ms=now_ms)
    config = LogConfig(compression_type="gzip", max_message_bytes=len(batch))
    with pytest.raises(RecordTooLargeError, match="recompressed"):
        recompress(validate_records(batch, config, now_ms), config)


def test_log_append_time_and_idempotent_retries_hold_on_a_recompressed_topic(tmp_path, now_ms):
    config = LogConfig(compression_type="zstd", message_timestamp_type="LogAppendTime")
    log = Log.open(tmp_path / "t-0", config)
    builder = RecordBatchBuilder(
        compression=CompressionType.NONE, producer_id=9, producer_epoch=0, base_sequence=0
    )
    for i in range(3):
        builder.append(b"k%d" % i, b"v%d" % i, now_ms - 1000)
    batch = builder.build()
    first = log.append(batch)
    retried = log.append(batch)  # the producer's retry: answered, not written twice
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (retried.first_offset, retried.last_offset) == (0, 2)
    assert log.log_end_offset == 3
    data = bytes(log.read(0, 1 << 20))
    header = read_header(data)
    assert header.compression is CompressionType.ZSTD and header.timestamp_type == 1
    assert header.max_timestamp == first.log_append_time_ms
    assert DefaultRecordBatch(bytearray(data[: header.size_in_bytes])).validate_crc()


def _counting_inflations(monkeypatch, codec):
    """Every inflation of `codec`'s sections from here on, counted (the codec's own
    decompressor still does the work)."""
    inflations: list[int] = []
    real = compression._DECOMPRESSORS[codec]

    def counted(data, max_bytes, grow):
        inflations.append(len(data))
        return real(data, max_bytes, grow)

    monkeypatch.setitem(compression._DECOMPRESSORS, codec, counted)
    return inflations


def test_a_recompressed_batch_is_inflated_once_and_held_in_the_budget_while_recompressed(
    tmp_path, now_ms, monkeypatch
):
    inflations = _counting_inflations(monkeypatch, CompressionType.GZIP)
    held_while_compressing: list[int] = []
    real_compress = recompression.compress

    def compress(codec, data, level=None):
        held_while_compressing.append(PROCESS_BUDGET.used_bytes)
        return real_compress(codec, data, level)

    monkeypatch.setattr(recompression, "compress", compress)
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="zstd"))
    values = [b"%06d" % i * 50 for i in range(200)]  # ~60 KB inflated
    log.append(_batch(CompressionType.GZIP, values, timestamp_ms=now_ms))
    assert len(inflations) == 1  # validation's; recompression used its section
    # The inflated section still counted in the process's budget when it was recompressed.
    assert held_while_compressing and held_while_compressing[0] >= 60_000
    assert PROCESS_BUDGET.used_bytes == 0  # and released after
    assert _stored(log)[0][0] == CompressionType.ZSTD and _stored(log)[0][3] == values


def test_a_batch_past_the_inflation_budget_is_refused_and_nothing_is_written(
    tmp_path, now_ms, monkeypatch
):
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="zstd"))
    log.append(_batch(CompressionType.GZIP, [b"small"], timestamp_ms=now_ms))
    values = [b"%06d" % i * 100 for i in range(500)]  # ~300 KB inflated
    monkeypatch.setattr(PROCESS_BUDGET, "limit_bytes", 64 * 1024)
    with pytest.raises(RequestTimedOutError, match="budget"):
        log.append(_batch(CompressionType.GZIP, values, timestamp_ms=now_ms))
    assert log.log_end_offset == 1
    assert [s[3] for s in _stored(log)] == [[b"small"]]
    assert PROCESS_BUDGET.used_bytes == 0


def test_an_uncompressed_batch_is_compressed_from_the_input_without_a_copy(
    tmp_path, now_ms, monkeypatch
):
    given: list[object] = []
    real_compress = recompression.compress

    def compress(codec, data, level=None):
        given.append(data)
        return real_compress(codec, data, level)

    monkeypatch.setattr(recompression, "compress", compress)
    batch = _batch(CompressionType.NONE, [b"a" * 100, b"b"], timestamp_ms=now_ms)
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="zstd"))
    log.append(batch)
    # A view of the producer's bytes (records section), not a decompressed copy of them.
    (section,) = given
    assert isinstance(section, memoryview) and section.obj is batch
    assert _stored(log)[0][0] == CompressionType.ZSTD
