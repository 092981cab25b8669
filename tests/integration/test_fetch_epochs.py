"""A consumer's fetch relayed by the gateway carries the leader epoch it was routed by, so the
node answers only while it leads that epoch (as a Kafka consumer's fetch carries its
`current_leader_epoch`): a node whose view differs answers NOT_LEADER, which is retried,
instead of judging the offset against a log that is not the leader's."""

from seglog.client.gateway import FetchPosition
from seglog.client.producer import Producer
from seglog.records import iter_records
from seglog.v1 import common_pb2


def produce(address, topic, values):
    """Written by all replicas (acks=all), so the high watermark covers them."""
    with Producer(address, acks="all", linger_ms=0) as producer:
        for future in [producer.send(topic, value, partition=0) for value in values]:
            future.get(timeout=10)


def _spy_fetches(node, monkeypatch):
    """Record what the node's replica manager is asked (the real method still answers)."""
    seen = []
    original = node.replicas.fetch_states

    def recording(wanted, replica_id=-1):
        seen.append(list(wanted))
        return original(wanted, replica_id)

    monkeypatch.setattr(node.replicas, "fetch_states", recording)
    return seen


def test_a_relayed_fetch_carries_the_routed_leader_epoch(cluster, monkeypatch):
    cluster.admin.create_topic("epochs", 1, replication_factor=3)
    produce(cluster.address, "epochs", [b"a", b"b"])
    route = cluster.gateway.registry.route("epochs", 0)
    seen = _spy_fetches(cluster.nodes[route.leader], monkeypatch)
    (message,) = cluster.client.fetch([FetchPosition("epochs", 0, 0)], max_wait_ms=0)
    assert [r.value for r in iter_records(message.records)] == [b"a", b"b"]
    ((topic, partition, offset, _, client_epoch, _),) = seen[-1]
    assert (topic, partition, offset) == ("epochs", 0, 0)
    assert client_epoch == route.leader_epoch


def test_a_fetch_routed_by_an_epoch_the_node_does_not_lead_is_refused_not_judged(
    cluster, monkeypatch
):
    """The node's own check, reached through the gateway: a request part naming an epoch the
    leader does not hold is answered NOT_LEADER_OR_FOLLOWER (retriable), never
    OFFSET_OUT_OF_RANGE, even for an offset past the log end."""
    cluster.admin.create_topic("stale", 1, replication_factor=3)
    produce(cluster.address, "stale", [b"a"])
    route = cluster.gateway.registry.route("stale", 0)
    node = cluster.nodes[route.leader]
    original = node.replicas.fetch_states

    def one_epoch_later(wanted, replica_id=-1):
        return original([(*w[:4], w[4] + 1, w[5]) for w in wanted], replica_id)

    monkeypatch.setattr(node.replicas, "fetch_states", one_epoch_later)
    (message,) = cluster.client.fetch([FetchPosition("stale", 0, 99)], max_wait_ms=0)
    assert common_pb2.ErrorCode.Name(message.error) == "NOT_LEADER_OR_FOLLOWER"
