"""seglog's own share consumer (libs/seglog/client/share_consumer.py) over the ShareGroups
gRPC service, against a real gateway and node on loopback: a group of four over two
partitions reads every record once; RELEASE hands a record out again counted, REJECT archives
it; a consumer process SIGKILLed holding records has them handed out again once their locks
lapse, counted; and seglog's consumers share a group with Kafka's own KafkaShareConsumer
(Kafka 4.3.1's jars, tests/java/ShareProbe.java) without both holding a record at once.

Records rejected or archived at the delivery count limit are copied to the dead-letter topic
(KIP-1191) with Kafka's headers.

Each test has a topic and a group of its own on one module-scoped cluster (one node, a 2 s
record lock so a lapse is seen quickly, groups reading from the earliest offset, a
dead-letter topic made when first needed, its records copying the source records).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from devtools.apache_kafka import INSTALL_HINT, installed, java_command, log4j2_config
from seglog.cli.main import main as cli_main
from seglog.client import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from seglog.errors import InvalidConfigError, SeglogError
from tests.cluster import LocalCluster
from tests.waiting import wait_for

LOCK_MS = 2000
DLQ_TOPIC = "dlq.share-groups"
DELIVERY_LIMIT = 3
PROBE = Path(__file__).resolve().parent.parent / "java" / "ShareProbe.java"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("share-consumer"),
        nodes=1,
        share_coordinator_state_topic_num_partitions=1,
        group_share_delivery_count_limit=DELIVERY_LIMIT,
        group_share_record_lock_duration_ms=LOCK_MS,
        share_auto_offset_reset="earliest",
        errors_deadletterqueue_topic_name=DLQ_TOPIC,
        errors_deadletterqueue_auto_create_topics_enable=True,
        errors_deadletterqueue_copy_record_enable=True,
    )
    yield c
    c.close()


def produce(cluster: LocalCluster, topic: str, count: int, partitions: int = 1) -> None:
    cluster.admin.create_topic(topic, partitions, 1)
    with Producer(cluster.address, linger_ms=0) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=i % partitions) for i in range(count)]
        for f in futures:
            f.get(timeout=10)


def test_four_share_consumers_over_two_partitions_read_every_record_once(cluster):
    produce(cluster, "sq-four", 400, partitions=2)
    deliveries: list[tuple[int, int, int]] = []
    failed: list[object] = []
    lock = threading.Lock()
    done = threading.Event()

    def run() -> None:
        with ShareConsumer(
            cluster.address, group_id="g-four", share_acknowledgement_mode="explicit"
        ) as consumer:
            consumer.subscribe(["sq-four"])
            while not done.is_set():
                records = consumer.poll(timeout_ms=200)
                for r in records:
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                outcome = consumer.commit_sync()
                failed.extend(e for e in outcome.values() if e is not None)
                with lock:
                    deliveries.extend((r.partition, r.offset, r.delivery_count) for r in records)
                    if len(deliveries) >= 400:
                        done.set()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        assert done.wait(60), f"{len(deliveries)} of 400 records delivered"
    finally:
        done.set()
        for t in threads:
            t.join(30)
    assert not failed
    counts = Counter((p, o) for p, o, _ in deliveries)
    assert sorted(counts) == [(p, o) for p in (0, 1) for o in range(200)]
    assert set(counts.values()) == {1}  # none delivered twice
    assert {c for _, _, c in deliveries} == {1}
    # Every one was acknowledged: a new member of the group finds nothing left.
    with ShareConsumer(cluster.address, group_id="g-four") as late:
        late.subscribe(["sq-four"])
        assert late.poll(timeout_ms=1500) == []


def poll_until(consumer: ShareConsumer, count: int, timeout_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(timeout_ms=300)
    return got


def test_release_redelivers_counted_and_reject_archives(cluster):
    produce(cluster, "sq-release", 3)
    with ShareConsumer(
        cluster.address, group_id="g-release", share_acknowledgement_mode="explicit"
    ) as consumer:
        consumer.subscribe(["sq-release"])
        first = poll_until(consumer, 3)
        assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
        consumer.acknowledge(first[0], AcknowledgeType.RELEASE)
        consumer.acknowledge(first[1], AcknowledgeType.REJECT)
        consumer.acknowledge(first[2], AcknowledgeType.ACCEPT)
        assert all(e is None for e in consumer.commit_sync().values())
        again = poll_until(consumer, 1)
        assert [(r.offset, r.delivery_count, r.value) for r in again] == [(0, 2, b"v0")]
        consumer.acknowledge(again[0], AcknowledgeType.ACCEPT)
        assert consumer.poll(timeout_ms=1000) == []  # the rejected one never comes back


def test_explicit_mode_wants_every_record_acknowledged_and_implicit_refuses_acknowledge(cluster):
    produce(cluster, "sq-modes", 2)
    with ShareConsumer(
        cluster.address, group_id="g-modes", share_acknowledgement_mode="explicit"
    ) as consumer:
        consumer.subscribe(["sq-modes"])
        records = poll_until(consumer, 2)
        consumer.acknowledge(records[0])
        with pytest.raises(SeglogError, match="not acknowledged"):
            consumer.poll(timeout_ms=0)
        consumer.acknowledge(records[1], AcknowledgeType.RELEASE)
        assert all(e is None for e in consumer.commit_sync().values())
        with pytest.raises(SeglogError, match="not handed out"):
            consumer.acknowledge(records[1])  # its acknowledgement went already
    with ShareConsumer(cluster.address, group_id="g-modes") as implicit:
        implicit.subscribe(["sq-modes"])
        (record,) = poll_until(implicit, 1)
        assert (record.offset, record.delivery_count) == (1, 2)
        with pytest.raises(SeglogError, match="explicit"):
            implicit.acknowledge(record)
    with pytest.raises(InvalidConfigError, match="share_acknowledgement_mode"):
        ShareConsumer(cluster.address, group_id="g", share_acknowledgement_mode="auto")


CHILD = """
import sys
from seglog.client import ShareConsumer
c = ShareConsumer(sys.argv[1], group_id=sys.argv[2], share_acknowledgement_mode="explicit",
                  max_poll_records=5)
