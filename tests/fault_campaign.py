"""A fault campaign against a real three-node cluster (separate processes on loopback):
idempotent acks=all producers and a consumer run while a driver SIGKILLs, SIGSTOPs/SIGCONTs
and SIGTERMs random storage nodes, leaders included, one fault at a time, each only once the
cluster has healed (every partition's ISR whole again), which is the failure model
replication factor 3 with min.insync.replicas=2 promises to survive.

The checker then asserts, over everything the cluster holds below the high watermark:
- every acknowledged record is there exactly once, at the offset it was acknowledged with,
  in its producer's order per partition;
- every record the consumer saw during the faults is still there, at the offset it saw it
  (it reads only below the high watermark, so nothing it saw may vanish);
- after healing, every replica of every partition holds byte-identical segment files.

    python -m tests.fault_campaign --cycles 40      # `make fault-campaign`; prints a summary

The e2e suite runs a short campaign (tests/e2e/test_fault_campaign.py).
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from seglog.client.consumer import Consumer
from seglog.client.gateway import GatewayClient
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from services.processes import ServerProcess, gateway_process, node_process

TOPIC = "campaign"
PARTITIONS = 3
NODES = 3
SESSION_TIMEOUT_MS = 2000
NODE_CONFIGS = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.timeout.ms": "5000",
}
HEAL_TIMEOUT_S = 90.0
# kill: SIGKILL and restart at once; crash: SIGKILL, restart after the registry noticed;
# stop: SIGSTOP until its session expired, then SIGCONT; term: SIGTERM (controlled shutdown)
# and restart.
ACTIONS = ("kill", "crash", "stop", "term")


def wait_for(predicate, timeout_s: float, what: str, state=None, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    if not predicate():
        seen = f"; state: {state()}" if state is not None else ""
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")


@dataclass
class Report:
    cycles: int = 0
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    acknowledged: int = 0
    failed_sends: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    divergent_replicas: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicates
            or self.out_of_order
            or self.vanished
            or self.divergent_replicas
        )

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (
            f"fault campaign: {self.cycles} cycles ({faults}); {self.acknowledged} records "
            f"acknowledged, {self.failed_sends} sends failed; lost {len(self.lost)}, "
            f"duplicated {len(self.duplicates)}, out of order {len(self.out_of_order)}, seen "
            f"then vanished {len(self.vanished)}, divergent replicas "
            f"{len(self.divergent_replicas)}"
        )


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "logs").mkdir(parents=True, exist_ok=True)
        # The cluster secret on, as make run has it: followers and the watching consumer
        # use the bulk path.
        env = {"SEGLOG_CLUSTER_SECRET": "campaign-cluster-secret-0123456789"}
        self.gateway = gateway_process(
            "127.0.0.1:0",
            root / "gateway",
            extra_args=[
                "--session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms",
                "200",
                "--default-replication-factor",
                "3",
                "--leader-imbalance-check-interval-seconds",
                "3",
            ],
            stderr_path=root / "logs" / "gateway.log",
            env=env,
        )
        self.address = self.gateway.start()
        self.nodes: dict[int, ServerProcess] = {}
        for node_id in range(1, NODES + 1):
            configs = [arg for k, v in NODE_CONFIGS.items() for arg in ("--config", f"{k}={v}")]
            node = node_process(
                node_id,
                "127.0.0.1:0",
                root / f"node-{node_id}",
                self.address,
                extra_args=["--heartbeat-interval-ms", "200", *configs],
                stderr_path=root / "logs" / f"node-{node_id}.log",
                env=env,
            )
            node.start()
            self.nodes[node_id] = node
        self.client = GatewayClient(self.address, timeout_s=10)
        # A node prints its address before its first heartbeat reaches the gateway.
        wait_for(self._all_registered, HEAL_TIMEOUT_S, "every node registered")

    def healed(self) -> bool:
        try:
            [topic] = self.client.describe_topics([TOPIC])
        except Exception:
            return False
        return all(
            p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) and not p.error
            for p in topic.partitions
        ) and all(node.alive() for node in self.nodes.values())

    def state(self) -> str:
        try:
            [topic] = self.client.describe_topics([TOPIC])
        except Exception as exc:
            return f"describe failed: {exc}"
        alive = {n: node.alive() for n, node in self.nodes.items()}
        parts = []
        for p in topic.partitions:
            replicas = [(r.node_id, r.log_end_offset, r.high_watermark) for r in p.replica_states]
            parts.append(
                f"p{p.partition} leader {p.leader} epoch {p.leader_epoch} isr {list(p.isr)} "
                f"replicas (node, end, hw) {replicas}"
            )
        return f"processes alive {alive}; " + "; ".join(parts)

    def _all_registered(self) -> bool:
        try:
            live = {n.node_id for n in self.client.describe_cluster().nodes if n.live}
        except Exception:
            return False
        return live == set(self.nodes)

    def live(self, node_id: int) -> bool:
        try:
            nodes = self.client.describe_cluster().nodes
        except Exception:
            return True
        return any(n.node_id == node_id and n.live for n in nodes)

    def caught_up(self) -> bool:
        """Every replica of every partition at the leader's log end, high watermarks equal."""
        try:
            [topic] = self.client.describe_topics([TOPIC])
        except Exception:
            return False
        for p in topic.partitions:
            ends = {(r.log_end_offset, r.high_watermark) for r in p.replica_states}
            if len(ends) != 1 or (p.log_end_offset, p.high_watermark) not in ends:
                return False
        return True

    def close(self) -> None:
        self.client.close()
        for node in self.nodes.values():
            if node.alive():
                try:
                    node.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
                except ProcessLookupError:
                    pass
            node.stop()
        self.gateway.stop()


