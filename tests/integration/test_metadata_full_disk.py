"""The registry's metadata log on a filesystem that fills up (a real ext4 of a few MiB,
loop-mounted): a change that does not fit is refused and leaves no half-written frame, so
once space is freed later changes land and a restart finds every acknowledged one."""

from __future__ import annotations

from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.registry import Registry
from tests.small_filesystem import fill_with_ballast, mounted_ext4

FILESYSTEM_BYTES = 4 * 1024 * 1024
PARTITIONS_PER_TOPIC = 1000  # ~100 KiB of records per change
MAX_TOPICS = 200  # far more than fits: the loop ends at the first full-disk error


def _registry(directory):
    store = FileMetadataStore(directory / "metadata", snapshot_interval_records=10**9)
    return Registry(directory, store=store, session_timeout_ms=60_000, max_partitions=10**6)


def test_a_full_disk_refuses_a_change_whole_and_later_changes_survive(tmp_path):
    with mounted_ext4(tmp_path / "disk.img", tmp_path / "disk", FILESYSTEM_BYTES) as disk:
        registry = _registry(disk / "gateway")
        registry.register_node(1, "127.0.0.1:1")
        ballast = fill_with_ballast(disk, FILESYSTEM_BYTES // 2)
        acknowledged = []
        refused = None
        for i in range(MAX_TOPICS):
            try:
                registry.create_topic(f"t{i}", PARTITIONS_PER_TOPIC, 1, {})
            except OSError as exc:
                refused = (f"t{i}", exc)
                break
            acknowledged.append(f"t{i}")
        assert refused is not None and acknowledged, "the disk never filled"
        assert refused[0] not in registry.topics  # refused whole: the image is unchanged
        ballast.unlink()
        registry.create_topic("after", 2, 1, {})
        restarted = _registry(disk / "gateway")
        assert sorted(restarted.topics) == sorted([*acknowledged, "after"])
