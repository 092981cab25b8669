"""The fault campaign: a real cluster (a gateway and three storage nodes, each a process;
RF 3, min ISR 2), real client processes recording their histories (tests/faults/workload.py),
a seeded random schedule of faults, then healing, a final read of every partition, and the
checker's verdict (tests/faults/checker.py), which alone decides pass or fail.

    python -m tests.fault_campaign --cycles 40 --seed 7 --faults node-kill,node-pause \
        --producer idempotent        # `make fault-campaign CYCLES= SEED= FAULTS= PRODUCER=`

Faults are small objects: `start(cluster, rng)` injects one and says what it did, `heal`
undoes it. At most one storage node is harmed at a time (what RF 3 with min ISR 2 promises to
survive); a gateway or client-link fault may overlap with it. Network faults need root and
tests/faults/netns.py (every server in its own network namespace); answer faults need
tests/faults/proxy.py (clients reach the gateway through a proxy).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from seglog.client.gateway import LATEST, GatewayClient
from services.processes import ServerProcess, gateway_process, node_process
from tests.faults.checker import Guarantees, Verdict, check
from tests.faults.history import read_history
from tests.ports import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "campaign"
PARTITIONS = 3
NODES = 3
GROUP = "campaign-readers"
SESSION_TIMEOUT_MS = 2000
PRODUCER_REQUEST_TIMEOUT_MS = 3000
NODE_CONFIGS = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.timeout.ms": "5000",
}
CLUSTER_SECRET = "campaign-cluster-secret-0123456789"
HEAL_TIMEOUT_S = 90.0
NOTICE_TIMEOUT_S = 30.0
PROGRESS_RECORDS = 50
PROGRESS_TIMEOUT_S = 60.0
CLIENT_STOP_TIMEOUT_S = 60.0
FINAL_READ_TIMEOUT_S = 180.0
NETWORK_LAB_PREFIX = "sgfc"


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    state: Callable[[], str] | None = None,
    interval_s: float = 0.05,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    if not predicate():
        seen = f"; state: {state()}" if state is not None else ""
        raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")


class Cluster:
    """A gateway on a fixed port (so clients and nodes find it again after it restarts) and
    three storage nodes, each a process; with a network lab, each in a namespace of its own
    listening on its namespace's address; with a proxy, clients reach the gateway through it."""

    def __init__(self, root: Path, lab: Any = None, use_proxy: bool = False) -> None:
        self.root = root
        self.lab = lab
        (root / "logs").mkdir(parents=True, exist_ok=True)
        env = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET}
        self.hosts: dict[str, str] = {}  # process name -> the IP it listens on
        if lab is not None:
            for name in ("gateway", *(f"node-{n}" for n in range(1, NODES + 1))):
                self.hosts[name] = lab.add_host(name)
        [gateway_port] = free_ports(1)
        gateway_ip = self.hosts.get("gateway", "127.0.0.1")
        self.gateway = gateway_process(
            f"{gateway_ip}:{gateway_port}",
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
            **self._prefix("gateway"),
        )
        self.address = self.gateway.start()
        self.nodes: dict[int, ServerProcess] = {}
        for node_id in range(1, NODES + 1):
            configs = [arg for k, v in NODE_CONFIGS.items() for arg in ("--config", f"{k}={v}")]
            node = node_process(
                node_id,
                f"{self.hosts.get(f'node-{node_id}', '127.0.0.1')}:0",
                root / f"node-{node_id}",
                self.address,
                extra_args=["--heartbeat-interval-ms", "200", *configs],
                stderr_path=root / "logs" / f"node-{node_id}.log",
                env=env,
                **self._prefix(f"node-{node_id}"),
            )
            node.start()
            self.nodes[node_id] = node
        self.client = GatewayClient(self.address, timeout_s=5)
        self.proxy: Any = None
        if use_proxy:
            from tests.faults.proxy import FaultProxy

            self.proxy = FaultProxy(self.address)
        # A node prints its address before its first heartbeat reaches the gateway.
        wait_for(self.all_registered, HEAL_TIMEOUT_S, "every node registered")

    def _prefix(self, host: str) -> dict[str, Any]:
        if self.lab is None:
            return {}
        return {"command_prefix": self.lab.command_prefix(host)}

    @property
    def client_address(self) -> str:
        """Where clients connect: the proxy when there is one, else the gateway."""
        return self.proxy.address if self.proxy is not None else self.address

    def topic(self) -> Any:
        [topic] = self.client.describe_topics([TOPIC])
        return topic

    def healed(self) -> bool:
        try:
            topic = self.topic()
        except Exception:
            return False
        return all(
            p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) and not p.error
            for p in topic.partitions
        ) and all(process.alive() for process in (self.gateway, *self.nodes.values()))

    def state(self) -> str:
        alive = {n: node.alive() for n, node in self.nodes.items()}
        try:
            topic = self.topic()
        except Exception as exc:
            return f"processes alive {alive}; describe failed: {exc}"
        parts = []
        for p in topic.partitions:
            replicas = [(r.node_id, r.log_end_offset, r.high_watermark) for r in p.replica_states]
            parts.append(
                f"p{p.partition} leader {p.leader} epoch {p.leader_epoch} isr {list(p.isr)} "
                f"replicas (node, end, hw) {replicas}"
            )
        return f"processes alive {alive}; " + "; ".join(parts)

    def all_registered(self) -> bool:
        try:
            live = {n.node_id for n in self.client.describe_cluster().nodes if n.live}
        except Exception:
            return False
        return live == set(self.nodes)

    def live(self, node_id: int) -> bool:
        """Whether the registry counts the node live (True when it cannot be asked)."""
        try:
            nodes = self.client.describe_cluster().nodes
        except Exception:
            return True
        return any(n.node_id == node_id and n.live for n in nodes)

    def leader_of(self, partition: int) -> int:
        try:
            for p in self.topic().partitions:
                if p.partition == partition:
                    return int(p.leader)
        except Exception:
            pass
        return -1

    def records_written(self) -> int:
        """The sum of the partitions' high watermarks (0 when the gateway cannot answer)."""
        try:
            ends = self.client.list_offsets(TOPIC, dict.fromkeys(range(PARTITIONS), LATEST))
        except Exception:
            return 0
        return sum(max(0, r.offset) for r in ends.values())

    def caught_up(self) -> bool:
        """Every replica of every partition at the leader's log end, high watermarks equal."""
        try:
            topic = self.topic()
        except Exception:
            return False
        for p in topic.partitions:
            ends = {(r.log_end_offset, r.high_watermark) for r in p.replica_states}
            if len(ends) != 1 or (p.log_end_offset, p.high_watermark) not in ends:
                return False
        return True

    def restart_gateway(self) -> None:
        self.address = self.gateway.start()

    def close(self) -> None:
        self.client.close()
        if self.proxy is not None:
            self.proxy.close()
        for process in (*self.nodes.values(), self.gateway):
            if process.alive():
                try:
                    os.kill(process.pid, signal.SIGCONT)  # a paused process cannot stop
                except ProcessLookupError:
                    pass
            process.stop()


