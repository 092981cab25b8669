"""A small real filesystem for disk-full tests: an ext4 image in a sparse file, loop-mounted
(root only). Unmounted, and its loop device detached, whatever the test did."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def mounted_ext4(image: Path, mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """An empty ext4 of `size_bytes` mounted at `mount_point`; skips the test where loop
    mounts are not allowed (not root, no loop devices)."""
    if os.geteuid() != 0:
        pytest.skip("loop-mounting a filesystem needs root")
    subprocess.run(["truncate", "-s", str(size_bytes), str(image)], check=True)
    made = _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-o", "loop", str(image), str(mount_point))
    if mounted.returncode != 0:
        pytest.skip(f"loop mount not available here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        unmounted = _run("umount", str(mount_point))
        # `mount -o loop` sets autoclear, so unmounting detaches the device; detach any left
        # attached to this image (an unmount that failed) so no loop device leaks.
        for line in _run("losetup", "-j", str(image)).stdout.splitlines():
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
