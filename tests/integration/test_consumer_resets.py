"""A consumer's position reset (seglog.client.position_resets) when the partition's leader is
away: a retriable failure of the lookup is asked again after retry_backoff_ms, as Kafka's
consumer does, and `poll` does not raise it."""

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster, drain


def produce(address, topic, values):
    with Producer(address, linger_ms=0) as producer:
        for future in [producer.send(topic, v) for v in values]:
            future.get(timeout=10)


def test_a_reset_while_the_leader_is_away_waits_for_it_instead_of_raising(tmp_path):
    # As Kafka's consumer: a retriable failure of the reset's lookup is asked again after
    # retry_backoff_ms; poll does not raise it.
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        cluster.admin.create_topic("away", 1)
        produce(cluster.address, "away", [b"a", b"b"])
        cluster.stop_node(1, controlled=False)
        tp = TopicPartition("away", 0)
        with Consumer(
            cluster.address, auto_offset_reset="earliest", retry_backoff_ms=20
        ) as consumer:
            consumer.assign([tp])
            for _ in range(3):
                assert consumer.poll_records(timeout_ms=50) == []
            cluster.start_node(1)
            assert [r.value for r in drain(consumer, 2)] == [b"a", b"b"]
    finally:
        cluster.close()
