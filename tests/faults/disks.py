"""The campaign's storage nodes on disks of their own: each node's data dir a loop-mounted ext4
(tests/small_filesystem.py), which disk faults stop without flushing (a power cut), fill up
(a full disk) or damage (a bit flipped in a segment or index file)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tests.small_filesystem import (
    AFTER_POWER_CUT,
    EXT4_GOING_FLAGS_NOLOGFLUSH,
    EXT4_IOC_SHUTDOWN,
    mounted_ext4,
)

# Room for a long campaign's logs (tens of MiB a node) with 256 KiB segments.
NODE_FILESYSTEM_BYTES = 256 * 1024 * 1024
BALLAST_NAME = "ballast"
BALLAST_CHUNK_BYTES = 1024 * 1024
# The record batch header's fields the batch's CRC does not cover, as (name, offset, size):
# the CRC (at byte 17) covers the attributes (byte 21) onwards.
UNCOVERED_HEADER_FIELDS = (
    ("baseOffset", 0, 8),
    ("batchLength", 8, 4),
    ("partitionLeaderEpoch", 12, 4),
    ("magic", 16, 1),
)
BATCH_HEADER_BYTES = 61
MAX_BATCHES_WALKED = 1_000_000


def loop_mounts_possible() -> bool:
    """Root, with mkfs.ext4, mount and losetup on the path (the faults' own check; the
    mount itself may still be refused, which fails the cluster's start)."""
    return os.geteuid() == 0 and all(
        shutil.which(tool) for tool in ("mkfs.ext4", "mount", "umount", "losetup", "cp")
    )


class NodeDisks:
    """One loop-mounted ext4 per node, at the node's data dir; unmounted and their loop
    devices detached by `close`, whatever happened."""

    def __init__(self, root: Path, node_ids: list[int]) -> None:
        self.root = root
        self._mounts = contextlib.ExitStack()
        # After each power cut a copy of what the device held is mounted, a file of a new
        # name each time (see cut_power); the copies are detached and removed last, once
        # mounted_ext4 unmounted the mount points.
        self._backing: dict[int, Path] = {}
        self._copies: list[Path] = []
        self._mounts.callback(self._remove_copies)
        try:
            for node_id in node_ids:
                image = self.image(node_id)
                self._mounts.enter_context(
                    mounted_ext4(image, self.mount_point(node_id), NODE_FILESYSTEM_BYTES)
                )
                self._backing[node_id] = image
        except BaseException:
            self._mounts.close()
            raise

    def image(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}.img"

    def mount_point(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    def mounted(self, node_id: int) -> Path:
        """The node's mount point, refused when its filesystem is no longer mounted there
        (unmounted by someone else): a ballast would fill, and a shutdown stop, the
        machine's own filesystem instead."""
        mount_point = self.mount_point(node_id)
        if not os.path.ismount(mount_point):
            raise RuntimeError(f"{mount_point} is no longer a mount point")
        return mount_point

    def cut_power(self, node_id: int) -> None:
        """What the node wrote and its filesystem had not flushed is lost (the node must be
        dead): the filesystem stops without flushing page cache or journal, and what its
        device then holds is mounted in its place, journal replayed as at boot. A copy is
        mounted, a file of a new name each time: a mount namespace another process made
        meanwhile (`ip netns exec` makes one, and keeps every mount of the machine) may still
        hold an earlier stopped filesystem with its loop device, and `mount -o loop` of a
        file already attached reuses that device and its stopped superblock (every file
        then fails with EIO: nodes did not start after a second power cut)."""
        mount_point = self.mounted(node_id)
        fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        current = self._backing[node_id]
        image = self.image(node_id)
        target = image.with_name(f"{image.name}{AFTER_POWER_CUT}-{len(self._copies) + 1}")
        self._copies.append(target)
        _run("cp", "--sparse=always", str(current), str(target))
        try:
            _run("umount", str(mount_point))
        except RuntimeError:
            # Busy: some process still has a file of the dead filesystem open; detach it
            # from the tree now (it ends when they let go), so the copy takes its place.
            _run("umount", "--lazy", str(mount_point))
        _run("mount", "-o", "loop", str(target), str(mount_point))
        self._backing[node_id] = target
        if current != image:
            current.unlink()  # a namespace still holding it keeps its blocks until it ends

    def _remove_copies(self) -> None:
        for copy in self._copies:
            _detach_loops_of(copy)  # one a namespace still holds detaches when it ends
            copy.unlink(missing_ok=True)

    def fill(self, node_id: int) -> int:
        """Fill the node's filesystem with a ballast file until a write fails for lack of
        space; return the ballast's size in bytes."""
        path = self.mounted(node_id) / BALLAST_NAME
        written = 0
        chunk = b"\0" * BALLAST_CHUNK_BYTES
        with open(path, "ab", buffering=0) as f:
            for size in (BALLAST_CHUNK_BYTES, 4096, 1):
                limit = NODE_FILESYSTEM_BYTES // size + 1
                for _ in range(limit):
                    try:
                        written += f.write(chunk[:size]) or 0
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
            with contextlib.suppress(OSError):
                os.fsync(f.fileno())  # may itself fail for lack of room: it is full either way
        return written

    def free(self, node_id: int) -> None:
        """Remove the ballast, durably: a power cut in a later cycle drops what the
        filesystem had not flushed, and an unflushed unlink brought the ballast back, the
        node's disk full for the rest of the campaign (seen at cycle 100 of 200: the cluster
        ran on two nodes and each cycle took minutes)."""
        mount_point = self.mount_point(node_id)
        (mount_point / BALLAST_NAME).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not mounted any more: nothing to keep
            fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Unmount and detach everything; a filesystem someone else unmounted meanwhile is
        reported, not raised, so the campaign still reaches its verdict."""
        try:
            self._mounts.close()
        except AssertionError as exc:  # mounted_ext4's failed umount (its devices detached)
            print(f"node disks: {exc}", file=sys.stderr)


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def _detach_loops_of(backing: Path) -> None:
    listed = subprocess.run(
        ["losetup", "-j", str(backing)], capture_output=True, text=True, timeout=60
    )
    for line in listed.stdout.splitlines():
        subprocess.run(["losetup", "-d", line.split(":", 1)[0]], capture_output=True, timeout=60)


# -- bits flipped in a partition's files ---------------------------------------------------


def flip_a_bit(directory: Path, rng: random.Random) -> str:
    """Flip one random bit of one of the partition's segment, offset index or time index
    files (any segment, older ones too); in a segment, half the time in a batch header's
    field the CRC does not cover. Return which file and bit, for the campaign's schedule."""
    candidates = [
        path
        for suffix in (".log", ".index", ".timeindex")
        for path in sorted(directory.glob(f"*{suffix}"))
        if _used_bytes(path) > 0
    ]
    if not candidates:
        return f"nothing to damage in {directory.name}"
    path = rng.choice(candidates)
    raw = bytearray(path.read_bytes())
    used_bytes = _used_bytes(path)
    where = ""
    if path.suffix == ".log" and rng.random() < 0.5:
        starts = _batch_starts(raw)
        if starts:
            start = rng.choice(starts)
            field, field_offset, size = rng.choice(UNCOVERED_HEADER_FIELDS)
            bit = (start + field_offset) * 8 + rng.randrange(size * 8)
            where = f" ({field} of the batch at byte {start})"
    if not where:
        bit = rng.randrange(used_bytes * 8)
    raw[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(raw))
    return f"flipped bit {bit % 8} of byte {bit // 8}{where} in {directory.name}/{path.name}"


def _used_bytes(path: Path) -> int:
    """The bytes of a file that hold something: an index of the active segment is
    preallocated with zeros past its last entry (entries are never all zero: the first is
    at a position past the segment's first bytes), and a flip there would hit nothing."""
    if path.suffix == ".log":
        return path.stat().st_size
    raw = path.read_bytes()
    entry_bytes = 8 if path.suffix == ".index" else 12
    last = len(raw.rstrip(b"\0"))
    return -(-last // entry_bytes) * entry_bytes


def _batch_starts(raw: bytearray) -> list[int]:
    """Where each whole batch of a segment file starts (stopping at the first that does not
    fit, as a torn tail after a crash)."""
    starts: list[int] = []
    position = 0
    for _ in range(MAX_BATCHES_WALKED):
        if position + BATCH_HEADER_BYTES > len(raw):
            break
        length = struct.unpack_from(">i", raw, position + 8)[0]
        if length < BATCH_HEADER_BYTES - 12 or position + 12 + length > len(raw):
            break
        starts.append(position)
        position += 12 + length
    return starts
