"""A normal start and stop says nothing at WARNING or above (issue 57: every start warned
that each node was fenced, then that it no longer was — the fence every node starts under
until the registry first answers, an ordinary step). A fence after a lapsed session still
warns: that is the case an operator must see."""

from __future__ import annotations

import logging

from seglog.client.producer import Producer
from tests.cluster import LocalCluster


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
