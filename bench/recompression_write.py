"""Appends to a topic whose compression.type differs from the producer's codec, beside the
matching-codec append in the same run: `python -m bench.recompression_write`.

Each case appends the same records (1 KiB text-like values, ~1 MiB batches) to a fresh log,
in turns round by round (bench/timing.py), and reports MB of uncompressed records per
CPU-second and the ratio to its matching-codec baseline: an uncompressed producer's batch
to a `producer` topic (kept as sent) for the uncompressed-to-zstd case, a zstd producer's to
a zstd topic for the gzip-to-zstd one.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from seglog.records import CompressionType, RecordBatchBuilder
from seglog.storage import Log, LogConfig

from .timing import best_in_turns

MIB = 1024 * 1024
BATCH_RECORDS = 960  # 1 KiB values: under max.message.bytes (1 MiB) uncompressed
BATCHES = 24
ROUNDS = 9


def _batch(codec: CompressionType, seed: int) -> bytes:
    builder = RecordBatchBuilder(compression=codec)
    now = time.time_ns() // 1_000_000
    for i in range(BATCH_RECORDS):
        value = (b"order %08d item %06d qty %04d; " % (seed, i, i % 97)) * 30
        builder.append(b"k%d" % i, value[:1024], now)
    return builder.build()


def _run(root: Path, topic_codec: str, batches: list[bytes]) -> float:
    path = Path(tempfile.mkdtemp(dir=root))
    log = Log.open(path / "t-0", LogConfig(compression_type=topic_codec))
    try:
        # CPU time of this thread, not wall time: the work is all CPU (no fsync per
        # append), and other processes on a shared machine then skew it far less.
        started = time.thread_time()
        for batch in batches:
            log.append(batch)
        return time.thread_time() - started
    finally:
        log.close()
        shutil.rmtree(path)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="recompression-bench-"))
    try:
        inputs = {
            codec: [_batch(codec, seed) for seed in range(BATCHES)]
            for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD)
        }
        runs = {
            "uncompressed -> producer topic": ("producer", inputs[CompressionType.NONE]),
            "uncompressed -> zstd topic": ("zstd", inputs[CompressionType.NONE]),
            "zstd -> zstd topic": ("zstd", inputs[CompressionType.ZSTD]),
            "gzip -> zstd topic": ("zstd", inputs[CompressionType.GZIP]),
        }
        times = best_in_turns(
            {name: (lambda c=c, b=b: _run(root, c, b)) for name, (c, b) in runs.items()}, ROUNDS
        )
        records_mb = BATCHES * BATCH_RECORDS * 1024 / MIB
        rate = {name: records_mb / seconds for name, seconds in times.items()}
        pairs = (
            ("uncompressed -> zstd topic", "uncompressed -> producer topic"),
            ("gzip -> zstd topic", "zstd -> zstd topic"),
        )
        for name, baseline in pairs:
            print(
                f"{name:32s} {rate[name]:8.1f} MB/cpu-s  baseline {baseline:32s} "
                f"{rate[baseline]:8.1f} MB/cpu-s  ratio {rate[name] / rate[baseline]:5.3f}x"
            )
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
