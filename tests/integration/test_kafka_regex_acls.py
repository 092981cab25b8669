"""A KIP-848 member's regular expression resolves only to the topics its principal may
Describe, as Kafka 4's coordinator filters regex matches through the authorizer: a
librdkafka consumer authenticated over SASL PLAIN (User:bob) subscribed to `^rx-.*` is
assigned the matching topic it may see and never the one it may not, until an ACL lets it
Read (so Describe) that one too (consumer_group_targets.py check_regex_access)."""

from __future__ import annotations

import confluent_kafka
import pytest

from seglog.security.acls import AclBinding
from seglog.security.tokens import TokenVerifier
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.listener import KafkaListener
from tests.cluster import LocalCluster
from tests.kip848_clients import describe
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

GROUP, SEEN, HIDDEN = "rx-group", "rx-seen", "rx-hidden"
REGEX_RECHECK_S = 10


def bob(acls: list[tuple[str, str, str]]) -> list[AclBinding]:
    """Allow ACLs of User:bob, each (resource type, name, operation)."""
    return [
        AclBinding("User:bob", "*", kind, "literal", name, op, "allow") for kind, name, op in acls
    ]


def test_a_regex_resolves_only_to_topics_the_principal_may_describe(tmp_path):
    (tmp_path / "tokens").write_text("s3cret-bob bob\n")
    cluster = LocalCluster(
        tmp_path,
        nodes=1,
        tokens=TokenVerifier(None, tmp_path / "tokens", None),
        authorizer=True,
        super_users=("User:ANONYMOUS",),  # the plaintext listener: the test's own view
    )
    listener = KafkaListener(
        "SASL_PLAINTEXT://127.0.0.1:0",
        kafka_api_table(),
        cluster.gateway.kafka_core,
        max_request_bytes=cluster.gateway.config.max_request_bytes,
    )
    listener.start()
    consumer = None
    try:
        for topic in (SEEN, HIDDEN):
            cluster.admin.create_topic(topic, 2, 1)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
        for topic in (SEEN, HIDDEN):
            for i in range(4):
                producer.produce(topic, value=b"%s-%d" % (topic.encode(), i), partition=i % 2)
        assert producer.flush(30) == 0
        cluster.admin.create_acls(
            bob([("group", GROUP, "Read"), ("topic", SEEN, "Read"), ("topic", SEEN, "Describe")])
        )
        # Nothing on rx-hidden for bob yet (Read would imply Describe, as in Kafka).
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": listener.address,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "bob",
                "sasl.password": "s3cret-bob",
                "group.id": GROUP,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["^rx-.*"])
        read: list[str] = []

        def poll_until(count: int) -> bool:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                read.append(message.topic())
            return len(read) >= count

        assert wait_until(lambda: poll_until(4), 60), read
        assert set(read) == {SEEN}

        def assigned_topics() -> set[str]:
            group = describe(cluster, GROUP)
            return {t.topic_name for m in group.members for t in m.assignment.topic_partitions}

        assert assigned_topics() == {SEEN}
        # Nothing of rx-hidden arrives while bob may not Describe it.
        assert not wait_until(lambda: poll_until(5), 3)
        assert set(read) == {SEEN}
        # Once bob may Read it (and so Describe it), its next check (within
        # REGEX_RECHECK_S) assigns it.
        cluster.admin.create_acls(bob([("topic", HIDDEN, "Read")]))
        assert wait_until(lambda: poll_until(8), REGEX_RECHECK_S + 30), read
        assert read.count(HIDDEN) == 4
        assert assigned_topics() == {SEEN, HIDDEN}
    finally:
        if consumer is not None:
            consumer.close()
        listener.stop()
        cluster.close()
