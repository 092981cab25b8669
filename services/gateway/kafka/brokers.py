"""Who Kafka clients see as brokers: the storage nodes, each under its own node id, at the
address of a lane of its own on the gateway's Kafka listener that relays to it: the listener's
port + the node's id (node_lanes.py binds it when the node registers).

Why the nodes and not the gateways: Kafka's tools and admin clients take a partition's
replicas, ISR and offline replicas (which are storage node ids) to be broker ids of the
broker list. kafka-reassign-partitions checks every id of a plan against DescribeCluster
("Unknown broker id 2") and builds --generate's plan from the listed brokers ("All brokers are
currently fenced" when none of the ids asked for is listed); kafka-log-dirs asks each listed
broker for its own log dirs; throttles are broker configs keyed by broker id. With the nodes as
the brokers, every id a client reads names something it can address, and what a tool does to
broker 2 is done to node 2.

Why a lane at the gateway as its address: clients never talk to a node (the gateway routes
every request, holds groups and ACLs), and any lane answers any request (a produce only for
the partitions its node leads, as a broker: lane_leaders.py), so the address only decides
which connection a client uses. Why a lane of its own: librdkafka (up to at least 2.0,
Debian's kcat among them; its issue #4212) keys brokers by host:port as well as by id, so two
ids at one address make it rename one broker back and forth and never fetch from the others;
a client keeps a connection per storage leader, so one leader's slow acks=all produce does not
queue another's; and a per-broker request arriving on a lane (DescribeLogDirs) names its node.

Why the port is the listener's port + the node id, not a count of lanes or a rank: Kafka
clients cache a broker's address by id, so the address must not move when other nodes come or
go or the gateway restarts, and every gateway must know it without asking anyone. The id is
all three: a rank among the registered nodes moves when a node with a lower id joins, a count
of lanes given at start runs out when a node is added. A node keeps its address for good
(9092 + 1 is node 1's under `make run`; node 0, a StatefulSet's first pod, is the listener's
own port), lanes are bound as nodes register and closed when a decommissioned node holds no
replica any more, and nothing is worked out per request: Metadata reads the lanes the keeper
bound (node_lanes.py) and the registry's live nodes. Node ids past 65535 - the port have no
lane; such a node is listed at the listener's own address (a warning says so).

Several gateways: each binds every node's lane at its own port + id and answers with its own
addresses, so a client stays on the gateway it bootstrapped through (behind one Kubernetes
Service, all gateways answer alike). A group coordinated by another gateway is found at that
gateway's lane of the lowest live node (its Kafka address + that id): so the gateways need the
same rule, a fixed Kafka port each.

A partition's leader in Metadata is its storage leader's id. Kafka's MetadataCache lists only
registered, unfenced brokers: a node whose session lapsed is left out (its replicas show in
`offline_replicas`); a decommissioned node still serving replicas stays listed in Metadata (it
may still lead where it is the last replica that can), but DescribeCluster, which the tools
choose brokers from, shows it as Kafka shows a fenced broker: left out, or with
`include_fenced_brokers` (v2) listed with `is_fenced`. With no node live, the gateway's own
listener is the one broker (under `broker_id`: derived from its advertised address, above
2^30, out of the way of node ids), so a client can still reach the cluster to ask what is
wrong. Nodes carry no rack (rack=None, as a Kafka broker without broker.rack). The controller
id is the lowest live node, and a group's coordinator a node at the coordinating gateway, so
both are ids Metadata lists.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .node_lanes import NO_NODE, ListenerSide

if TYPE_CHECKING:
    from .core import KafkaCore

GATEWAY_BROKER_ID_BASE = 1 << 30


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerView:
    """The broker list one answer names."""

    brokers: tuple[Broker, ...]
    controller_id: int
    # The answering gateway's own broker when no node is live (the one broker listed then).
    gateway: Broker | None = None

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(b.node_id for b in self.brokers)

    def leader(self, topic: str, partition: int, storage_leader: int) -> int:
        """The broker Metadata names as a partition's leader: its storage leader, or the
        gateway's own broker when no node is listed."""
        return storage_leader if self.gateway is None else self.gateway.node_id


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def broker_id(advertised_address: str) -> int:
    """A stable id for the gateway listener advertising `advertised_address` (host:port)."""
    return GATEWAY_BROKER_ID_BASE + zlib.crc32(advertised_address.encode()) % (
        GATEWAY_BROKER_ID_BASE - 1
    )


def this_broker(core: KafkaCore, listener: ListenerSide | None = None) -> Broker:
    """The answering gateway's listener as a gateway broker: its id from its advertised
    address, host and port from the listener a client came through when given
    (`KafkaCall.listener`)."""
    advertised = listener.advertised_address if listener is not None else None
    host, port = split_address(advertised or core.peers.kafka_advertised_address)
    return Broker(broker_id(core.peers.kafka_advertised_address), host, port)


