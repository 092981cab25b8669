"""The fault campaign's share-group workload (tests/faults/share_workload.py) and its checker
(tests/faults/share_checker.py) against a real gateway and node: members SIGKILLed and
replaced mid-run, yet every record ends acknowledged once, none comes back after its
acknowledgement, delivery counts only grow, and what a killed member held unacknowledged is
delivered to another once its locks lapse (else it would never be done). The checker is
shown to catch each anomaly on made-up histories."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import confluent_kafka

from tests.cluster import LocalCluster
from tests.faults.history import Event, read_history
from tests.faults.share_checker import (
    ACKED_TWICE,
    AFTER_ACK,
    COUNT_LOST,
    NEVER_DONE,
    check_share,
)
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP = "share-work", "g-share-work"
PER_PARTITION = 100
DELIVERY_LIMIT = 5


def member(
    root: Path, cluster: LocalCluster, topic_id: str, name: str, hold_ms: int = 0
) -> subprocess.Popen:
    args = {
        "--bootstrap": cluster.kafka_address,
        "--topic": TOPIC,
        "--topic-id": topic_id,
        "--group": GROUP,
        "--history-dir": str(root / "history"),
        "--name": name,
        "--max-records": "7",
        "--hold-ms": str(hold_ms),
    }
    log = open(root / f"{name}.log", "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults.share_workload", *sum(args.items(), ())],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=log,
        )
    finally:
        log.close()


def test_share_members_killed_and_replaced_leave_every_record_done_once(tmp_path):
    cluster = LocalCluster(
        tmp_path / "cluster",
        nodes=1,
        share_auto_offset_reset="earliest",
        group_share_record_lock_duration_ms=2000,
        group_share_delivery_count_limit=DELIVERY_LIMIT,
    )
    processes: list[subprocess.Popen] = []
    try:
        cluster.admin.create_topic(TOPIC, 2, 1)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
        for i in range(2 * PER_PARTITION):
            producer.produce(TOPIC, value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        topic_id = cluster.gateway.registry.image.topic_id_of(TOPIC)
        expected = [(p, o) for p in (0, 1) for o in range(PER_PARTITION)]
        history = tmp_path / "history"
        # share-0 alone first, working 3 s on what it gets: killed then, it holds records
        # unacknowledged; the others start after.
        processes = [member(tmp_path, cluster, topic_id, "share-0", hold_ms=3000)]

        def holding() -> bool:
            mine = [e for e in read_history(history) if e.process == "share-0"]
            return bool(mine) and mine[-1].f == "share-fetch"

        assert wait_until(holding, 60), "share-0 got nothing"
        processes[0].send_signal(signal.SIGKILL)
        processes[0].wait()
        processes += [member(tmp_path, cluster, topic_id, f"share-{i}") for i in (1, 2)]

        def all_done() -> bool:
            return check_share(read_history(history), expected, DELIVERY_LIMIT).ok

        assert wait_until(all_done, 90), check_share(
            read_history(history), expected, DELIVERY_LIMIT
        ).summary()
        for process in processes[1:]:
            process.send_signal(signal.SIGTERM)
        for process in processes[1:]:
            assert process.wait(timeout=30) == 0
        verdict = check_share(read_history(history), expected, DELIVERY_LIMIT)
        assert verdict.ok, (verdict.summary(), dict(verdict.examples))
        assert verdict.acknowledged == len(expected)
        # What share-0 held went to the others once its locks lapsed, counted again.
        held = [e for e in read_history(history) if e.process == "share-0"][-1]
        taken = {(p, o) for p, o, _ in held.value["records"]}
        again = [
            (p, o, count)
            for e in read_history(history)
            if e.f == "share-fetch" and e.process != "share-0"
            for p, o, count in e.value["records"]
            if (p, o) in taken
        ]
        assert {(p, o) for p, o, _ in again} == taken and all(c >= 2 for _, _, c in again)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        cluster.close()


def event(process: str, type_: str, f: str, records: list, at: int) -> Event:
    return Event(process, type_, f, {"records": records}, at)


def test_the_share_checker_names_each_anomaly():
    history = [
        event("a", "ok", "share-fetch", [[0, 0, 1], [0, 1, 1], [0, 2, 1]], 1),
        event("a", "ok", "share-ack", [[0, 0], [0, 1]], 2),
        event("b", "ok", "share-fetch", [[0, 1, 2]], 3),  # after its ack
        event("b", "ok", "share-ack", [[0, 0]], 4),  # twice
        event("b", "ok", "share-fetch", [[0, 2, 1]], 5),  # count not above 1
        event("b", "invoke", "share-ack", [[0, 2]], 6),  # unknown, then delivered again:
        event("a", "ok", "share-fetch", [[0, 2, 2]], 7),  # so not done
        event("a", "invoke", "share-ack", [[0, 4]], 8),  # unknown, not delivered again: maybe
    ]
    verdict = check_share(history, [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)], DELIVERY_LIMIT)
    assert not verdict.ok
    assert verdict.counts == {ACKED_TWICE: 1, AFTER_ACK: 1, COUNT_LOST: 1, NEVER_DONE: 2}
    # A record delivered up to the limit is archived: done without an acknowledgement.
    archived = [event("a", "ok", "share-fetch", [[0, 3, DELIVERY_LIMIT]], 1)]
    assert check_share(archived, [(0, 3)], DELIVERY_LIMIT).ok
