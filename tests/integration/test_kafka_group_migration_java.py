"""Kafka's Java consumer (4.3.1's jars) rolls a classic group to the consumer protocol beside
librdkafka's, under load (the rolling migration of test_kafka_group_migration.py, with a
second client implementation)."""

from __future__ import annotations

import re
import subprocess
import threading

from devtools import apache_kafka
from services.gateway.groups.group_state import CLASSIC
from tests.integration.test_kafka_group_migration import Load, Reader, Reads, _kind, cluster
from tests.kip848_clients import TIMEOUT_S, new_name
from tests.waiting import wait_for

__all__ = ["cluster"]  # the module's cluster fixture, shared


class JavaReader:
    """Kafka's Java consumer (its ConsoleConsumer, from the 4.3.1 jars) in the group, on the
    `protocol` given, printing each record's partition and offset; its commits are the
    console consumer's own (auto-commit), so whether a record's commit held is not known."""

    LINE = re.compile(r"Partition:(\d+)\s+Offset:(\d+)")

    def __init__(self, cluster, group_id, topic, name, reads, protocol) -> None:
        self.name, self.reads = name, reads
        command = apache_kafka.java_command(
            apache_kafka.CONSOLE_CONSUMER,
            "--bootstrap-server", cluster.kafka_address,
            "--topic", topic,
            "--group", group_id,
            "--consumer-property", f"group.protocol={protocol}",
            "--consumer-property", "auto.offset.reset=earliest",
            "--consumer-property", "auto.commit.interval.ms=200",
            "--property", "print.partition=true",
            "--property", "print.offset=true",
            jvm_options=(
                *apache_kafka.TOOL_JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={apache_kafka.log4j2_config()}",
            ),
        )  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        self.thread = threading.Thread(target=self._run, name=name)
        self.thread.start()

    def _run(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = self.LINE.search(line.decode(errors="replace"))
            if found:
                with self.reads.lock:
                    self.reads.read.append(
                        (int(found.group(1)), int(found.group(2)), self.name, None)
                    )

    def close(self) -> None:
        """SIGTERM: the console consumer closes its consumer (a last commit, a leave)."""
        self.process.terminate()
        try:
            self.process.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.thread.join(TIMEOUT_S)


def test_java_and_librdkafka_members_roll_a_classic_group_to_the_consumer_protocol(cluster):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    topic, group_id, partitions = new_name("jroll"), new_name("jg"), 4
    cluster.admin.create_topic(topic, partitions, 2)
    reads = Reads()
    load = Load(cluster, topic, partitions)
    readers = {
        "rd": Reader(cluster, group_id, topic, "rd", reads, "classic"),
        "java": JavaReader(cluster, group_id, topic, "java", reads, "classic"),
    }
    try:

        def progress(what: str) -> None:
            target = load.produced + 40
            wait_for(
                lambda: reads.count() >= target, TIMEOUT_S, what, lambda: _kind(cluster, group_id)
            )

        def reading(name: str) -> None:
            # A JVM takes seconds to start: the member has joined once it has read.
            wait_for(
                lambda: any(r == name for _, _, r, _ in list(reads.read)),
                TIMEOUT_S,
                f"{name} reads",
                lambda: _kind(cluster, group_id),
            )

        wait_for(
            lambda: _kind(cluster, group_id) == f"classic group: {CLASSIC}, 2",
            TIMEOUT_S,
            "a classic group of a librdkafka and a Java member",
            lambda: _kind(cluster, group_id),
        )
        reading("java")
        progress("the classic group of a librdkafka and a Java member reads")
        # The Java member rolled first (the group upgraded beside librdkafka's classic
        # member), then librdkafka's (no classic member left).
        for old, new, protocol, java, kind in [
            ("java", "java2", "consumer", True, "consumer group: classic+consumer"),
            ("rd", "rd2", "consumer", False, "consumer group: consumer"),
        ]:
            readers.pop(old).close()
            make = JavaReader if java else Reader
            readers[new] = make(cluster, group_id, topic, new, reads, protocol)
            wait_for(
                lambda kind=kind: _kind(cluster, group_id) == kind,
                TIMEOUT_S,
                kind,
                lambda: _kind(cluster, group_id),
            )
            reading(new)
            progress(f"{new} replaced {old}")
        produced = load.close()
        wait_for(lambda: reads.count() >= produced, TIMEOUT_S, "every record read")
    finally:
        load.stop.set()
        for reader in readers.values():
            reader.close()
    for partition in range(partitions):
        offsets = {o for p, o, _, _ in reads.read if p == partition}
        assert offsets == set(range(len(offsets))), f"partition {partition} skipped records"
    assert reads.count() == produced
    # None read twice past a commit librdkafka's member saw succeed.
    first: dict[tuple[int, int], tuple[str, bool | None]] = {}
    for p, o, reader, committed in reads.read:
        if (p, o) in first:
            assert first[(p, o)][1] is not True, f"{p}:{o} committed by {first[(p, o)][0]}"
        else:
            first[(p, o)] = (reader, committed)
    assert {r for _, _, r, _ in reads.read} >= {"java", "java2", "rd2"}
