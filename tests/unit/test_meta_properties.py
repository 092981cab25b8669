"""A data directory's meta.properties (Kafka's format), on real files: what it writes, that
Kafka's own file reads, that a torn or garbage file is a clear error, never "no identity"."""

from __future__ import annotations

import base64
import os

import pytest

from seglog.storage import meta_properties
from seglog.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    check_uuid,
    random_uuid,
)

# A meta.properties as Kafka 3.7's broker writes it (kafka-storage format): comment lines,
# keys in the hash order of java.util.Properties.
KAFKA_WRITTEN = """#
#Thu Mar 14 10:12:41 UTC 2024
node.id=3
directory.id=2RZ3JhbZQbmdU0GttBnN3Q
version=1
cluster.id=Vw0MOr7cTMqUabAmiOSm4g
"""


def test_a_written_identity_reads_back_and_is_kafkas_format(tmp_path):
    meta = meta_properties.new_identity(random_uuid(), 7)
    meta_properties.write(tmp_path, meta)
    assert meta_properties.read(tmp_path) == meta
    text = (tmp_path / "meta.properties").read_text()
    lines = text.splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")  # Properties.store's comment, date
    assert sorted(lines[2:]) == sorted(
        [
            f"cluster.id={meta.cluster_id}",
            f"directory.id={meta.directory_id}",
            "node.id=7",
            "version=1",
        ]
    )
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_kafkas_own_file_reads(tmp_path):
    (tmp_path / "meta.properties").write_text(KAFKA_WRITTEN)
    assert meta_properties.read(tmp_path) == MetaProperties(
        "Vw0MOr7cTMqUabAmiOSm4g", 3, "2RZ3JhbZQbmdU0GttBnN3Q"
    )


def test_no_file_is_no_identity(tmp_path):
    assert meta_properties.read(tmp_path) is None
    assert meta_properties.read(tmp_path / "absent") is None


def test_a_rewrite_replaces_the_whole_file(tmp_path):
    first = meta_properties.new_identity(random_uuid(), 1)
    meta_properties.write(tmp_path, first)
    second = meta_properties.new_identity(random_uuid(), 1)
    meta_properties.write(tmp_path, second)
    assert meta_properties.read(tmp_path) == second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]


@pytest.mark.parametrize(
    "content, says",
    [
        # torn: the write stopped inside the cluster id, or before the last keys
        (KAFKA_WRITTEN[: KAFKA_WRITTEN.index("cluster.id=") + 15], "cluster.id"),
        (KAFKA_WRITTEN[: KAFKA_WRITTEN.index("version")], "lacks"),
        ("", "lacks"),
        ("\x00\x17\xff garbage \x01\n\x02", "lacks"),
        (KAFKA_WRITTEN.replace("node.id=3", "node.id=three"), "node.id"),
        (KAFKA_WRITTEN.replace("version=1", "version=0"), "version"),
        (KAFKA_WRITTEN.replace("2RZ3JhbZQbmdU0GttBnN3Q", "2RZ3JhbZQbmdU0GttBnN3"), "directory.id"),
        (KAFKA_WRITTEN.replace("Vw0MOr7cTMqUabAmiOSm4g", "Vw0MOr7cTMqUabAmiOSm4!"), "cluster.id"),
        ("x" * (70 * 1024), "over"),
    ],
    ids=[
        "torn-id",
        "torn-keys",
        "empty",
        "garbage",
        "node-id",
        "version",
        "dir-id",
        "bad-b64",
        "big",
    ],
)
def test_a_torn_or_garbage_file_is_a_clear_error(tmp_path, content, says):
    (tmp_path / "meta.properties").write_bytes(content.encode("latin-1"))
    with pytest.raises(MetaPropertiesError) as raised:
        meta_properties.read(tmp_path)
    message = str(raised.value)
    assert says in message and "meta.properties" in message


def test_an_unreadable_file_is_an_error_not_an_absence(tmp_path):
    (tmp_path / "meta.properties").mkdir()  # reading it fails with an OSError
    with pytest.raises(MetaPropertiesError, match="cannot read"):
        meta_properties.read(tmp_path)


def test_the_write_goes_through_a_synced_temporary_file_and_a_rename(tmp_path, monkeypatch):
    """temp file, fsync, rename over the old file, fsync of the directory: in that order."""
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        calls.append(f"fsync {os.path.basename(target)}")
        real_fsync(fd)

    def replace(source, target):
        calls.append(f"rename {os.path.basename(source)} {os.path.basename(target)}")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    meta_properties.write(tmp_path, meta_properties.new_identity(random_uuid(), 2))
    assert calls == [
        "fsync meta.properties.tmp",
        "rename meta.properties.tmp meta.properties",
        f"fsync {tmp_path.name}",
    ]


def test_ids_are_kafka_uuids():
    ids = [random_uuid() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        raw = base64.urlsafe_b64decode(text + "==")
        assert len(raw) == 16
        assert check_uuid(text, "id") == text
    for bad in ("", "short", "A" * 23, "AAAAAAAAAAAAAAAAAAAAA=", "Vw0MOr7cTMqUabAmiOSm4h"):
        with pytest.raises(ValueError):
            check_uuid(bad, "id")


def test_an_identity_refuses_bad_fields():
    with pytest.raises(ValueError):
        MetaProperties("not-an-id", 1, random_uuid())
    with pytest.raises(ValueError):
        MetaProperties(random_uuid(), -1, random_uuid())
