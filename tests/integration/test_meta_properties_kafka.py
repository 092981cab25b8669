"""meta.properties is Kafka's own file, both ways, with Apache Kafka's StorageTool (the
`kafka-storage` command, from the jars `make kafka` caches): the file Kafka formats a log
dir with is read as the same identity, and the file a storage node writes is one Kafka's
tool reads back."""

from __future__ import annotations

import pytest

from devtools import apache_kafka
from devtools.apache_kafka import STORAGE_TOOL, run_tool
from seglog.storage import meta_properties
from seglog.storage.meta_properties import random_uuid

pytestmark = pytest.mark.slow  # a JVM per tool run


@pytest.fixture(scope="module", autouse=True)
def kafka_installed() -> None:
    """`make kafka` (run by `make test`) installs the jars: missing, these tests fail."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT


def broker_config(tmp_path, node_id: int):
    """The least a KRaft broker's StorageTool needs: its roles, id, quorum and log dir."""
    log_dir = tmp_path / "log-dir"
    config = tmp_path / "broker.properties"
    config.write_text(
        f"process.roles=broker,controller\nnode.id={node_id}\n"
        f"controller.quorum.voters={node_id}@127.0.0.1:9999\n"
        "controller.listener.names=CONTROLLER\n"
        "listeners=PLAINTEXT://127.0.0.1:9998,CONTROLLER://127.0.0.1:9999\n"
        f"log.dirs={log_dir}\n"
    )
    return config, log_dir


def test_the_file_kafka_formats_reads_as_the_same_identity(tmp_path):
    config, log_dir = broker_config(tmp_path, 4)
    cluster_id = random_uuid()
    formatted = run_tool(
        STORAGE_TOOL, "format", f"--cluster-id={cluster_id}", "--config", str(config)
    )
    assert formatted.returncode == 0, formatted.stdout.decode() + formatted.stderr.decode()
    meta = meta_properties.read(log_dir)
    assert meta is not None
    assert (meta.cluster_id, meta.node_id) == (cluster_id, 4)
    assert len(meta.directory_id) == 22


def test_kafkas_storage_tool_reads_the_file_a_node_writes(tmp_path):
    config, log_dir = broker_config(tmp_path, 2)
    log_dir.mkdir()
    written = meta_properties.new_identity(random_uuid(), 2)
    meta_properties.write(log_dir, written)
    info = run_tool(STORAGE_TOOL, "info", "--config", str(config))
    said = info.stdout.decode()
    assert info.returncode == 0, said + info.stderr.decode()
    assert "Found problem" not in said, said
    assert f"cluster.id={written.cluster_id}" in said or written.cluster_id in said, said
    assert written.directory_id in said, said
