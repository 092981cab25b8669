"""A storage node never obeys a registry of another cluster: real gateway and node processes
on loopback, each node's data directory carrying its cluster id (meta.properties). Started
against a fresh registry, the node exits non-zero naming both ids, its data untouched (no
partition set aside, nothing recorded in that registry); back on its own registry it serves
every record it held."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.records import iter_records
from services.gateway.cluster.registry_bootstrap import load_file_image
from tests.batches import make_batch
from tests.ports import free_ports
from tests.waiting import wait_for, wait_until

TOPIC = "kept"
PARTITIONS = 2
RECORDS = 40  # per partition


def gateway(root: Path, name: str, port: int = 0, internal_port: int = 0) -> ServerProcess:
    process = gateway_process(
        f"127.0.0.1:{port}",
        root / name,
        internal_listen=f"127.0.0.1:{internal_port}",
        extra_args=["--session-timeout-ms", "1500", "--heartbeat-interval-ms", "100"],
        stderr_path=root / f"{name}.log",
    )
    process.start()
    return process


def node(root: Path, registry: ServerProcess) -> ServerProcess:
    process = node_process(
        1,
        "127.0.0.1:0",
        root / "node-1",
        registry.internal_address,
        extra_args=["--heartbeat-interval-ms", "100"],
        stderr_path=root / "node-1.log",
    )
    process.start()
    return process


def registered(address: str) -> set[int]:
    with Admin(address, timeout_s=5) as admin:
        return {n.node_id for n in admin.describe_cluster().nodes if n.live}


def records_served(address: str) -> int:
    client = GatewayClient(address, timeout_s=5)
    try:
        total = 0
        for partition in range(PARTITIONS):
            (answer,) = client.fetch([FetchPosition(TOPIC, partition, 0)], max_wait_ms=0)
            if answer.error:
                return -1
            total += sum(1 for _ in iter_records(answer.records))
        return total
    except Exception:
        return -1
    finally:
        client.close()


def partition_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "node-1").iterdir() if p.is_dir())


def refused(root: Path, foreign: ServerProcess) -> str:
    """The node started against `foreign` exits non-zero; what it logged of the refusal."""
    log = root / "node-1.log"
    start = log.stat().st_size if log.exists() else 0
    process = node(root, foreign)
    try:
        wait_for(lambda: not process.alive(), 30, "the node to refuse and exit")
    finally:
        process.kill()
    assert process.process is not None and process.process.returncode == 1
    return log.read_bytes()[start:].decode(errors="replace")


@pytest.fixture
def processes():
    started: list[ServerProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


@pytest.mark.slow
def test_a_node_refuses_a_registry_of_another_cluster_and_keeps_its_data(tmp_path, processes):
    own = gateway(tmp_path, "gateway-a")
    processes.append(own)
    first = node(tmp_path, own)
    processes.append(first)
    wait_for(lambda: registered(own.address) == {1}, 30, "node 1 registered")
    with Admin(own.address) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 1)
    client = GatewayClient(own.address, timeout_s=10)
    try:
        values = [b"v%d" % i for i in range(RECORDS)]
        assert wait_until(
            lambda: all(
                not r.error
                for r in client.produce(
                    TOPIC, {p: make_batch(values) for p in range(PARTITIONS)}, acks=-1
                )
            ),
            timeout_s=20,
        )
    finally:
        client.close()
    first.stop()
    meta = (tmp_path / "node-1" / "meta.properties").read_bytes()
    own_id = load_file_image(tmp_path / "gateway-a").cluster_id
    assert f"cluster.id={own_id}".encode() in meta
    held = partition_dirs(tmp_path)
    assert held == ["kept-0", "kept-1"]

    # A fresh registry (another cluster): refused at registration, both ids named.
    foreign = gateway(tmp_path, "gateway-b")
    processes.append(foreign)
    foreign_id = load_file_image(tmp_path / "gateway-b").cluster_id
    assert foreign_id and foreign_id != own_id
    said = refused(tmp_path, foreign)
    assert own_id in said and foreign_id in said, said
    assert "INCONSISTENT_CLUSTER_ID" in said or "belongs to cluster" in said
    assert partition_dirs(tmp_path) == held  # nothing set aside
    assert (tmp_path / "node-1" / "meta.properties").read_bytes() == meta
    assert registered(foreign.address) == set()  # nothing of it recorded there

    # A data dir from before cluster ids (no meta.properties) holding partitions: a
    # registry that never registered the node refuses it too ...
    (tmp_path / "node-1" / "meta.properties").unlink()
    said = refused(tmp_path, foreign)
    assert "no cluster id" in said and foreign_id in said, said
    assert partition_dirs(tmp_path) == held
    assert not (tmp_path / "node-1" / "meta.properties").exists()

    # ... and its own registry, which knew it, admits it: it takes the cluster's id and
    # serves every record it held.
    back = node(tmp_path, own)
    processes.append(back)
    wait_for(lambda: registered(own.address) == {1}, 30, "node 1 back")
    assert wait_until(lambda: records_served(own.address) == PARTITIONS * RECORDS, timeout_s=30)
    assert partition_dirs(tmp_path) == held
    assert f"cluster.id={own_id}".encode() in (tmp_path / "node-1" / "meta.properties").read_bytes()


def test_a_node_with_an_unreadable_meta_properties_does_not_start(tmp_path, processes):
    own = gateway(tmp_path, "gateway")
    processes.append(own)
    (tmp_path / "node-1").mkdir()
    (tmp_path / "node-1" / "meta.properties").write_text("version=1\ncluster.id=Vw0MOr7c")
    process = node_process(
        1,
        "127.0.0.1:0",
        tmp_path / "node-1",
        own.internal_address,
        stderr_path=tmp_path / "node-1.log",
    )
    with pytest.raises(RuntimeError, match="did not start"):
        process.start(timeout_s=30)
    said = (tmp_path / "node-1.log").read_text()
    assert "cannot start" in said and "meta.properties" in said
    assert registered(own.address) == set()


@pytest.mark.slow
def test_a_running_node_whose_registry_is_replaced_by_another_clusters_stops(tmp_path, processes):
    """The registry at the node's gateway address lost (a new gateway with an empty data dir
    on the same port): the node's next heartbeat meets another cluster; it stops, nothing
    set aside, and serves again once its own registry is back."""
    port, internal_port = free_ports(2)
    own = gateway(tmp_path, "gateway-a", port, internal_port)
    processes.append(own)
    running = node(tmp_path, own)
    processes.append(running)
    wait_for(lambda: registered(own.address) == {1}, 30, "node 1 registered")
    with Admin(own.address) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 1)
    wait_for(lambda: len(partition_dirs(tmp_path)) == PARTITIONS, 30, "its partitions made")
    held = partition_dirs(tmp_path)
    own.stop()
    lost = gateway(tmp_path, "gateway-b", port, internal_port)  # a registry without it
    processes.append(lost)
    wait_for(lambda: not running.alive(), 30, "the node to stop")
    assert running.process is not None and running.process.returncode == 1
    said = (tmp_path / "node-1.log").read_text()
    assert load_file_image(tmp_path / "gateway-b").cluster_id in said
    assert partition_dirs(tmp_path) == held
    assert registered(lost.address) == set()
    lost.stop()
    own.start()
    again = node(tmp_path, own)
    processes.append(again)
    wait_for(lambda: registered(own.address) == {1}, 30, "node 1 back")
    assert wait_until(lambda: records_served(own.address) == 0, timeout_s=30)
    assert partition_dirs(tmp_path) == held