class Producers:
    """Idempotent acks=all producers, each numbering its records and spreading them over the
    partitions; a record counts as acknowledged when its future resolves without error."""

    def __init__(self, address: str, count: int) -> None:
        self.acked: list[tuple[str, int, int, int]] = []  # (producer, seq, partition, offset)
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(address, f"p{i}"), daemon=True)
            for i in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, address: str, name: str) -> None:
        with Producer(
            address, linger_ms=2, request_timeout_ms=5000, delivery_timeout_ms=60_000
        ) as producer:
            seq = 0
            while not self._stop.is_set():
                window = []
                for _ in range(20):
                    partition = seq % PARTITIONS
                    value = f"{name}:{seq}".encode()
                    window.append(
                        (seq, partition, producer.send(TOPIC, value, partition=partition))
                    )
                    seq += 1
                for s, partition, future in window:
                    try:
                        metadata = future.get(timeout=90)
                    except Exception:
                        with self._lock:
                            self.failed += 1
                        continue
                    with self._lock:
                        self.acked.append((name, s, partition, metadata.offset))

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)


class Watcher:
    """A consumer reading every partition from the start while the faults happen."""

    def __init__(self, address: str) -> None:
        self.seen: list[tuple[int, int, bytes]] = []
        self._stop = threading.Event()
        self._consumer = Consumer(address, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        self._consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for record in self._consumer.poll(timeout_ms=100):
                    self.seen.append((record.partition, record.offset, record.value))
            except Exception:  # a leader moving: the next poll retries
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._consumer.close()


def read_everything(address: str) -> dict[int, dict[int, bytes]]:
    client = GatewayClient(address)
    ends = client.list_offsets(TOPIC, {p: -1 for p in range(PARTITIONS)})
    client.close()
    out: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    consumer = Consumer(address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
        len(out[p]) < ends[p].offset for p in range(PARTITIONS)
    ):
        for record in consumer.poll(timeout_ms=200):
            out[record.partition][record.offset] = record.value
    consumer.close()
    return out


def check(report: Report, producers: Producers, watcher: Watcher, final, root: Path) -> None:
    report.acknowledged = len(producers.acked)
    report.failed_sends = producers.failed
    occurrences: dict[bytes, int] = defaultdict(int)
    for records in final.values():
        for value in records.values():
            occurrences[value] += 1
    last_offset: dict[tuple[str, int], int] = {}
    for name, seq, partition, offset in sorted(producers.acked, key=lambda a: (a[0], a[1])):
        value = f"{name}:{seq}".encode()
        if final[partition].get(offset) != value:
            report.lost.append(f"{value.decode()} acknowledged at {partition}/{offset}")
        if occurrences[value] > 1:
            report.duplicates.append(f"{value.decode()} x{occurrences[value]}")
        previous = last_offset.get((name, partition), -1)
        if offset <= previous:
            report.out_of_order.append(f"{value.decode()} at {offset} after {previous}")
        last_offset[(name, partition)] = offset
    for partition, offset, value in watcher.seen:
        if final[partition].get(offset) != value:
            report.vanished.append(f"{partition}/{offset} was {value!r}")


def compare_replicas(report: Report, root: Path) -> None:
    """With every node stopped, each partition's segment files must be equal on all nodes."""
    for partition in range(PARTITIONS):
        copies = {}
        for node_id in range(1, NODES + 1):
            directory = root / f"node-{node_id}" / f"{TOPIC}-{partition}"
            copies[node_id] = {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}
        reference = copies[1]
        for node_id, files in copies.items():
            if files != reference:
                report.divergent_replicas.append(f"{TOPIC}-{partition} on node {node_id}")


def run(root: Path, cycles: int, seed: int, producers_count: int = 3) -> Report:
    rng = random.Random(seed)
    report = Report()
    cluster = Cluster(root)
    producers: Producers | None = None
    watcher: Watcher | None = None
    try:
        cluster.client.create_topic(TOPIC, PARTITIONS, 3)
        wait_for(cluster.healed, HEAL_TIMEOUT_S, "the topic's replicas")
        producers = Producers(cluster.address, producers_count)
        watcher = Watcher(cluster.address)
        producers.start()
        watcher.start()
        for _ in range(cycles):
            wait_for(
                cluster.healed,
                HEAL_TIMEOUT_S,
                "every ISR to be whole again",
                lambda: cluster.state(),
            )
            before = producers.count()
            wait_for(lambda b=before: producers.count() > b + 50, 60, "acknowledged writes")
            node_id = rng.randint(1, NODES)
            action = rng.choice(ACTIONS)
            node = cluster.nodes[node_id]
            if action in ("kill", "crash"):
                node.kill()
                if action == "crash":
                    wait_for(lambda n=node_id: not cluster.live(n), 30, "the crash noticed")
                node.start()
            elif action == "stop":
                assert node.process is not None
                node.process.send_signal(signal.SIGSTOP)
                # Until its session expired: it is fenced and must rejoin when it wakes.
                wait_for(lambda n=node_id: not cluster.live(n), 30, "the stopped node noticed")
                node.process.send_signal(signal.SIGCONT)
            else:
                node.stop()  # SIGTERM: controlled shutdown first
                node.start()
            report.faults[action] += 1
            report.cycles += 1
        wait_for(cluster.healed, HEAL_TIMEOUT_S, "the cluster to heal")
        before = producers.count()
        wait_for(lambda: producers.count() > before + 50, 60, "writes after healing")
        producers.stop()
        wait_for(cluster.caught_up, HEAL_TIMEOUT_S, "every replica to catch up")
        watcher.stop()
        final = read_everything(cluster.address)
        check(report, producers, watcher, final, root)
    finally:
        if producers is not None:
            producers.stop()
        if watcher is not None:
            watcher.stop()
        cluster.close()
    compare_replicas(report, root)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_campaign")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--producers", type=int, default=3)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="seglog-campaign-"))
    print(f"fault campaign: seed {args.seed}, data and logs in {root}", flush=True)
    report = run(root, args.cycles, args.seed, args.producers)  # kept when it raises
    print(report.summary())
    for kind in ("lost", "duplicates", "out_of_order", "vanished", "divergent_replicas"):
        for line in getattr(report, kind)[:10]:
            print(f"  {kind}: {line}")
    if report.ok:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
