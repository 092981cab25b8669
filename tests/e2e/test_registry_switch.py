"""`make run`, then `make run ETCD=1` on the same data, then `make run` again: each switch of
registry backend keeps the cluster whole. Real processes throughout (devtools.local_cluster:
a gateway, three storage nodes, a real etcd), records produced with acks=all and read back
by offset from every partition after each switch; no partition is ever set aside."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from seglog.client.admin import Admin
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.records import iter_records
from services.gateway.cluster.registry_bootstrap import load_file_image
from tests.batches import make_batch
from tests.cluster import local_cluster_command
from tests.waiting import wait_until

PARTITIONS = 3
# topic -> records produced to it under the first (file) registry
FIRST = {"orders": 2008, "clicks": 600, "audit": 90}
BATCH = 100


@contextmanager
def make_run(data: Path, *extra: str, nodes: int = 3) -> Iterator[str]:
    """devtools.local_cluster on free ports until the block ends; yields its address."""
    errors = data.parent / "cluster.err"
    with open(errors, "ab") as err:
        runner = subprocess.Popen(
            local_cluster_command(data, *extra, nodes=nodes),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        address = ""
        for _ in range(10):  # a line or two may come before the banner
            line = runner.stdout.readline()
            found = re.search(r"gateway on (\S+)", line)
            if found:
                address = found.group(1)
                break
        assert address, f"no banner; stderr: {errors.read_text()[-3000:]}"
        yield address
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=90)


def produce(client: GatewayClient, topic: str, count: int, prefix: str) -> None:
    sent = 0
    while sent < count:
        batches = {}
        for partition in range(PARTITIONS):
            n = min(BATCH, count - sent)
            if n <= 0:
                break
            batches[partition] = make_batch(
                [b"%s-%s-%06d" % (prefix.encode(), topic.encode(), sent + i) for i in range(n)]
            )
            sent += n
        results = client.produce(topic, batches, acks=-1)
        assert all(not r.error for r in results), results


def create_and_produce(address: str, topic: str, count: int, prefix: str) -> None:
    """A new topic of PARTITIONS partitions and `count` records in it (acks=all)."""
    with Admin(address.split(",")[0]) as admin:
        admin.create_topic(topic, PARTITIONS)
    client = GatewayClient(address, timeout_s=10)
    try:
        produce(client, topic, count, prefix)
    finally:
        client.close()


def read_all(client: GatewayClient, topic: str) -> list[bytes]:
    """Every record of every partition below its high watermark, by offset."""
    values = []
    for partition in range(PARTITIONS):
        end = client.list_offsets(topic, {partition: -1})[partition].offset
        offset = 0
        while offset < end:
            (answer,) = client.fetch([FetchPosition(topic, partition, offset)], max_wait_ms=0)
            assert answer.error == 0, answer.error_message
            records = [r for r in iter_records(answer.records) if r.offset >= offset]
            values += [r.value for r in records]
            offset = records[-1].offset + 1
    return values


def served(address: str, expected: dict[str, int]) -> dict[str, int]:
    """Records read back per topic, once every topic is listed and led."""
    client = GatewayClient(address, timeout_s=10)
    try:

        def every_topic_led() -> bool:
            try:
                topics = client.describe_topics(list(expected))
            except Exception:
                return False
            return all(not t.error and all(p.leader >= 0 for p in t.partitions) for t in topics)

        assert wait_until(every_topic_led, timeout_s=30)
        listed = {t.name for t in client.list_topics()}
        assert set(expected) <= listed, listed

        # After a restart a leader serves up to its high watermark, which moves to its log end
        # once its followers have fetched again (a busy machine: seconds). Records the cluster
        # lost would never come below it, and the count read below would say so.
        def high_watermarks_caught_up() -> bool:
            try:
                return all(
                    sum(
                        o.offset
                        for o in client.list_offsets(
                            t, dict.fromkeys(range(PARTITIONS), -1)
                        ).values()
                    )
                    >= count
                    for t, count in expected.items()
                )
            except Exception:
                return False

        wait_until(high_watermarks_caught_up, timeout_s=60)
        return {topic: len(read_all(client, topic)) for topic in expected}
    finally:
        client.close()


def strays(data: Path) -> list[str]:
    return sorted(p.name for p in data.glob("node-*/*-stray*"))


@pytest.mark.long  # three whole make runs
@pytest.mark.slow
def test_make_run_then_etcd_then_back_serves_every_record_and_strands_nothing(tmp_path):
    data = tmp_path / "data"
    with make_run(data) as address:
        with Admin(address) as admin:
            for topic in FIRST:
                admin.create_topic(topic, PARTITIONS)
        client = GatewayClient(address, timeout_s=10)
        try:
            for topic, count in FIRST.items():
                produce(client, topic, count, "file")
        finally:
            client.close()
        assert served(address, FIRST) == FIRST
    cluster_id = load_file_image(data / "gateway").cluster_id
    assert cluster_id and all(
        f"cluster.id={cluster_id}" in (data / f"node-{n}" / "meta.properties").read_text()
        for n in (1, 2, 3)
    )

    # The same data under etcd: the file registry copied in once, every record served.
    second = {**FIRST, "after-etcd": 300}
    with make_run(data, "--etcd") as address:
        assert served(address, FIRST) == FIRST
        create_and_produce(address, "after-etcd", second["after-etcd"], "etcd")
        assert served(address, second) == second
    assert not (data / "gateway" / "metadata").exists()  # moved aside: never served stale
    assert (data / "gateway" / "metadata.moved-to-etcd").is_dir()
    assert strays(data) == []

    # And back: etcd's registry (with the topic made under it) copied into the file one.
    with make_run(data) as address:
        assert served(address, second) == second
    assert load_file_image(data / "gateway").cluster_id == cluster_id
    assert (data / "etcd.moved-to-file").is_dir() and not (data / "etcd").exists()
    assert strays(data) == []

    # Under etcd once more (a fresh etcd, the file registry copied in again).
    with make_run(data, "--etcd") as address:
        assert served(address, second) == second
    assert strays(data) == []


@pytest.mark.long  # two whole make runs
@pytest.mark.slow
def test_a_cluster_begun_on_etcd_comes_to_the_file_registry_whole(tmp_path):
    data = tmp_path / "data"
    counts = {"made-on-etcd": 500}
    with make_run(data, "--etcd", nodes=1) as address:
        create_and_produce(address, "made-on-etcd", counts["made-on-etcd"], "etcd")
    with make_run(data, nodes=1) as address:
        assert served(address, counts) == counts
    assert (data / "etcd.moved-to-file").is_dir()
    assert strays(data) == []