def node_address(
    core: KafkaCore, node: int, listener: ListenerSide | None, *, bound: bool = True
) -> tuple[str, int] | None:
    """`node`'s lane on the client's listener (the gateway's own listener when not given)."""
    if listener is not None and listener.node_address is not None:
        return listener.node_address(node, bound=bound)
    return core.peers.kafka_node_address(node, bound=bound)


def node_broker(core: KafkaCore, node: int, listener: ListenerSide | None = None) -> Broker | None:
    """`node` as a broker at its lane here; None while its lane is not bound yet."""
    address = node_address(core, node, listener)
    return None if address is None else Broker(node, *address)


def broker_view(core: KafkaCore, listener: ListenerSide | None = None) -> BrokerView:
    """The brokers Metadata names (the live nodes with a lane) and the controller among
    them."""
    brokers = tuple(
        b
        for b in (node_broker(core, n, listener) for n in core.registry.live_nodes())
        if b is not None
    )
    if not brokers:
        gateway = this_broker(core, listener)
        return BrokerView((gateway,), gateway.node_id, gateway)
    return BrokerView(brokers, brokers[0].node_id)


def described_brokers(
    core: KafkaCore, listener: ListenerSide | None, include_fenced: bool
) -> BrokerView:
    """DescribeCluster's brokers: the live nodes that are not decommissioned; with
    `include_fenced`, every node that has a lane, fenced (`Broker.fenced`) when it is down or
    decommissioned (Kafka's getBrokerNodes vs getAliveBrokerNodes)."""
    view = broker_view(core, listener)
    live = set(core.registry.live_nodes())
    decommissioned = core.registry.decommissioned_nodes()
    nodes = set(core.registry.addresses()) if include_fenced else live
    brokers = []
    for node in sorted(nodes):
        fenced = node not in live or node in decommissioned
        if fenced and not include_fenced:
            continue
        # A fenced node's lane may be closed (decommissioned, emptied): shown at its address
        # by the rule, as Kafka shows a fenced broker at its registered endpoint.
        address = node_address(core, node, listener, bound=not fenced)
        if address is not None:
            brokers.append(Broker(node, *address, fenced=fenced))
    controller = next((b.node_id for b in brokers if not b.fenced), view.controller_id)
    return BrokerView(tuple(brokers), controller, view.gateway)


def controller_id(core: KafkaCore) -> int:
    """The broker id Metadata and DescribeCluster name as the controller."""
    return broker_view(core).controller_id


def broker_on_gateway(
    core: KafkaCore, kafka_address: str, listener: ListenerSide | None = None
) -> Broker:
    """The broker a client is sent to for what the gateway whose listener advertises
    `kafka_address` must answer itself (a group it coordinates): the lowest live node at its
    lane there (the listener's port + id, the rule every gateway follows), so the id is one
    Metadata lists (librdkafka drops brokers Metadata no longer lists); the gateway's own
    broker when no node is live."""
    if kafka_address == core.peers.kafka_advertised_address:
        view = broker_view(core, listener)
        return view.gateway or view.brokers[0]
    live = core.registry.live_nodes()
    if not live:
        return Broker(broker_id(kafka_address), *split_address(kafka_address))
    host, port = split_address(kafka_address)
    return Broker(live[0], host, port + live[0])


def broker_of_gateway(
    core: KafkaCore, gateway_address: str, listener: ListenerSide | None = None
) -> Broker | None:
    """The Kafka broker of the gateway at `gateway_address` (its gRPC address, as
    coordination names gateways: a group's coordinator, the controller); None when that
    gateway is not live or has no Kafka listener. The answering gateway is always known."""
    if gateway_address == core.peers.advertised_address or core.peers.gateway_session is None:
        return broker_on_gateway(core, core.peers.kafka_advertised_address, listener)
    kafka_address = core.peers.gateway_session.live_kafka_addresses().get(gateway_address)
    if kafka_address is None:
        return None
    return broker_on_gateway(core, kafka_address, listener)


def nodes_on_lane(core: KafkaCore, lane: int) -> list[int]:
    """The live nodes a per-broker request arriving on lane `lane` (a node id, or NO_NODE for
    the listener's own port when it is no node's) is for: that node, or every live node when
    the request came in on no node's lane (the gateway itself was the broker)."""
    live = core.registry.live_nodes()
    if lane == NO_NODE:
        return live
    return [lane] if lane in live else []


def cluster_id(core: KafkaCore) -> str:
    """The cluster's id as Kafka clients see it (Metadata, DescribeCluster): the registry's,
    made once when it was bootstrapped (Kafka's form, a UUID in 22 URL-safe base64
    characters), the same in every gateway and in each node's meta.properties."""
    return core.registry.cluster_id
