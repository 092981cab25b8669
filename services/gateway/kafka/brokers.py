"""Who Kafka clients see as brokers: the storage nodes, each under its own node id, at the
address of a gateway lane of its own that relays to it.

Why the nodes and not the gateways: Kafka's tools and admin clients take a partition's
replicas, ISR and offline replicas (which are storage node ids) to be broker ids of the
broker list. kafka-reassign-partitions checks every id of a plan against DescribeCluster
("Unknown broker id 2") and builds --generate's plan from the listed brokers ("All brokers are
currently fenced" when none of the ids asked for is listed); kafka-log-dirs asks each listed
broker for its own log dirs; throttles are broker configs keyed by broker id. With the nodes as
the brokers, every id a client reads names something it can address, and what a tool does to
broker 2 is done to node 2.

Why a gateway lane as its address: clients never talk to a node (the gateway routes every
request, holds groups and ACLs), and any lane of any gateway serves any request, so the
address only decides which connection a client uses. Why a lane of its own: librdkafka (up to
at least 2.0, Debian's kcat among them; its issue #4212) keys brokers by host:port as well as
by id, so two ids at one address make it rename one broker back and forth and never fetch
from the others; and a per-broker request arriving on a lane (DescribeLogDirs) then names its
node. The registered nodes, in id order, take the lanes in turn: the i-th at the live gateway
`i mod G` (gateways in broker-id order, so every gateway answers alike without coordinating),
its lane `i div G`. A node keeps its place while it is down (registered nodes, not live ones,
are counted), so a failure moves no other node's address.

When the lanes are too few for that (`--kafka-lanes` below the nodes over the gateways), the
gateways' lanes are the brokers instead, under ids of their own (`broker_id`: derived from the
advertised address, above 2^30, out of the way of node ids), each partition led by the lane
of its storage leader at a gateway its name hashes to: every client works as before, but
Kafka's broker tools need the lanes. Likewise when no node is live, so a client can still
reach the cluster to ask what is wrong.

A partition's leader in Metadata is its storage leader's id. Kafka's MetadataCache lists only
registered, unfenced brokers: a node whose session lapsed is left out (its replicas show in
`offline_replicas`); a decommissioned node still serves its replicas and stays listed. Nodes
carry no rack (rack=None, as a Kafka broker without broker.rack). The controller id is a node
presented at the controller gateway (any lane serves a controller's APIs), and a group's
coordinator a node presented at the coordinating core, so both are ids Metadata lists.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import KafkaCore

GATEWAY_BROKER_ID_BASE = 1 << 30


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerView:
    """The broker list one answer names, and which broker is which node's."""

    brokers: tuple[Broker, ...]
    controller_id: int
    # The lanes of every live gateway (lane 0 first), in broker-id order: `gateways[i][j]`.
    gateways: tuple[tuple[Broker, ...], ...]
    # Each registered node's (core index, lane index); {}: the gateways' lanes are the
    # brokers (too few lanes, or no node live).
    placed: dict[int, tuple[int, int]]

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(b.node_id for b in self.brokers)

    def leader(self, topic: str, partition: int, storage_leader: int) -> int:
        """The broker Metadata names as a partition's leader: its storage leader, or with the
        gateways as brokers the lane of it at the gateway the partition's name hashes to."""
        if self.placed:
            return storage_leader
        lanes = self.gateways[zlib.crc32(f"{topic}-{partition}".encode()) % len(self.gateways)]
        return lanes[max(storage_leader, 0) % len(lanes)].node_id


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def broker_id(advertised_address: str) -> int:
    """A stable id for the gateway lane advertising `advertised_address` (host:port)."""
    return GATEWAY_BROKER_ID_BASE + zlib.crc32(advertised_address.encode()) % (
        GATEWAY_BROKER_ID_BASE - 1
    )


def broker_at(advertised_address: str) -> Broker:
    host, port = split_address(advertised_address)
    return Broker(broker_id(advertised_address), host, port)


def this_broker(core: KafkaCore, advertised_address: str | None = None) -> Broker:
    """The answering gateway's lane 0 as a gateway broker: its id from its Kafka listener's
    advertised address, host and port from `advertised_address` when given (the address of
    the listener a client came through, `KafkaCall.advertised_address`)."""
    host, port = split_address(advertised_address or core.peers.kafka_advertised_address)
    return Broker(broker_id(core.peers.kafka_advertised_address), host, port)


def live_gateways(core: KafkaCore, advertised_address: str | None = None) -> list[list[Broker]]:
    """Every live gateway with a Kafka listener as its lanes' gateway brokers (lane 0 first),
    by lane 0's broker id: with several gateways on etcd, those whose session publishes a
    Kafka address (gateway_session.py), always including the answering one (its lane 0 named
    by `advertised_address`); else the answering gateway alone."""
    this = [this_broker(core, advertised_address)]
    this.extend(broker_at(lane) for lane in core.peers.kafka_advertised_lanes[1:])
    session = core.peers.gateway_session
    if session is None:
        return [this]
    gateways = {this[0].node_id: this}
    for lanes in session.live_kafka_lanes().values():
        brokers = [broker_at(lane) for lane in lanes]
        gateways.setdefault(brokers[0].node_id, brokers)
    return [gateways[node_id] for node_id in sorted(gateways)]


