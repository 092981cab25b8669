"""Kafka Streams with processing.guarantee=exactly_once_v2 against seglog (issue 54): a word
count (tests/java/WordCountEos.java, kafka-streams 4.3.1 from Maven Central) on a gateway and
three storage nodes, each a process (RF 3, min ISR 2; the campaign's cluster, on fixed ports so
a gateway restarted is found again), while storage nodes, the gateway and the application's
own instance are SIGKILLed and started again.

Streams' exactly-once is all of seglog's transactions at once: its producer's transactional
id fenced by a restarted instance (InitProducerId's epoch bump), the consumer's offsets
committed inside the transaction (TxnOffsetCommit), a repartition topic and a changelog read
back at read_committed, markers written through leader changes. Its output, read at
read_committed, must hold for every word exactly the counts 1, 2, ..., its true count: the
record cache is off, so each occurrence is one output record; a replay whose output was
committed twice shows as a repeated count, a lost commit as a gap.

The input flows at a steady pace all along, so each fault lands in the middle of open
transactions; after each, the test waits until the output counts every word written before it
(the application recovered and caught up). One node SIGKILL in `make test`; in `make
test-long` every node, the gateway, the application's instance (its open transaction then
fenced and aborted by the coordinator), and all three at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults.cluster import Cluster
from tests.streams_app import (
    CountsReader,
    StreamsApp,
    WordFeed,
    compile_app,
    exact_count_violations,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 3
# The input's pace: 20 lines of 5 words every 100 ms, about 1,000 counts a second, so every
# fault meets transactions open on every partition.
LINES_PER_TICK = 20
TICK_S = 0.1
STARTUP_TIMEOUT_S = 120.0  # a JVM, RocksDB and the internal topics' creation, two busy cores
STEP_TIMEOUT_S = 120.0  # a step through a fault: the session timeout, a fencing, a restore
HEAL_TIMEOUT_S = 90.0


@dataclass
class Run:
    cluster: Cluster
    app: StreamsApp
    feed: WordFeed
    reader: CountsReader

    def step(self, fault: Callable[[], None] | None, what: str) -> None:
        """Inflict `fault` while the input flows, then wait until the output counts every
        word written before it: the application recovered and caught up."""
        if fault is not None:
            fault()
        written = self.feed.snapshot()
        try:
            wait_for(
                lambda: self.reader.covers(written),
                STEP_TIMEOUT_S,
                f"the counts after {what}",
                lambda: self.reader.gaps(written),
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\napp: {self.app.describe()}") from None

    def kill_node(self, node_id: int, *, restart: bool = True) -> None:
        self.cluster.nodes[node_id].kill()
        if restart:
            self.cluster.nodes[node_id].start()

    def restart_node(self, node_id: int) -> None:
        self.cluster.nodes[node_id].start()
        self.heal()

    def heal(self) -> None:
        wait_for(self.cluster.all_registered, HEAL_TIMEOUT_S, "every node registered")

    def leader_of(self, topic: str, partition: int) -> int:
        (described,) = self.cluster.admin.describe_topics([topic])
        return int(next(p.leader for p in described.partitions if p.partition == partition))

    def kill_gateway(self) -> None:
        self.cluster.gateway.kill()
        self.cluster.restart_gateway()

    def kill_app(self) -> None:
        self.app.kill()
        self.app.start()

    def finish(self) -> None:
        """Stop the input, wait for every count, stop the application (it commits or aborts
        what it holds), read the output to its end at read_committed, and check every word's
        counts."""
        self.feed.stop()
        try:
            self.reader.wait_for(self.feed.counts, STEP_TIMEOUT_S, "every count")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\napp: {self.app.describe()}") from None
        self.app.stop()
        wait_for(self.reader.at_end, STEP_TIMEOUT_S, "the output read to its last stable offset")
        problems = exact_count_violations(self.reader.sequences, self.feed.counts)
        assert not problems, "\n".join(problems) + f"\napp: {self.app.describe()}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("streams-eos"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    return compile_app(tmp_path_factory.mktemp("streams-classes"))


@pytest.fixture
def run(cluster, classes, tmp_path, request) -> Iterator[Run]:
    name = request.node.name.removeprefix("test_")[:40].replace("_", "-")
    input_topic, output_topic = f"{name}-lines", f"{name}-counts"
    for topic in (input_topic, output_topic):
        cluster.admin.create_topic(topic, PARTITIONS, 3)
    bootstrap = cluster.kafka_addresses[0]
    app = StreamsApp(
        classes,
        bootstrap,
        f"{name}-app",
        input_topic,
        output_topic,
        tmp_path / "state",
        cluster.root / "logs" / f"{name}-app.log",
    )
    feed = WordFeed(bootstrap, input_topic, seed=54)
    reader = CountsReader(bootstrap, output_topic, PARTITIONS)
    app.start()
    try:
        wait_for(app.running, STARTUP_TIMEOUT_S, "the Streams application RUNNING", app.describe)
        feed.start(LINES_PER_TICK, TICK_S, STEP_TIMEOUT_S)
        yield Run(cluster, app, feed, reader)
    finally:
        feed.stop()
        app.stop()
        reader.close()
        wait_for(cluster.all_registered, HEAL_TIMEOUT_S, "every node back for the next test")


def test_word_counts_are_exact_through_a_storage_node_sigkill(run):
    run.step(None, "a first step")
    # The leader of the output's first partition: its transactions' markers and the next
    # ones go through the leader change.
    victim = run.leader_of(run.reader.topic, 0)
    run.step(lambda: run.kill_node(victim, restart=False), f"node {victim} SIGKILLed")
    run.restart_node(victim)
    run.step(None, f"node {victim} back")
    run.finish()


@pytest.mark.long
def test_word_counts_are_exact_through_node_gateway_and_instance_sigkills(run):
    run.step(None, "a first step")
    for node_id in (1, 2, 3):
        run.step(lambda n=node_id: run.kill_node(n, restart=False), f"node {node_id} SIGKILLed")
        run.restart_node(node_id)
    run.step(run.kill_gateway, "the gateway SIGKILLed and restarted")
    run.step(run.kill_app, "the application's instance SIGKILLed and restarted")
    run.step(lambda: run.kill_node(2), "node 2 SIGKILLed and restarted at once")
    run.heal()

    def everything() -> None:
        run.kill_app()
        run.kill_gateway()
        run.kill_node(3, restart=False)

    run.step(everything, "instance, gateway and node 3 SIGKILLed together")
    run.restart_node(3)
    run.step(None, "a last step")
    run.finish()
    # The instance's kills landed inside its transactions: the restarted instance (the same
    # transactional id, kept in its state dir) found one open and the coordinator aborted it.
    # (Its records may never have left the killed JVM's buffers, so the output need not hold
    # any aborted record.)
    gateway_log = (run.cluster.root / "logs" / "gateway.log").read_text(errors="replace")
    assert f"fencing transactional id {run.app.app_id}-" in gateway_log