# -- faults ---------------------------------------------------------------------------------

# What a fault harms; faults harming the same thing never overlap.
NODE, GATEWAY, CLIENT_LINK = "node", "gateway", "client-link"


class Fault(Protocol):
    name: str
    target: str  # NODE, GATEWAY or CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str: ...
    def heal(self, cluster: Cluster) -> None: ...


def pick_node(cluster: Cluster, rng: random.Random) -> tuple[int, str]:
    """A node, half the time the leader of a random partition."""
    if rng.random() < 0.5:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader in cluster.nodes:
            return leader, f"node {leader} (leader of p{partition})"
    node_id = rng.choice(sorted(cluster.nodes))
    return node_id, f"node {node_id}"


@dataclass
class NodeKill:
    """SIGKILL a node and restart it at once."""

    name: str = "node-kill"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        node_id, which = pick_node(cluster, rng)
        cluster.nodes[node_id].kill()
        cluster.nodes[node_id].start()
        return f"SIGKILL {which}, restarted at once"

    def heal(self, cluster: Cluster) -> None:
        pass


@dataclass
class NodeCrash:
    """SIGKILL a node; it comes back only once the registry noticed it gone."""

    name: str = "node-crash"
    target: str = NODE
    node_id: int = -1

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        cluster.nodes[self.node_id].kill()
        wait_for(lambda: not cluster.live(self.node_id), NOTICE_TIMEOUT_S, "the crash noticed")
        return f"SIGKILL {which}, down until healed"

    def heal(self, cluster: Cluster) -> None:
        cluster.nodes[self.node_id].start()


