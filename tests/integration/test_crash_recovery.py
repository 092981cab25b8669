"""Crash recovery with real processes and real damage to the files."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from seglog.records import iter_records
from seglog.storage import Log, LogConfig
from tests.batches import make_batch
from tests.unit.test_log import read_all

WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from seglog.storage import Log, LogConfig
    from tests.batches import make_batch
    log = Log.open({directory!r}, LogConfig(segment_bytes=20_000, index_interval_bytes=256,
                                            flush_messages=1))
    i = 0
    while i < 200_000:  # bounded: the test kills it long before
        log.append(make_batch([b"%08d" % i, b"%08d" % (i + 1)]))
        # flush_messages=1: each append is fsynced before it is acknowledged here.
        print(i + 1, flush=True)
        i += 2
""")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_a_random_moment_keeps_every_acknowledged_record(tmp_path, seed):
    directory = tmp_path / "crash-0"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=os.getcwd(), directory=str(directory))],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = -1
    target = random.Random(seed).randint(50, 400)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
            if acknowledged >= target:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    assert acknowledged >= target, "writer did not get far enough"
    log = Log.open(directory, LogConfig(segment_bytes=20_000, index_interval_bytes=256))
    values = [int(r.value) for r in read_all(log)]
    assert values == list(range(len(values)))  # no holes, nothing corrupt
    assert len(values) >= acknowledged + 1
    # The log continues where it stopped.
    assert log.append(make_batch([b"after"])).first_offset == len(values)
    log.close()


def _written_log(tmp_path, batches=30):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    for i in range(batches):
        log.append(make_batch([b"%04d" % i + b"x" * 60]))
    log.close()
    (tmp_path / ".kafka_cleanshutdown").unlink()  # as if the process had died
    return directory, directory / "00000000000000000000.log"


def test_a_log_cut_mid_batch_loses_only_the_torn_batch(tmp_path):
    directory, log_file = _written_log(tmp_path)
    size = log_file.stat().st_size
    os.truncate(log_file, size - 20)
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    assert [int(r.value[:4]) for r in read_all(log)] == list(range(29))
    assert log.log_end_offset == 29
    log.close()


def test_garbage_after_the_last_batch_is_cut(tmp_path):
    directory, log_file = _written_log(tmp_path)
    with open(log_file, "ab") as f:
        f.write(os.urandom(500))
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    assert log.log_end_offset == 30 and len(read_all(log)) == 30
    log.close()


def test_a_flipped_byte_mid_log_cuts_from_the_corrupt_batch(tmp_path):
    directory, log_file = _written_log(tmp_path)
    data = bytearray(log_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    log_file.write_bytes(bytes(data))
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    values = [int(r.value[:4]) for r in read_all(log)]
    assert values == list(range(len(values))) and 10 < len(values) < 30
    log.close()


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_damaged_indexes_are_rebuilt_from_the_log(tmp_path, damage):
    directory, _ = _written_log(tmp_path)
    (tmp_path / ".kafka_cleanshutdown").touch()  # even after a clean shutdown
    original = (directory / "00000000000000000000.index").read_bytes()
    for suffix in (".index", ".timeindex"):
        path = directory / f"00000000000000000000{suffix}"
        if damage == "delete":
            path.unlink()
        else:
            path.write_bytes(b"\x00" * 7 + random.Random(suffix).randbytes(33))
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    assert len(read_all(log)) == 30
    log.close()
    assert (directory / "00000000000000000000.index").read_bytes() == original


def test_leftover_cleaned_files_are_discarded_and_swap_files_finished(tmp_path):
    directory, log_file = _written_log(tmp_path)
    # An interrupted cleaner: a .cleaned output that never finished...
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    # ...and a finished one, swapped in at base 0, holding only the last 5 batches' records.
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    tail = log.read(25, 1 << 20)
    log.close()
    (tmp_path / ".kafka_cleanshutdown").unlink()
    (directory / "00000000000000000000.log.swap").write_bytes(tail)
    log = Log.open(directory, LogConfig(index_interval_bytes=100))
    names = sorted(p.name for p in directory.iterdir())
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    assert [int(r.value[:4]) for r in iter_records(log.read(25, 1 << 20))] == [25, 26, 27, 28, 29]
    assert log.log_end_offset == 30
    log.close()
