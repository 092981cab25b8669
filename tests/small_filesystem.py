"""A small real filesystem for disk tests: an ext4 image in a sparse file, loop-mounted (root
only), unmounted and its loop device detached whatever the test did; filled with ballast for
a full disk, or stopped without flushing anything for a power cut."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suffix of the copy of an image mounted after a power cut (`cut_power`).
AFTER_POWER_CUT = ".after-power-cut"


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def mounted_ext4(image: Path, mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """An empty ext4 of `size_bytes` mounted at `mount_point`. Skips the test without root
    (loop mounts need it); as root, a file system that cannot be made or mounted fails the
    test rather than passing it unexercised."""
    if os.geteuid() != 0:
        pytest.skip("loop-mounting a filesystem needs root")
    subprocess.run(["truncate", "-s", str(size_bytes), str(image)], check=True)
    made = _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    if made.returncode != 0:
        pytest.fail(f"mkfs.ext4 failed: {made.stderr.strip()}")
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-o", "loop", str(image), str(mount_point))
    if mounted.returncode != 0:
        pytest.fail(f"loop mount failed: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        unmounted = _run("umount", str(mount_point))
        # `mount -o loop` sets autoclear, so unmounting detaches the device; detach any left
        # attached to this image or its power-cut copy (an unmount that failed, a namespace
        # still holding it) so no loop device stays attached longer than it must.
        for backing in (image, image.with_name(f"{image.name}{AFTER_POWER_CUT}")):
            for line in _run("losetup", "-j", str(backing)).stdout.splitlines():
                _run("losetup", "-d", line.split(":", 1)[0])
        assert unmounted.returncode == 0, f"umount {mount_point}: {unmounted.stderr}"


def fill_with_ballast(directory: Path, size_bytes: int) -> Path:
    """A file holding `size_bytes` of real blocks (what an operator deletes to free space)."""
    path = directory / "ballast"
    with open(path, "wb") as f:
        f.write(os.urandom(size_bytes))
        f.flush()
        os.fsync(f.fileno())
    return path


# EXT4_IOC_SHUTDOWN = _IOR('X', 125, __u32), and its flag that flushes neither the data nor
# the journal: the filesystem stops as a machine losing power does (xfstests' "godown").
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 0x2


def sync_filesystem(mount_point: Path) -> None:
    """syncfs(2): everything written to this filesystem so far reaches its device."""
    fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _LIBC.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), f"syncfs {mount_point}")
    finally:
        os.close(fd)


_LIBC = ctypes.CDLL(None, use_errno=True)


def cut_power(image: Path, mount_point: Path) -> None:
    """Everything written to the filesystem and not yet on its device is lost: the
    filesystem stops without flushing page cache or journal, and what its device holds then
    (the image file, stable once the filesystem is down) is mounted in its place as a new
    filesystem, whose journal replays what was committed, as at boot after a power cut.
    A copy is mounted, not the image again: a mount namespace made meanwhile by another
    process (`ip netns exec` makes one) may still hold the stopped filesystem, and mounting
    the same image would give back that stopped superblock. Processes using the filesystem
    must be dead first."""
    fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)
    survivor = image.with_name(f"{image.name}{AFTER_POWER_CUT}")
    shutil.copyfile(image, survivor)
    unmounted = _run("umount", str(mount_point))
    assert unmounted.returncode == 0, f"umount {mount_point}: {unmounted.stderr}"
    mounted = _run("mount", "-o", "loop", str(survivor), str(mount_point))
    assert mounted.returncode == 0, f"mount {survivor}: {mounted.stderr}"
