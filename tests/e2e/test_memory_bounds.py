"""A node's memory under attack, measured on a real process (its peak resident set, VmHWM):
bounded per node, not per request."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from seglog.errors import CorruptRecordError, RequestTimedOutError
from seglog.records import CompressionType
from tests.batches import make_batch
from tests.e2e.test_processes import ProcessCluster

MIB = 1024 * 1024


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def one_node(tmp_path):
    cluster = ProcessCluster(tmp_path, nodes=1)
    yield cluster
    cluster.close()


def test_concurrent_gzip_bombs_stay_within_the_nodes_inflation_budget(one_node):
    """16 concurrent produce requests, each a ~65 KB gzip batch that inflates past the 64 MiB
    per-batch cap (max.uncompressed.batch.bytes): each is refused, and the node's peak memory
    grows by about its 256 MiB budget for inflating batches, not by 16 x 64 MiB (before the
    budget: 272 MB -> 3.4 GB). A normal batch is accepted afterwards."""
    one_node.admin.create_topic("bombed", 1, 1)
    bomb = make_batch([b"\0" * (65 * MIB)], compression=CompressionType.GZIP)
    assert len(bomb) < 100_000
    node = one_node.nodes[1]
    before = _peak_rss_bytes(node.pid)

    def attack(_: int) -> type[Exception]:
        try:
            one_node.client.produce("bombed", {0: bomb})
        except (CorruptRecordError, RequestTimedOutError) as exc:
            return type(exc)
        raise AssertionError("a bomb was accepted")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(attack, range(16)))
    assert set(outcomes) <= {CorruptRecordError, RequestTimedOutError}
    growth = _peak_rss_bytes(node.pid) - before
    assert growth < 256 * MIB + 128 * MIB, f"peak grew by {growth / MIB:.0f} MiB"
    [answer] = one_node.client.produce("bombed", {0: make_batch([b"fine"])})
    assert answer.error == 0
