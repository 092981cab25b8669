"""Share groups (KIP-932) as Kafka's own share consumer and tools use them: KafkaShareConsumer
from Kafka 4.3.1's jars (tests/java/ShareProbe.java, run with Java's source launcher) and
kafka-share-groups, against a real gateway and node on loopback.

Each test has a topic and a group of its own on one module-scoped cluster (one node, the
share state topic with 3 partitions, a delivery limit of 3 so archiving is seen in a few
rounds, groups reading from the earliest offset so records produced first are read).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import confluent_kafka
import pytest
from kafka.errors import GroupIdNotFoundError

from devtools.apache_kafka import (
    CONSOLE_CONSUMER,
    INSTALL_HINT,
    installed,
    java_command,
    log4j2_config,
    run_tool,
)
from seglog.security.acls import AclBinding
from services.gateway.kafka.error_codes import (
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
)
from services.gateway.kafka.share_messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from services.gateway.share import share_metrics
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until


@pytest.fixture(scope="module", autouse=True)
def kafka_jars() -> None:
    # make test installs Kafka's jars first: missing, every test here fails rather than skips,
    # since a skip could only hide a broken install.
    assert installed(), INSTALL_HINT


PROBE = Path(__file__).resolve().parent.parent / "java" / "ShareProbe.java"
SHARE_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STATE_FORMATTER = "org.apache.kafka.tools.consumer.group.share.ShareGroupStateMessageFormatter"
DELIVERY_LIMIT = 3
PROBE_TIMEOUT_S = 120.0
GROUP_ID_NOT_FOUND = GroupIdNotFoundError.errno


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("share-groups"),
        nodes=1,
        share_coordinator_state_topic_num_partitions=3,
        group_share_delivery_count_limit=DELIVERY_LIMIT,
        share_auto_offset_reset="earliest",
    )
    yield c
    c.close()


def produce(cluster: LocalCluster, topic: str, count: int) -> None:
    cluster.admin.create_topic(topic, 1, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0


def probe(
    cluster: LocalCluster, group: str, topic: str, mode: str, count: int, deadline_ms: int = 60_000
):
    """Runs ShareProbe; its deliveries as (consumer, offset, delivery count), and the offsets
    it accepted (accept-first)."""
    done = subprocess.run(
        java_command(
            str(PROBE),
            cluster.kafka_address,
            group,
            topic,
            mode,
            str(count),
            str(deadline_ms),
            jvm_options=(f"-Dlog4j2.configurationFile={log4j2_config()}", "-Xmx256m"),
        ),
        capture_output=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0 and "DONE" in out, (out, done.stderr.decode()[-3000:])
    deliveries, accepted = [], []
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == "D":
            deliveries.append((fields[1], int(fields[2]), int(fields[3])))
        elif fields and fields[0] == "A":
            accepted.append(int(fields[2]))
        elif fields and fields[0] == "E":
            pytest.fail(f"an acknowledgement failed: {line}")
    return deliveries, accepted


def json_records(text: str) -> list[dict]:
    """Every top-level JSON object in the formatter's output (a record's key and value)."""
    decoder, records, pos = json.JSONDecoder(), [], 0
    while pos < len(text):
        if text[pos] != "{":
            pos += 1
            continue
        record, pos = decoder.raw_decode(text, pos)
        records.append(record)
    return records


def test_two_share_consumers_on_one_partition_read_every_record_once(cluster):
    produce(cluster, "queue-once", 200)
    deliveries, _ = probe(cluster, "g-once", "queue-once", "accept-all", 200)
    offsets = [offset for _, offset, _ in deliveries]
    assert sorted(offsets) == list(range(200))  # every record, none delivered twice
    assert {count for _, _, count in deliveries} == {1}


def test_released_records_come_back_counted_and_are_archived_at_the_limit(cluster):
    produce(cluster, "queue-release", 5)
    deliveries, _ = probe(cluster, "g-release", "queue-release", "release-all", 5 * DELIVERY_LIMIT)
    counts: dict[int, list[int]] = {}
    for _, offset, count in deliveries:
        counts.setdefault(offset, []).append(count)
    # Each record delivered once per count up to the limit, then archived: never again.
    assert counts == {offset: list(range(1, DELIVERY_LIMIT + 1)) for offset in range(5)}
    state = cluster.gateway.share.states.get(("g-release", "queue-release", 0))
    assert state.start_offset == 5 and not len(state.runs)
    # What the metrics export: each record delivered twice again, then archived.
    assert (state.redelivered, state.archived_at_limit) == (5 * (DELIVERY_LIMIT - 1), 5)
    gauges = {
        o.attributes["messaging.destination.name"]: o.value
        for o in share_metrics.in_flight(cluster.gateway.share)
        if o.attributes["messaging.consumer.group.name"] == "g-release"
    }
    assert gauges == {"queue-release": 0}


@pytest.mark.long  # share consumers across a gateway restart (below) stay in make test
def test_acknowledged_records_stay_acknowledged_across_a_gateway_restart(cluster):
    produce(cluster, "queue-restart", 30)
    deliveries, accepted = probe(cluster, "g-restart", "queue-restart", "accept-first", 10)
    assert len(accepted) == 10
    cluster.restart_gateway()
    # The new gateway knows nothing but what it reads back from __share_group_state.
    deliveries, _ = probe(cluster, "g-restart", "queue-restart", "accept-all", 20)
    offsets = sorted(offset for _, offset, _ in deliveries)
    assert offsets == sorted(set(range(30)) - set(accepted))
    # Kafka's own formatter reads the state seglog wrote: every record done with.
    done = run_tool(
        CONSOLE_CONSUMER,
        "--bootstrap-server",
        cluster.kafka_address,
        "--topic",
        "__share_group_state",
        "--from-beginning",
        "--formatter",
        STATE_FORMATTER,
        "--consumer-property",
        "exclude.internal.topics=false",
        "--timeout-ms",
        "5000",
    )
    states = [
        record["value"]
        for record in json_records(done.stdout.decode())
        if record.get("key", {}).get("data", {}).get("groupId") == "g-restart"
        and record.get("value")
    ]
    assert states, done.stderr.decode()[-2000:]
    snapshots = [v["data"] for v in states if "startOffset" in v.get("data", {})]
    assert snapshots, states
    assert snapshots[-1]["startOffset"] == 30 and snapshots[-1]["stateBatches"] == [], states


def test_kafka_share_groups_lists_and_describes_the_group(cluster):
    produce(cluster, "queue-tool", 10)
    probe(cluster, "g-tool", "queue-tool", "accept-all", 10)
    listed = run_tool(SHARE_GROUPS_TOOL, "--bootstrap-server", cluster.kafka_address, "--list")
    assert listed.returncode == 0, listed.stderr.decode()[-2000:]
    assert "g-tool" in listed.stdout.decode().split()
    described = run_tool(
        SHARE_GROUPS_TOOL,
        "--bootstrap-server",
        cluster.kafka_address,
        "--describe",
        "--group",
        "g-tool",
    )
    out = described.stdout.decode()
    assert described.returncode == 0, described.stderr.decode()[-2000:]
    rows = [line.split() for line in out.splitlines() if line.startswith("g-tool")]
    assert rows and rows[0][1] == "queue-tool" and rows[0][2] == "0" and rows[0][3] == "10", out
    state = run_tool(
        SHARE_GROUPS_TOOL,
        "--bootstrap-server",
        cluster.kafka_address,
        "--describe",
        "--group",
        "g-tool",
        "--state",
    )
    out = state.stdout.decode()
    assert state.returncode == 0, state.stderr.decode()[-2000:]
    (row,) = [line.split() for line in out.splitlines() if line.startswith("g-tool")]
    # GROUP COORDINATOR (ID) STATE #MEMBERS: the consumers have left.
    assert row[-2:] == ["Empty", "0"], out


# -- authorization ------------------------------------------------------------------------------


def share_fetch(group: str, topics: dict, epoch: int = 0):
    request_class = ShareFetchRequest[1]
    return request_class(
        group_id=group,
        member_id="m-1",
        share_session_epoch=epoch,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[
            request_class.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    request_class.FetchTopic.FetchPartition(
                        partition_index=0, acknowledgement_batches=[]
                    )
                ],
            )
            for topic_id in topics.values()
        ],
        forgotten_topics_data=[],
    )


def heartbeat(group: str, topics: list[str]):
    return ShareGroupHeartbeatRequest[1](
        group_id=group, member_id="m-1", member_epoch=0, rack_id=None, subscribed_topic_names=topics
    )


def test_share_apis_are_authorized_on_the_group_and_each_topic_as_kafkas(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True, share_auto_offset_reset="earliest")
    try:
        cluster.gateway.registry.add_acls(  # the server's own setup, not a client
            [
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "*", "Create", "allow"),
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "readable", "Read", "allow"),
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "readable", "Write", "allow"),
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "hidden", "Write", "allow"),
                AclBinding("User:ANONYMOUS", "*", "group", "literal", "allowed", "Read", "allow"),
            ]
        )
        for topic in ("readable", "hidden"):
            cluster.admin.create_topic(topic, 1, 1)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
        for topic in ("readable", "hidden"):
            producer.produce(topic, value=b"x")
        assert producer.flush(30) == 0
        ids = {
            t: to_wire(cluster.gateway.registry.image.topic_id_of(t))
            for t in ("readable", "hidden")
        }
        with KafkaWire(cluster.kafka_address) as wire:
            denied = wire.request(heartbeat("denied", ["readable"]), 1, ShareGroupHeartbeatResponse)
            assert denied.error_code == GROUP_AUTHORIZATION_FAILED
            # Describe on each subscribed topic (Write on "hidden" implies it; "secret" has none).
            hidden = wire.request(heartbeat("allowed", ["secret"]), 1, ShareGroupHeartbeatResponse)
            assert hidden.error_code == TOPIC_AUTHORIZATION_FAILED
            joined = wire.request(
                heartbeat("allowed", ["readable"]), 1, ShareGroupHeartbeatResponse
            )
            assert joined.error_code == 0 and joined.member_epoch > 0
            assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [
                (ids["readable"], [0])
            ]
            refused = wire.request(share_fetch("denied", ids), 1, ShareFetchResponse)
            assert (refused.error_code, refused.responses) == (GROUP_AUTHORIZATION_FAILED, [])
            fetched = wire.request(share_fetch("allowed", ids), 1, ShareFetchResponse)
            assert fetched.error_code == 0
            by_topic = {t.topic_id: t.partitions[0] for t in fetched.responses}
            assert by_topic[ids["hidden"]].error_code == TOPIC_AUTHORIZATION_FAILED
            readable = by_topic[ids["readable"]]
            assert readable.error_code == 0
            assert [
                (r.first_offset, r.last_offset, r.delivery_count) for r in readable.acquired_records
            ] == [(0, 0, 1)]
            described = wire.request(
                ShareGroupDescribeRequest[1](
                    group_ids=["denied", "allowed"], include_authorized_operations=False
                ),
                1,
                ShareGroupDescribeResponse,
            )
            denied_group, allowed_group = described.groups
            assert denied_group.error_code == GROUP_AUTHORIZATION_FAILED
            # Read on the group implies Describe, as in Kafka.
            assert (allowed_group.error_code, allowed_group.group_state) == (0, "Stable")
            assert [m.member_id for m in allowed_group.members] == ["m-1"]
    finally:
        cluster.close()


def test_share_consumers_running_across_a_gateway_restart_repeat_no_confirmed_acknowledgement(
    cluster,
):
    produce(cluster, "queue-failover", 300)
    process = subprocess.Popen(
        java_command(
            str(PROBE),
            cluster.kafka_address,
            "g-failover",
            "queue-failover",
            "accept-all",
            "300",
            "90000",
            jvm_options=(f"-Dlog4j2.configurationFile={log4j2_config()}", "-Xmx256m"),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        # The restart comes once the consumers have confirmed some acknowledgements.
        for raw in process.stdout:
            lines.append(raw.decode().strip())
            if sum(1 for line in lines if line.startswith("C ")) >= 30:
                break
        cluster.restart_gateway()
        restarted_at = len(lines)
        lines += [raw.decode().strip() for raw in process.stdout]
        assert process.wait(timeout=PROBE_TIMEOUT_S) == 0, lines[-20:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "DONE" in lines
    # The consumers went on reading from the new gateway (the restart was mid-run).
    assert any(line.startswith("C ") for line in lines[restarted_at:])
    confirmed: set[int] = set()
    delivered: set[int] = set()
    for line in lines:
        kind, *fields = line.split()
        if kind == "D":
            offset = int(fields[1])
            assert offset not in confirmed, f"{offset} delivered again after its ack was confirmed"
            delivered.add(offset)
        elif kind == "C":
            confirmed.add(int(fields[1]))
    assert delivered == set(range(300))  # nothing lost


def test_a_share_group_cannot_take_a_consumer_groups_id(cluster):
    cluster.admin.create_topic("queue-classic", 1, 1)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_address, "group.id": "g-classic"}
    )
    try:
        consumer.subscribe(["queue-classic"])
        assert wait_until(lambda: consumer.poll(0.1) is None and consumer.assignment(), 30)
        with KafkaWire(cluster.kafka_address) as wire:
            taken = wire.request(
                heartbeat("g-classic", ["queue-classic"]), 1, ShareGroupHeartbeatResponse
            )
            free = wire.request(
                heartbeat("g-share-only", ["queue-classic"]), 1, ShareGroupHeartbeatResponse
            )
        assert taken.error_code == GROUP_ID_NOT_FOUND, taken.error_message
        assert free.error_code == 0
    finally:
        consumer.close()
