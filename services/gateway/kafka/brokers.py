"""The gateways as Kafka brokers: their broker ids and addresses, and which one Metadata names
as each partition's leader (spread over the live gateways when several share etcd, each
publishing its Kafka address with its gateway session). A gateway with several lanes
(listener.py: `--kafka-lanes`) is that many brokers, one per lane's address; within the
gateway a partition is led by the lane of its storage leader.

A gateway's broker id is derived from its advertised Kafka address, so every gateway computes
the same id for every other without coordinating, and a restarted gateway keeps its id. The
ids live above 2^30, out of the way of storage node ids (which Metadata's replica and ISR
lists name): a client reading `leader 1074..., replicas [1, 2, 3]` sees both kinds.
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

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def broker_id(advertised_address: str) -> int:
    """A stable id for the gateway advertising `advertised_address` (host:port)."""
    return GATEWAY_BROKER_ID_BASE + zlib.crc32(advertised_address.encode()) % (
        GATEWAY_BROKER_ID_BASE - 1
    )


def broker_at(advertised_address: str) -> Broker:
    host, port = split_address(advertised_address)
    return Broker(broker_id(advertised_address), host, port)


def this_broker(core: KafkaCore, advertised_address: str | None = None) -> Broker:
    """The answering gateway as a broker: its id from its Kafka listener's advertised
    address, host and port from `advertised_address` when given (the address of the
    listener a client came through, `KafkaCall.advertised_address`)."""
    own = core.peers.kafka_advertised_address
    host, port = split_address(advertised_address or own)
    return Broker(broker_id(own), host, port)


def live_gateways(core: KafkaCore, advertised_address: str | None = None) -> list[list[Broker]]:
    """Every live gateway with a Kafka listener as its lanes' brokers (lane 0 first), by
    lane 0's broker id: with several gateways on etcd, those whose session publishes a Kafka
    address (gateway_session.py), always including the answering one (its lane 0 named by
    `advertised_address`, the address of the listener a client came through); else the
    answering gateway alone."""
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


def live_brokers(core: KafkaCore, advertised_address: str | None = None) -> list[Broker]:
    """Every broker of `live_gateways`, each gateway's lanes together."""
    return [broker for lanes in live_gateways(core, advertised_address) for broker in lanes]


def leader_of(
    gateways: list[list[Broker]], topic: str, partition: int, storage_leader: int
) -> Broker:
    """The broker Metadata names as the partition's leader: a gateway of `gateways` (as
    `live_gateways` lists them) by a hash of the partition's name, and of its lanes the one
    of the partition's storage leader (its node id modulo the lanes). Every gateway with the
    same view of the live gateways names the same one, and any lane of any gateway relays
    to the real leader, so a client that writes to another (its metadata older) is served
    all the same."""
    lanes = gateways[zlib.crc32(f"{topic}-{partition}".encode()) % len(gateways)]
    return lanes[max(storage_leader, 0) % len(lanes)]


def controller_id(core: KafkaCore) -> int:
    """The broker id of the controller gateway (the answering one when it is, when it alone
    runs, or when the controller publishes no Kafka address)."""
    peers = core.peers
    if peers.gateway_session is not None:
        controller = peers.election.controller_address
        kafka_address = peers.gateway_session.live_kafka_addresses().get(controller)
        if kafka_address is not None:
            return broker_id(kafka_address)
    return broker_id(peers.kafka_advertised_address)


def broker_of_gateway(
    core: KafkaCore, gateway_address: str, advertised_address: str | None = None
) -> Broker | None:
    """The Kafka broker of the gateway at `gateway_address` (its gRPC address, as
    coordination names gateways: a group's coordinator, the controller); None when that
    gateway is not live or has no Kafka listener. The answering gateway is always known."""
    session = core.peers.gateway_session
    if gateway_address == core.peers.advertised_address or session is None:
        return this_broker(core, advertised_address)
    kafka_address = session.live_kafka_addresses().get(gateway_address)
    return None if kafka_address is None else broker_at(kafka_address)


def cluster_id(core: KafkaCore) -> str:
    """The cluster's id as Kafka clients see it (Metadata, DescribeCluster): the registry's,
    made once when it was bootstrapped (Kafka's form, a UUID in 22 URL-safe base64
    characters), the same in every gateway and in each node's meta.properties."""
    return core.registry.cluster_id
