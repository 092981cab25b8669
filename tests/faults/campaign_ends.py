"""What a fault campaign (campaign.py) does around its faults rather than in them: waiting
for the cluster to heal after each cycle, the records or transactions workload's final read
once every client stopped, and the replicas kept aside when they diverged."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tests.faults import txn_campaign
from tests.faults.clients import ClientProcess
from tests.faults.cluster import HEAL_TIMEOUT_S, PARTITIONS, TOPIC, Cluster
from tests.waiting import wait_for

if TYPE_CHECKING:
    from tests.faults.campaign import CampaignReport

PROGRESS_RECORDS = 50
PROGRESS_TIMEOUT_S = 60.0
FINAL_READ_TIMEOUT_S = 180.0


def final_read(
    root: Path, cluster: Cluster, transactional: bool, report: CampaignReport, history_dir: Path
) -> None:
    """The records or transactions workload's final reader, once every client stopped."""
    reader_timeout_s = FINAL_READ_TIMEOUT_S
    if transactional:
        reader_timeout_s += txn_campaign.STABLE_WAIT_S
        reader = txn_campaign.final_reader(root, cluster, history_dir, FINAL_READ_TIMEOUT_S)
    else:
        reader = ClientProcess(
            root,
            "final-read",
            "final-reader",
            [
                "--topic",
                TOPIC,
                "--history-dir",
                str(history_dir),
                "--bootstrap",
                cluster.address,
                "--max-seconds",
                str(FINAL_READ_TIMEOUT_S),
            ],
        )
    report.final_read_complete = reader.wait(reader_timeout_s + 30) == 0
    if not report.final_read_complete:
        report.problems.append("the final read did not reach every partition's end")


def keep_replicas(cluster: Cluster, into: Path) -> None:
    """Copy every node's partitions of the campaign topic aside, for the diverged replicas'
    post-mortem: a node's own disk goes with the cluster (its power cuts' copies are
    removed)."""
    for node_id in sorted(cluster.nodes):
        for partition in range(PARTITIONS):
            source = cluster.root / f"node-{node_id}" / f"{TOPIC}-{partition}"
            if source.is_dir():
                shutil.copytree(source, into / f"node-{node_id}" / source.name)


def settle(cluster: Cluster, report: CampaignReport) -> None:
    """Wait for every ISR to be whole again and for writes to go on; a cluster that does
    not is a finding, written down, and the campaign goes on."""
    if not note_timeout(report, cluster.healed, "every ISR to be whole again", cluster.state):
        return
    before = cluster.records_written()
    note_timeout(
        report,
        lambda: cluster.records_written() >= before + PROGRESS_RECORDS,
        "writes to go on",
        cluster.state,
        PROGRESS_TIMEOUT_S,
    )


def note_timeout(
    report: CampaignReport,
    predicate: Callable[[], bool],
    what: str,
    state: Callable[[], str] | None = None,
    timeout_s: float = HEAL_TIMEOUT_S,
) -> bool:
    try:
        wait_for(predicate, timeout_s, what, state)
    except TimeoutError as exc:
        report.problems.append(f"after cycle {report.cycles}: {exc}")
        return False
    return True
