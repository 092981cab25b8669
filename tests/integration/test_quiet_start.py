"""A normal start and stop says nothing at WARNING or above (issue 57: every start warned
that each node was fenced, then that it no longer was — the fence every node starts under
until the registry first answers, an ordinary step). A fence after a lapsed session still
warns: that is the case an operator must see."""

from __future__ import annotations

import logging

from seglog.client.producer import Producer
from tests.cluster import LocalCluster
from tests.waiting import wait_until


def test_a_normal_start_produce_and_stop_log_no_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    cluster = LocalCluster(tmp_path, nodes=3)
    try:
        cluster.admin.create_topic("quiet", 3)
        with Producer(cluster.address) as producer:
            producer.send("quiet", b"v").get(timeout=30)
    finally:
        cluster.close()
    loud = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("services", "seglog"))
    ]
    assert loud == []


def test_deleted_topics_leave_no_copy_on_any_node_and_no_warning(tmp_path, caplog):
    """A deleted topic's replicas are deleted on every node (Kafka deletes a deleted topic's
    logs). Before: the registry's push reached a node before the gateway's delete did, the
    node set the partition aside as `-stray` (a WARNING), the delete then answered NOT_FOUND
    (another WARNING), and the copy stayed on disk for good — 9 copies for 3 topics."""
    caplog.set_level(logging.WARNING)
    cluster = LocalCluster(tmp_path, nodes=3)
    try:
        for i in range(3):
            cluster.admin.create_topic(f"gone{i}", 3, 3)
            with Producer(cluster.address) as producer:
                producer.send(f"gone{i}", b"v").get(timeout=30)
        # The race made certain for one topic: every node sets its replicas aside first, as
        # it does when the registry's push comes before the gateway's delete.
        for node in cluster.nodes.values():
            for partition in range(3):
                node.replicas.set_aside_partition("gone0", partition)
        for i in range(3):
            cluster.admin.delete_topic(f"gone{i}")

        def copies() -> list[str]:
            return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("gone*-*"))

        assert wait_until(lambda: copies() == [], timeout_s=30), copies()
    finally:
        cluster.close()
    loud = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("services", "seglog"))
    ]
    assert loud == []


def test_a_delete_cut_short_by_a_crash_is_finished_at_the_next_start(tmp_path):
    """A set-aside copy being deleted is renamed `-delete` first: a node that stops before
    removing it removes it when it next loads its logs, and never opens it."""
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        leftover = tmp_path / "node-1" / "cut-0-stray-delete"
        leftover.mkdir()
        (leftover / "00000000000000000000.log").write_bytes(b"")
        cluster.stop_node(1)
        cluster.start_node(1)
        assert not leftover.exists()
    finally:
        cluster.close()
