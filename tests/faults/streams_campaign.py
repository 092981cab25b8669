"""The fault campaign's Kafka Streams workload (`--workload streams`): the exactly_once_v2 word
count (tests/java/WordCountEos.java) as two application instances of two stream threads each,
over the campaign's topic (3 partitions) as its input, on the gateways' Kafka port (behind the
Kafka fault proxies when answer faults are on), while the campaign's faults run. What differs
from the other workloads is who the clients are (tests/faults/streams_workload.py: producers
of lines, read_committed readers of the counts, and the instances, which `client-kill`
SIGKILLs too: an instance killed is started again on its own state dir, as a supervisor
restarts it), how the gateways are set (txn_campaign's: timed-out transactions found every
second), how it ends (the final read runs while the instances still run, until the output has
caught up with the input) and who judges (tests/faults/streams_checker.py)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.faults.clients import ClientProcess, Clients
from tests.faults.cluster import PARTITIONS, TOPIC, Cluster
from tests.waiting import wait_until

MODULE = "tests.faults.streams_workload"
APP_ID = "campaign-wordcount"
OUTPUT_TOPIC = "campaign-counts"
INSTANCES = 2
THREADS = 2
# The input's pace, per producer: 2 lines of 5 words every 100 ms.
LINES_PER_TICK = 2
INTERVAL_MS = 100
# The final read waits this long for the instances to catch up with the input (a rebalance,
# restores, a transaction timed out after an instance's last kill).
CATCH_UP_S = 480.0
STARTUP_S = 300.0


class StreamsClients:
    """The input's producers and the output's readers (a `Clients`), and the application's
    instances, each instance slot keeping its state dir across restarts."""

    def __init__(self, root: Path, cluster: Cluster, history_dir: Path, classes: Path) -> None:
        self.root = root
        bootstrap = ",".join(cluster.kafka_client_addresses)
        self.clients = Clients(
            root,
            producer_args=[
                "--bootstrap", bootstrap, "--topic", TOPIC, "--history-dir", str(history_dir),
                "--lines", str(LINES_PER_TICK), "--interval-ms", str(INTERVAL_MS),
            ],
            consumer_args=[
                "--bootstrap", bootstrap, "--topic", OUTPUT_TOPIC, "--partitions",
                str(PARTITIONS), "--history-dir", str(history_dir),
            ],
            module=MODULE,
            producer_variants=((),),
        )  # fmt: skip
        self.app_args = [
            "--bootstrap", bootstrap, "--input", TOPIC, "--output", OUTPUT_TOPIC,
            "--app-id", APP_ID, "--classes", str(classes), "--threads", str(THREADS),
        ]  # fmt: skip
        self.apps: dict[int, ClientProcess] = {}
        self._starts = 0

    @property
    def producers(self) -> list[ClientProcess]:
        return self.clients.producers

    @property
    def consumers(self) -> list[ClientProcess]:
        return self.clients.consumers

    def start(self, role: str) -> ClientProcess:
        return self.clients.start(role)

    def start_app(self, slot: int) -> ClientProcess:
        name = f"app-{slot}-{self._starts}"
        self._starts += 1
        state_dir = self.root / "streams-state" / f"app-{slot}"
        app = ClientProcess(
            self.root, "app", name, [*self.app_args, "--state-dir", str(state_dir)], MODULE
        )
        self.apps[slot] = app
        return app

    def running(self, slot: int) -> bool:
        """Whether the slot's instance said it is RUNNING (its log: WordCountEos's stdout)."""
        log = self.root / "logs" / f"{self.apps[slot].name}.log"
        return log.exists() and "STATE RUNNING" in log.read_text(errors="replace")

    def kill_and_replace(self, rng: random.Random) -> str:
        """SIGKILL a producer, a reader or an instance, and start another in its place (an
        instance again on its slot's state dir: the same Streams process id, whose
        transactional ids fence the killed one's)."""
        if rng.random() < 0.5:
            return self.clients.kill_and_replace(rng)
        slot = rng.randrange(INSTANCES)
        victim = self.apps[slot]
        if victim.process.poll() is None:
            victim.process.kill()
            victim.process.wait()
        replacement = self.start_app(slot)
        return f"SIGKILL {victim.name}, restarted as {replacement.name}"

    def stop_producers(self) -> None:
        self.clients.stop_producers()

    def stop_readers(self) -> None:
        for client in self.clients.consumers:
            client.stop()

    def stop_all(self) -> None:
        self.clients.stop_all()
        for app in self.apps.values():
            app.stop()


def clients(root: Path, cluster: Cluster, history_dir: Path) -> StreamsClients:
    """The output topic, the compiled application, its instances started."""
    from tests.streams_app import compile_app

    cluster.admin.create_topic(OUTPUT_TOPIC, PARTITIONS, 3)
    out = StreamsClients(root, cluster, history_dir, compile_app(root / "streams-classes"))
    for slot in range(INSTANCES):
        out.start_app(slot)
    # The faults begin once both instances run (two JVMs, RocksDB, the internal topics made):
    # the readers then see counts through every cycle. Not a failure when they take longer.
    wait_until(lambda: all(out.running(slot) for slot in range(INSTANCES)), STARTUP_S)
    return out


def final_reader(cluster: Cluster, root: Path, history_dir: Path) -> ClientProcess:
    """Reads the whole input, then the output until it holds the input's exact counts."""
    return ClientProcess(
        root,
        "final-read",
        "final-read",
        [
            "--bootstrap", ",".join(cluster.kafka_client_addresses), "--topic", TOPIC,
            "--output", OUTPUT_TOPIC, "--partitions", str(PARTITIONS),
            "--history-dir", str(history_dir), "--max-seconds", str(CATCH_UP_S),
        ],
        MODULE,
    )  # fmt: skip