def placement(core: KafkaCore, gateways: list[list[Broker]]) -> dict[int, tuple[int, int]]:
    """Each registered node's (core index, lane index), the module's rule; {} when the
    lanes are too few for a lane per node."""
    placed = {}
    count = len(gateways)
    for rank, node in enumerate(sorted(core.registry.addresses())):
        index, lane = rank % count, rank // count
        if lane >= len(gateways[index]):
            return {}
        placed[node] = (index, lane)
    return placed


def broker_view(core: KafkaCore, advertised_address: str | None = None) -> BrokerView:
    """The brokers Metadata and DescribeCluster name (the module says which), and the
    controller among them."""
    gateways = live_gateways(core, advertised_address)
    frozen = tuple(tuple(lanes) for lanes in gateways)
    placed = placement(core, gateways)
    live = [n for n in core.registry.live_nodes() if n in placed]
    controller = _controller_index(core, gateways)
    if not live:
        lanes = tuple(b for g in gateways for b in g)
        return BrokerView(lanes, gateways[controller][0].node_id, frozen, {})
    brokers = tuple(_at(gateways, node, placed[node]) for node in live)
    on_controller = [n for n in live if placed[n][0] == controller]
    return BrokerView(brokers, (on_controller or live)[0], frozen, placed)


def _at(gateways: list[list[Broker]], node: int, place: tuple[int, int]) -> Broker:
    at = gateways[place[0]][place[1]]
    return Broker(node, at.host, at.port)


def _controller_index(core: KafkaCore, gateways: list[list[Broker]]) -> int:
    wanted = _controller_gateway_id(core, gateways)
    for i, lanes in enumerate(gateways):
        if lanes[0].node_id == wanted:
            return i
    return 0


def _controller_gateway_id(core: KafkaCore, gateways: list[list[Broker]]) -> int:
    """The gateway broker id of the controller gateway (the answering one when it is, when it
    alone runs, or when the controller publishes no Kafka address)."""
    session = core.peers.gateway_session
    if session is not None:
        kafka_address = session.live_kafka_addresses().get(core.peers.election.controller_address)
        if kafka_address is not None:
            return broker_id(kafka_address)
    return broker_id(core.peers.kafka_advertised_address)


def controller_id(core: KafkaCore) -> int:
    """The broker id Metadata and DescribeCluster name as the controller."""
    return broker_view(core).controller_id


def broker_on_gateway(
    core: KafkaCore, kafka_address: str, advertised_address: str | None = None
) -> Broker:
    """The broker a client is sent to for what the gateway whose lane 0 advertises
    `kafka_address` must answer itself (a group it coordinates): the lowest live node
    presented at it, so the id is one Metadata lists (librdkafka drops brokers Metadata no
    longer lists); its lane 0 as a gateway broker when the gateways are the brokers or none
    of its nodes is live."""
    view = broker_view(core, advertised_address)
    wanted = broker_id(kafka_address)
    for index, lanes in enumerate(view.gateways):
        if lanes[0].node_id != wanted:
            continue
        for broker in view.brokers:
            if view.placed.get(broker.node_id, (-1, -1))[0] == index:
                return broker
        return lanes[0]
    if wanted == broker_id(core.peers.kafka_advertised_address):
        return this_broker(core, advertised_address)
    return broker_at(kafka_address)


def broker_of_gateway(
    core: KafkaCore, gateway_address: str, advertised_address: str | None = None
) -> Broker | None:
    """The Kafka broker of the gateway at `gateway_address` (its gRPC address, as
    coordination names gateways: a group's coordinator, the controller); None when that
    gateway is not live or has no Kafka listener. The answering gateway is always known."""
    if gateway_address == core.peers.advertised_address or core.peers.gateway_session is None:
        return broker_on_gateway(core, core.peers.kafka_advertised_address, advertised_address)
    kafka_address = core.peers.gateway_session.live_kafka_addresses().get(gateway_address)
    if kafka_address is None:
        return None
    return broker_on_gateway(core, kafka_address, advertised_address)


def nodes_on_lane(core: KafkaCore, lane: int) -> list[int]:
    """The live nodes a per-broker request arriving at this gateway's lane `lane` is for:
    the one presented there, or every node when the gateways' lanes are the brokers."""
    view = broker_view(core)
    if not view.placed:
        return core.registry.live_nodes()
    own = broker_id(core.peers.kafka_advertised_address)
    index = next(i for i, lanes in enumerate(view.gateways) if lanes[0].node_id == own)
    return [b.node_id for b in view.brokers if view.placed[b.node_id] == (index, lane)]


def cluster_id(core: KafkaCore) -> str:
    """The cluster's id as Kafka clients see it (Metadata, DescribeCluster): the registry's,
    made once when it was bootstrapped (Kafka's form, a UUID in 22 URL-safe base64
    characters), the same in every gateway and in each node's meta.properties."""
    return core.registry.cluster_id