c.subscribe([sys.argv[3]])
while True:
    records = c.poll(timeout_ms=500)
    if records:
        print(" ".join(str(r.offset) for r in records), flush=True)
        sys.stdin.read()  # holds them, unacknowledged, until killed
"""


def test_records_of_a_consumer_killed_come_back_after_their_lock_counted(cluster):
    produce(cluster, "sq-killed", 5)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'libs'}:{REPO}"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, cluster.address, "g-killed", "sq-killed"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        acquired_at = time.monotonic()
        held = [int(o) for o in line.split()]
        assert held == [0, 1, 2, 3, 4], line
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    with ShareConsumer(cluster.address, group_id="g-killed") as survivor:
        survivor.subscribe(["sq-killed"])
        again = poll_until(survivor, 5)
        came_back_s = time.monotonic() - acquired_at
    assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
    # Not before the lock lapsed (the member's session, 45 s, had not ended either).
    assert came_back_s >= LOCK_MS / 1000 * 0.9, came_back_s


def test_seglog_and_kafka_share_consumers_share_a_group_without_sharing_a_record(cluster):
    assert installed(), INSTALL_HINT
    total = 100
    cluster.admin.create_topic("sq-mixed", 2, 1)
    seen: list[tuple[str, int, int, int]] = []  # (who, partition, offset, delivery count)
    lock = threading.Lock()
    done = threading.Event()
    probe = subprocess.Popen(
        java_command(
            str(PROBE),
            cluster.kafka_address,
            "g-mixed",
            "sq-mixed",
            "accept-all",
            str(total),
            "90000",
            jvm_options=(f"-Dlog4j2.configurationFile={log4j2_config()}", "-Xmx256m"),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def read_probe() -> None:
        for raw in probe.stdout:  # type: ignore[union-attr]
            fields = raw.decode().split()
            if fields and fields[0] == "D":  # D name offset count value partition
                with lock:
                    seen.append(("java", int(fields[5]), int(fields[2]), int(fields[3])))

    def run_seglog() -> None:
        with ShareConsumer(cluster.address, group_id="g-mixed") as consumer:
            consumer.subscribe(["sq-mixed"])
            while not done.is_set():
                records = consumer.poll(timeout_ms=200)
                with lock:
                    seen.extend(
                        ("seglog", r.partition, r.offset, r.delivery_count) for r in records
                    )

    threads = [threading.Thread(target=read_probe)] + [
        threading.Thread(target=run_seglog) for _ in range(2)
    ]
    for t in threads:
        t.start()
    try:
        # Records come a few at a time, each wave read before the next, once both kinds are
        # members (two of each) fetching the same two partitions: both get some of them.
        membership = cluster.gateway.share.membership
        wait_for(
            lambda: len(getattr(membership.group("g-mixed"), "members", {})) == 4,
            60,
            "two Java and two seglog members",
        )
        with Producer(cluster.address, linger_ms=0) as producer:
            for wave in range(0, total, 10):
                for i in range(wave, wave + 10):
                    producer.send("sq-mixed", b"m%d" % i, partition=i % 2)
                producer.flush()
                wait_for(lambda: len(seen) >= wave + 10, 60, "the wave read")  # noqa: B023
        wait_for(lambda: len({(p, o) for _, p, o, _ in seen}) >= total, 90, "every record")
    finally:
        done.set()
        probe.kill()  # by its own pid
        probe.wait(30)
        for t in threads:
            t.join(30)
    counts = Counter((p, o) for _, p, o, _ in seen)
    assert sorted(counts) == [(p, o) for p in (0, 1) for o in range(total // 2)]
    # Each accepted on its first delivery: delivered to both kinds, or twice, would mean two
    # members held it at once.
    assert set(counts.values()) == {1}
    assert {c for *_, c in seen} == {1}
    assert {who for who, *_ in seen} == {"java", "seglog"}


def test_the_clients_guides_share_consumer_snippet_runs_as_written(cluster):
    # docs/python-clients.md's "Share consumers" block, against this cluster (its share
    # groups start at the earliest offset, so the records produced first are read).
    text = (REPO / "docs" / "python-clients.md").read_text()
    block = text.split("## Share consumers", 1)[1].split("```python\n", 1)[1].split("```")[0]
    cluster.admin.create_topic("jobs", 2, 1)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'libs'}:{REPO}"}
    ran = subprocess.run(
        [sys.executable, "-c", block.replace("127.0.0.1:7070", cluster.address)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    lines = ran.stdout.decode().splitlines()
    delivered = sorted(line for line in lines if " b'job-" in line)
    assert len(delivered) == 10 and all(line.split()[1] == "1" for line in delivered), lines
    assert "TopicPartition" in lines[-1] and "None" in lines[-1], lines


def test_the_share_consume_command_prints_and_acknowledges_what_it_reads(cluster, capsys):
    produce(cluster, "sq-cli", 5)
    common = ["--bootstrap", cluster.address, "--group", "g-cli"]
    assert cli_main(["share", "consume", "sq-cli", *common, "--max-messages", "3", "--reject"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # partition, offset, timestamp, key, value, delivery count
    assert [(f[1], f[3], f[4], f[5]) for f in (line.split("\t") for line in lines)] == [
        ("0", "null", "v0", "1"),
        ("1", "null", "v1", "1"),
        ("2", "null", "v2", "1"),
    ]
    assert cli_main(["share", "consume", "sq-cli", *common, "--max-messages", "5", "--json",
                     "--timeout-ms", "1500"]) == 0  # fmt: skip
    read = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # The rejected ones are never read again; the rest once, accepted.
    assert [(r["offset"], r["value"], r["delivery_count"]) for r in read] == [
        (3, "v3", 1),
        (4, "v4", 1),
    ]
    assert cli_main(["share", "consume", "sq-cli", *common, "--timeout-ms", "1000"]) == 0
    assert capsys.readouterr().out == ""


def dead_letters_of(cluster: LocalCluster, group_id: str) -> list[tuple[int, dict[str, str]]]:
    """(DLQ partition, headers and the copied value under "value") of every dead letter of
    the group so far."""
    found = []
    with Consumer(cluster.address, auto_offset_reset="earliest", consumer_timeout_ms=1000) as c:
        partitions = cluster.admin.describe_topics([DLQ_TOPIC])[0].partitions
        c.assign([TopicPartition(DLQ_TOPIC, p.partition) for p in partitions])
        for record in c:
            headers = {k: (v or b"").decode() for k, v in record.headers}
            headers["value"] = (record.value or b"").decode()
            assert record.key is None  # as the source's: produced without keys
            if headers.get("__dlq.errors.group") == group_id:
                found.append((record.partition, headers))
    return found


def test_rejected_records_and_those_at_the_delivery_limit_go_to_the_dead_letter_topic(cluster):
    produce(cluster, "sq-dlq", 6, partitions=2)  # offsets 0..2 in each partition
    with ShareConsumer(
        cluster.address, group_id="g-dlq", share_acknowledgement_mode="explicit"
    ) as consumer:
        consumer.subscribe(["sq-dlq"])
        released = 0
        deadline = time.monotonic() + 60
        while released < DELIVERY_LIMIT and time.monotonic() < deadline:
            for r in consumer.poll(timeout_ms=300):
                if (r.partition, r.offset) == (1, 2):
                    consumer.acknowledge(r, AcknowledgeType.REJECT)
                elif (r.partition, r.offset) == (0, 1):
                    consumer.acknowledge(r, AcknowledgeType.RELEASE)  # until the limit
                    released += 1
                else:
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            assert all(e is None for e in consumer.commit_sync().values())
        assert released == DELIVERY_LIMIT
    letters = dead_letters_of(cluster, "g-dlq")
    by_offset = {(h["__dlq.errors.partition"], h["__dlq.errors.offset"]): h for _, h in letters}
    assert sorted(by_offset) == [("0", "1"), ("1", "2")], letters
    assert len(letters) == 2  # each written once
    rejected, exhausted = by_offset[("1", "2")], by_offset[("0", "1")]
    assert rejected["__dlq.errors.topic"] == "sq-dlq"
    assert rejected["__dlq.errors.delivery.count"] == "1"
    assert rejected["__dlq.errors.message"] == "Offset rejected by client."
    # errors.deadletterqueue.copy.record.enable: the source records' values come along
    # (produce() sends v0..v5 round-robin: partition 1 offset 2 is v5, partition 0 offset 1 v2).
    assert (rejected["value"], exhausted["value"]) == ("v5", "v2")
    assert exhausted["__dlq.errors.delivery.count"] == str(DELIVERY_LIMIT)
    assert exhausted["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."
    partitions = len(cluster.admin.describe_topics([DLQ_TOPIC])[0].partitions)
    assert {(p, h["__dlq.errors.partition"]) for p, h in letters} == {
        (int(h["__dlq.errors.partition"]) % partitions, h["__dlq.errors.partition"])
        for _, h in letters
    }


def test_a_record_released_at_the_limit_by_a_member_leaving_goes_to_the_dead_letter_topic(cluster):
    produce(cluster, "sq-dlq-close", 1)
    with ShareConsumer(
        cluster.address, group_id="g-dlq-close", share_acknowledgement_mode="explicit"
    ) as consumer:
        consumer.subscribe(["sq-dlq-close"])
        for count in range(1, DELIVERY_LIMIT):
            (record,) = poll_until(consumer, 1)
            assert record.delivery_count == count
            consumer.acknowledge(record, AcknowledgeType.RELEASE)
        (last,) = poll_until(consumer, 1)
        assert last.delivery_count == DELIVERY_LIMIT
    # Closed holding it: released at the limit, so archived, and copied first.
    letters = dead_letters_of(cluster, "g-dlq-close")
    assert [(h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"]) for _, h in letters] == [
        ("0", str(DELIVERY_LIMIT))
    ]
    assert letters[0][1]["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."


def test_poll_raises_when_the_group_id_is_a_consumer_groups(cluster):
    cluster.admin.create_topic("sq-taken", 1, 1)
    with Consumer(cluster.address, group_id="g-taken", auto_offset_reset="earliest") as classic:
        classic.subscribe(["sq-taken"])
        classic.poll(timeout_ms=500)
        with ShareConsumer(cluster.address, group_id="g-taken") as consumer:
            consumer.subscribe(["sq-taken"])
            with pytest.raises(SeglogError, match="not a share group"):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=200)


def test_commit_async_sends_the_implicit_acceptances_and_tells_the_callback(cluster):
    produce(cluster, "sq-async", 4)
    heard: list[dict] = []
    with ShareConsumer(cluster.address, group_id="g-async") as consumer:
        consumer.subscribe(["sq-async"])
        assert len(poll_until(consumer, 4)) == 4
        outcome = consumer.commit_async(heard.append).result(timeout=30)
        assert outcome == {TopicPartition("sq-async", 0): None}
        wait_for(lambda: heard == [outcome], 10, "the callback")
        # Accepted: nothing comes back, even once their locks would have lapsed.
        assert consumer.poll(timeout_ms=LOCK_MS + 1000) == []
