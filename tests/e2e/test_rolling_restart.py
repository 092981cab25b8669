"""A rolling restart under acks=all load, as an operator (or a StatefulSet's rolling update
with the node's readiness probe) does it: every storage node, each a process, stopped in
turn with SIGTERM (a controlled shutdown: its leaderships move first), started again, and
the next one only once the restarted node is back in every ISR. Throughout, a watcher asks
the gateway for the partitions' leaders: none may be without one (offline). The clients are
the fault campaign's (tests/faults/): real processes recording their histories, a final
read, and the history checker's verdict: nothing acknowledged lost or duplicated."""

from __future__ import annotations

import threading

import pytest

from tests.faults.checker import Guarantees, check
from tests.faults.clients import ClientProcess, Clients
from tests.faults.cluster import HEAL_TIMEOUT_S, PARTITIONS, TOPIC, Cluster
from tests.faults.history import read_history
from tests.waiting import wait_for

FINAL_READ_TIMEOUT_S = 120.0
PROGRESS_RECORDS = 30


class OfflineWatch:
    """Samples every partition's leader until stopped; remembers any seen without one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.offline: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offline-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                partitions = self.cluster.topic().partitions
            except Exception:  # the gateway busy: not a leaderless partition
                continue
            self.samples += 1
            self.offline += [
                f"p{p.partition} (isr {list(p.isr)})" for p in partitions if p.leader < 0
            ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _back_in_every_isr(cluster: Cluster, node_id: int) -> bool:
    try:
        partitions = cluster.topic().partitions
    except Exception:
        return False
    return all(node_id in p.isr for p in partitions) and cluster.healed()


@pytest.mark.slow
def test_every_node_restarted_in_turn_under_load_keeps_every_partition_led_and_loses_nothing(
    tmp_path,
):
    history_dir = tmp_path / "history"
    cluster = Cluster(tmp_path)
    clients = None
    watch = None
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        wait_for(cluster.healed, HEAL_TIMEOUT_S, "the topic's replicas", cluster.state)
        common = ["--topic", TOPIC, "--history-dir", str(history_dir)]
        clients = Clients(
            tmp_path,
            producer_args=[*common, "--bootstrap", cluster.address, "--mode", "idempotent"],
            consumer_args=[*common, "--bootstrap", cluster.address, "--group", "rolling"],
        )
        clients.start("producer")
        clients.start("consumer")
        watch = OfflineWatch(cluster)
        for node_id in sorted(cluster.nodes):
            before = cluster.records_written()
            wait_for(
                lambda before=before: cluster.records_written() >= before + PROGRESS_RECORDS,
                60,
                "writes to go on",
                cluster.state,
            )
            assert cluster.nodes[node_id].stop() == 0  # SIGTERM: a controlled shutdown
            assert not cluster.nodes[node_id].alive()
            looked = watch.samples  # the watcher looks at least once while the node is down
            wait_for(lambda looked=looked: watch.samples > looked + 1, 30, "the watcher looking")
            cluster.nodes[node_id].start()
            wait_for(
                lambda node_id=node_id: _back_in_every_isr(cluster, node_id),
                HEAL_TIMEOUT_S,
                f"node {node_id} back in every ISR",
                cluster.state,
            )
        before = cluster.records_written()
        wait_for(
            lambda: cluster.records_written() >= before + PROGRESS_RECORDS,
            60,
            "writes after the last restart",
        )
        watch.stop()
        clients.stop_producers()
        wait_for(cluster.caught_up, HEAL_TIMEOUT_S, "every replica caught up", cluster.state)
        clients.stop_all()
        reader = ClientProcess(
            tmp_path,
            "final-read",
            "final-reader",
            [*common, "--bootstrap", cluster.address, "--max-seconds", str(FINAL_READ_TIMEOUT_S)],
        )
        assert reader.wait(FINAL_READ_TIMEOUT_S + 30) == 0, "the final read did not finish"
    finally:
        if watch is not None:
            watch.stop()
        if clients is not None:
            clients.stop_all()
        cluster.close()
    assert not watch.offline, f"partitions seen without a leader: {watch.offline[:10]}"
    verdict = check(read_history(history_dir), Guarantees.for_producer_mode("idempotent"))
    print(verdict.summary())
    assert verdict.ok, "\n".join(verdict.details())
    assert verdict.sends["ok"] > 4 * PROGRESS_RECORDS and verdict.final_records > 0