@dataclass
class NodePause:
    """SIGSTOP a node for longer than its session and the producer's request timeout."""

    name: str = "node-pause"
    target: str = NODE
    node_id: int = -1
    stopped_at: float = 0.0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        os.kill(cluster.nodes[self.node_id].pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        return f"SIGSTOP {which}"

    def heal(self, cluster: Cluster) -> None:
        wait_for(lambda: not cluster.live(self.node_id), NOTICE_TIMEOUT_S, "the pause noticed")
        past_request_timeout_s = self.stopped_at + PRODUCER_REQUEST_TIMEOUT_MS / 1000 + 1
        wait_for(lambda: time.monotonic() > past_request_timeout_s, 60, "a request timeout")
        os.kill(cluster.nodes[self.node_id].pid, signal.SIGCONT)


@dataclass
class NodeTerm:
    """SIGTERM a node (controlled shutdown); restarted when healed."""

    name: str = "node-term"
    target: str = NODE
    node_id: int = -1

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        cluster.nodes[self.node_id].stop()
        return f"SIGTERM {which}"

    def heal(self, cluster: Cluster) -> None:
        cluster.nodes[self.node_id].start()


@dataclass
class GatewayKill:
    name: str = "gateway-kill"
    target: str = GATEWAY

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        cluster.gateway.kill()
        cluster.restart_gateway()
        return "SIGKILL the gateway, restarted at once"

    def heal(self, cluster: Cluster) -> None:
        pass


@dataclass
class GatewayTerm:
    name: str = "gateway-term"
    target: str = GATEWAY

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        cluster.gateway.stop()
        return "SIGTERM the gateway"

    def heal(self, cluster: Cluster) -> None:
        cluster.restart_gateway()


@dataclass
class GatewayPause:
    """SIGSTOP the gateway past the nodes' sessions and the producer's request timeout."""

    name: str = "gateway-pause"
    target: str = GATEWAY
    stopped_at: float = 0.0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        os.kill(cluster.gateway.pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        return "SIGSTOP the gateway"

    def heal(self, cluster: Cluster) -> None:
        pause_s = max(SESSION_TIMEOUT_MS, PRODUCER_REQUEST_TIMEOUT_MS) / 1000 + 1
        wait_for(lambda: time.monotonic() > self.stopped_at + pause_s, 60, "the pause to last")
        os.kill(cluster.gateway.pid, signal.SIGCONT)


@dataclass
class LeaderCutFromFollowers:
    """The leader of a partition cut from the other nodes (the gateway and clients still
    reach it)."""

    name: str = "partition-leader-from-followers"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader not in cluster.nodes:
            leader = rng.choice(sorted(cluster.nodes))
        others = [f"node-{n}" for n in cluster.nodes if n != leader]
        cluster.lab.cut([f"node-{leader}"], others)
        hold_network_fault(rng)
        return f"cut node {leader} (leader of p{partition}) from its followers"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class LeaderCutFromGateway:
    """The leader of a partition cut from the gateway (the controller); its followers and
    the clients still reach it."""

    name: str = "partition-leader-from-gateway"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader not in cluster.nodes:
            leader = rng.choice(sorted(cluster.nodes))
        cluster.lab.cut([f"node-{leader}"], ["gateway"])
        hold_network_fault(rng)
        return f"cut node {leader} (leader of p{partition}) from the gateway"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class SlowFollower:
    name: str = "slow-follower"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        followers = sorted(n for n in cluster.nodes if n != leader)
        node_id = rng.choice(followers)
        rate_kbit = rng.choice((64, 256, 1024))
        cluster.lab.slow(f"node-{node_id}", rate_kbit=rate_kbit, delay_ms=rng.choice((0, 200)))
        hold_network_fault(rng)
        return f"slowed node {node_id} (a follower of p{partition}) to {rate_kbit} kbit/s"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class DropAnswers:
    """The gateway's next answers to clients lost on the way (the requests did land)."""

    name: str = "drop-answers"
    target: str = CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        count = rng.randint(1, 5)
        before = cluster.proxy.answers_dropped
        cluster.proxy.drop_answers(count)
        wait_for(
            lambda: cluster.proxy.answers_dropped >= before + count,
            NOTICE_TIMEOUT_S,
            f"{count} answers dropped",
        )
        return f"dropped {count} answers"

    def heal(self, cluster: Cluster) -> None:
        cluster.proxy.heal()


@dataclass
class DelayAnswers:
    """Answers held past the producer's request timeout, so it retries what landed."""

    name: str = "delay-answers"
    target: str = CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        delay_ms = PRODUCER_REQUEST_TIMEOUT_MS + rng.choice((-2000, 500, 2000))
        cluster.proxy.delay_answers(delay_ms)
        hold_network_fault(rng)
        return f"delayed answers by {delay_ms} ms"

    def heal(self, cluster: Cluster) -> None:
        cluster.proxy.heal()


def hold_network_fault(rng: random.Random) -> None:
    """A network fault lasts a random few seconds (its duration is part of the fault)."""
    time.sleep(rng.uniform(2.0, 6.0))


PROCESS_FAULTS: dict[str, Callable[[], Fault]] = {
    "node-kill": NodeKill,
    "node-crash": NodeCrash,
    "node-pause": NodePause,
    "node-term": NodeTerm,
    "gateway-kill": GatewayKill,
    "gateway-term": GatewayTerm,
    "gateway-pause": GatewayPause,
}
NETWORK_FAULTS: dict[str, Callable[[], Fault]] = {
    "partition-leader-from-followers": LeaderCutFromFollowers,
    "partition-leader-from-gateway": LeaderCutFromGateway,
    "slow-follower": SlowFollower,
}
PROXY_FAULTS: dict[str, Callable[[], Fault]] = {
    "drop-answers": DropAnswers,
    "delay-answers": DelayAnswers,
}
ALL_FAULTS = {**PROCESS_FAULTS, **NETWORK_FAULTS, **PROXY_FAULTS}


def available_faults() -> list[str]:
    """The faults this machine and work tree can inject: network faults need root and the
    network lab, answer faults the proxy."""
    names = list(PROCESS_FAULTS)
    if os.geteuid() == 0 and _importable("tests.faults.netns"):
        names += list(NETWORK_FAULTS)
    if _importable("tests.faults.proxy"):
        names += list(PROXY_FAULTS)
    return names


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# -- clients --------------------------------------------------------------------------------


class ClientProcess:
    """One workload process (tests/faults/workload.py), stopped by its own pid."""

    def __init__(self, root: Path, role: str, name: str, args: Sequence[str]) -> None:
        self.name = name
        log = open(root / "logs" / f"{name}.log", "ab")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.workload", role, "--name", name, *args],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()

    def stop(self, timeout_s: float = CLIENT_STOP_TIMEOUT_S) -> int:
        """SIGTERM (the client finishes what it is doing), SIGKILL past `timeout_s`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return self.process.returncode


# -- the campaign ---------------------------------------------------------------------------


@dataclass
class CampaignConfig:
    cycles: int = 40
    seed: int = 0
    faults: Sequence[str] = ()  # empty: every available fault
    producer_mode: str = "idempotent"
    producers: int = 2
    consumers: int = 2
    producer_interval_ms: float = 2.0
    overlap_probability: float = 0.3


@dataclass
class CampaignReport:
    config: CampaignConfig
    cycles: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    schedule: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the cluster not healing, stalls
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is not None and self.verdict.ok

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"fault campaign: {self.cycles} cycles, seed {self.config.seed}, producer "
            f"{self.config.producer_mode}; faults: {faults}",
        ]
        if self.verdict is not None:
            lines.append(f"checker: {self.verdict.summary()}")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def run(root: Path, config: CampaignConfig, log: Callable[[str], None] = print) -> CampaignReport:
    names = list(config.faults) or available_faults()
    unknown = [n for n in names if n not in ALL_FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {sorted(ALL_FAULTS)}")
    rng = random.Random(config.seed)
    report = CampaignReport(config)
    history_dir = root / "history"
    lab = _open_lab() if any(n in NETWORK_FAULTS for n in names) else None
    cluster: Cluster | None = None
    producers: list[ClientProcess] = []
    consumers: list[ClientProcess] = []
    try:
        cluster = Cluster(root, lab, use_proxy=any(n in PROXY_FAULTS for n in names))
        cluster.client.create_topic(TOPIC, PARTITIONS, 3)
        wait_for(cluster.healed, HEAL_TIMEOUT_S, "the topic's replicas")
        common = ["--topic", TOPIC, "--history-dir", str(history_dir)]
        producers = [
            ClientProcess(
                root,
                "producer",
                f"producer-{i}",
                [
                    *common,
                    "--bootstrap",
                    cluster.client_address,
                    "--mode",
                    config.producer_mode,
                    "--interval-ms",
                    str(config.producer_interval_ms),
                    "--request-timeout-ms",
                    str(PRODUCER_REQUEST_TIMEOUT_MS),
                ],
            )
            for i in range(config.producers)
        ]
        consumers = [
            ClientProcess(
                root,
                "consumer",
                f"consumer-{i}",
                [*common, "--bootstrap", cluster.client_address, "--group", GROUP],
            )
            for i in range(config.consumers)
        ]
        for _ in range(config.cycles):
            _one_cycle(cluster, names, rng, report, log, config.overlap_probability)
        _settle(cluster, report)
        for client in producers:
            client.stop()
        _note_timeout(report, cluster.caught_up, "every replica to catch up")
        for client in consumers:
            client.stop()
        reader = ClientProcess(
            root,
            "final-read",
            "final-reader",
            [
                *common,
                "--bootstrap",
                cluster.address,
                "--max-seconds",
                str(FINAL_READ_TIMEOUT_S),
            ],
        )
        if reader.wait(FINAL_READ_TIMEOUT_S + 30) != 0:
            report.problems.append("the final read did not reach every partition's end")
    finally:
        for client in (*producers, *consumers):
            client.stop()
        if cluster is not None:
            cluster.close()
        if lab is not None:
            lab.close()
    mode = Guarantees.for_producer_mode(config.producer_mode)
    report.verdict = check(read_history(history_dir), mode)
    return report


def _open_lab() -> Any:
    from tests.faults.netns import NetworkLab

    return NetworkLab(NETWORK_LAB_PREFIX)


def _one_cycle(
    cluster: Cluster,
    names: list[str],
    rng: random.Random,
    report: CampaignReport,
    log: Callable[[str], None],
    overlap_probability: float,
) -> None:
    _settle(cluster, report)
    chosen = [ALL_FAULTS[rng.choice(names)]()]
    others = [n for n in names if ALL_FAULTS[n]().target != chosen[0].target]
    if others and rng.random() < overlap_probability:
        chosen.append(ALL_FAULTS[rng.choice(others)]())
    # A node fault first: noticing a node down needs the gateway up.
    chosen.sort(key=lambda fault: fault.target != NODE)
    started: list[Fault] = []
    try:
        for fault in chosen:
            what = fault.start(cluster, rng)
            started.append(fault)
            report.faults[fault.name] += 1
            report.schedule.append(f"cycle {report.cycles + 1}: {what}")
            log(f"cycle {report.cycles + 1}: {what}")
    except TimeoutError as exc:
        report.problems.append(f"cycle {report.cycles + 1}: {exc}")
    finally:
        for fault in reversed(started):
            try:
                fault.heal(cluster)
            except TimeoutError as exc:
                report.problems.append(f"cycle {report.cycles + 1}: healing {fault.name}: {exc}")
    report.cycles += 1


def _settle(cluster: Cluster, report: CampaignReport) -> None:
    """Wait for every ISR to be whole again and for writes to go on; a cluster that does
    not is a finding, written down, and the campaign goes on."""
    if not _note_timeout(report, cluster.healed, "every ISR to be whole again", cluster.state):
        return
    before = cluster.records_written()
    _note_timeout(
        report,
        lambda: cluster.records_written() >= before + PROGRESS_RECORDS,
        "writes to go on",
        cluster.state,
        PROGRESS_TIMEOUT_S,
    )


def _note_timeout(
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_campaign")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--faults", default="", help=f"comma-separated, of {', '.join(ALL_FAULTS)}; default all"
    )
    parser.add_argument(
        "--producer", choices=("idempotent", "plain", "acks1"), default="idempotent"
    )
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    args = parser.parse_args(argv)
    config = CampaignConfig(
        cycles=args.cycles,
        seed=args.seed,
        faults=[f for f in args.faults.split(",") if f],
        producer_mode=args.producer,
        producers=args.producers,
        consumers=args.consumers,
    )
    root = Path(tempfile.mkdtemp(prefix="seglog-campaign-"))
    print(f"fault campaign: seed {config.seed}, data, logs and histories in {root}", flush=True)
    report = run(root, config, log=lambda line: print(line, flush=True))
    print(report.summary())
    if report.verdict is not None:
        for line in report.verdict.details():
            print(line)
    if report.ok and not report.problems:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
