"""The campaign's disk faults (tests/faults/disks.py): a bit flip changes exactly one bit of
a partition's files, in a header field the CRC does not cover when it says so; a node's disk
survives repeated power cuts with what was synced, and leaves no loop device behind."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from seglog.storage import Log, LogConfig
from tests.batches import make_batch
from tests.faults.disks import UNCOVERED_HEADER_FIELDS, NodeDisks, flip_a_bit
from tests.small_filesystem import sync_filesystem
from tests.waiting import wait_for

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)
BATCHES = 60


def write_log(directory: Path) -> None:
    log = Log.open(directory, CONFIG)
    for n in range(BATCHES):
        log.append(make_batch([b"%04d" % n + b"v" * 40]))
    assert len(log.segments) >= 5
    log.close()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def differing_bits(before: bytes, after: bytes) -> list[int]:
    assert len(before) == len(after)
    return [
        byte * 8 + bit
        for byte, (a, b) in enumerate(zip(before, after, strict=True))
        if a != b
        for bit in range(8)
        if (a ^ b) >> bit & 1
    ]


@pytest.mark.parametrize("seed", range(40))
def test_a_bit_flip_changes_one_bit_of_one_file_and_says_where(tmp_path, seed):
    directory = tmp_path / "t-0"
    write_log(directory)
    before = snapshot(directory)
    said = flip_a_bit(directory, random.Random(seed))
    after = snapshot(directory)
    changed = [name for name in before if before[name] != after[name]]
    assert len(changed) == 1, said
    [name] = changed
    [bit] = differing_bits(before[name], after[name])
    assert f"byte {bit // 8} " in said and f"bit {bit % 8} " in said and name in said
    field = re.search(r"\((\w+) of the batch at byte (\d+)\)", said)
    if field is not None:
        assert name.endswith(".log")
        offset, size = {f: (o, s) for f, o, s in UNCOVERED_HEADER_FIELDS}[field.group(1)]
        start = int(field.group(2)) + offset
        assert start <= bit // 8 < start + size, said


def test_bit_flips_reach_header_fields_and_every_kind_of_file(tmp_path):
    kinds: set[str] = set()
    for seed in range(60):
        directory = tmp_path / f"t-{seed}"
        write_log(directory)
        said = flip_a_bit(directory, random.Random(seed))
        kinds.add("header" if " of the batch at byte " in said else said.rsplit(".", 1)[1])
    assert kinds == {"header", "log", "index", "timeindex"}, kinds


def attached_loops(root: Path) -> list[str]:
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True)
    return [line for line in listed.stdout.splitlines() if str(root) in line]


def test_a_node_disk_keeps_what_was_synced_through_repeated_power_cuts(tmp_path):
    """Another process's mount namespace (as `ip netns exec` makes, of another campaign)
    holds each stopped filesystem while the cuts go on: a later cut must not mount one of
    those again (every file then failed with EIO)."""
    disks = NodeDisks(tmp_path, [1])
    holders: list[subprocess.Popen[bytes]] = []
    try:
        mount = disks.mount_point(1)
        for cut in range(3):
            holders.append(subprocess.Popen(["unshare", "--mount", "sleep", "600"]))
            (mount / f"synced-{cut}").write_bytes(b"s" * 4096)
            sync_filesystem(mount)
            (mount / f"unsynced-{cut}").write_bytes(b"u" * 4096)
            disks.cut_power(1)
            for earlier in range(cut + 1):  # earlier cuts' survivors survive this one too
                assert (mount / f"synced-{earlier}").read_bytes() == b"s" * 4096
            (mount / f"after-{cut}").write_bytes(b"a")  # the remounted disk takes writes
        assert disks.fill(1) > 0
        with pytest.raises(OSError, match="No space left"):
            (mount / "more").write_bytes(b"x" * 65536)
        disks.free(1)
        (mount / "more").write_bytes(b"x" * 65536)
        # A power cut after the ballast was freed does not bring it back.
        disks.cut_power(1)
        assert not (mount / "ballast").exists()
        (mount / "again").write_bytes(b"x" * 65536)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        disks.close()
    # The killed holders' mount namespaces are torn down by the kernel after they exit, and
    # only then does the last reference to each loop device go (autoclear detaches it).
    wait_for(
        lambda: attached_loops(tmp_path) == [],
        30,
        "the loop devices to detach once their holders' namespaces are gone",
        state=lambda: str(attached_loops(tmp_path)),
    )


def test_a_disk_unmounted_by_someone_else_is_neither_filled_nor_cut(tmp_path):
    disks = NodeDisks(tmp_path, [1])
    try:
        subprocess.run(["umount", str(disks.mount_point(1))], check=True)
        with pytest.raises(RuntimeError, match="no longer a mount point"):
            disks.fill(1)
        with pytest.raises(RuntimeError, match="no longer a mount point"):
            disks.cut_power(1)
        assert not (disks.mount_point(1) / "ballast").exists()
    finally:
        disks.close()  # reports the missing mount instead of raising
    assert attached_loops(tmp_path) == []
