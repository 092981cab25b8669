"""The gateways as Kafka brokers: their broker ids and addresses, and which one Metadata names
as each partition's leader (spread over the live gateways when several share etcd, each
publishing its Kafka address with its gateway session).

A gateway's broker id is derived from its advertised Kafka address, so every gateway computes
the same id for every other without coordinating, and a restarted gateway keeps its id. The
ids live above 2^30, out of the way of storage node ids (which Metadata's replica and ISR
lists name): a client reading `leader 1074..., replicas [1, 2, 3]` sees both kinds.
"""

from __future__ import annotations

import base64
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..server import Gateway

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


def this_broker(gateway: Gateway, advertised_address: str | None = None) -> Broker:
    """The answering gateway as a broker: its id from its Kafka listener's advertised
    address, host and port from `advertised_address` when given (the address of the
    listener a client came through, `KafkaCall.advertised_address`)."""
    host, port = split_address(advertised_address or gateway.kafka_advertised_address)
    return Broker(broker_id(gateway.kafka_advertised_address), host, port)


def live_brokers(gateway: Gateway, advertised_address: str | None = None) -> list[Broker]:
    """Every live gateway with a Kafka listener, by broker id: with several gateways on etcd,
    those whose session publishes a Kafka address (gateway_session.py), always including the
    answering one (named by `advertised_address`, the address of the listener the client
    came through); else the answering gateway alone."""
    this = this_broker(gateway, advertised_address)
    session = gateway.gateway_session
    if session is None:
        return [this]
    brokers = {this.node_id: this}
    for kafka_address in session.live_kafka_addresses().values():
        broker = broker_at(kafka_address)
        brokers.setdefault(broker.node_id, broker)
    return [brokers[node_id] for node_id in sorted(brokers)]


def leader_of(brokers: list[Broker], topic: str, partition: int) -> Broker:
    """The gateway Metadata names as the partition's leader, spread over `brokers` (live
    brokers by id) by a hash of the partition's name: every gateway with the same view of
    the live gateways names the same one, and any gateway relays to the real leader, so a
    client that writes to another (its metadata older) is served all the same."""
    return brokers[zlib.crc32(f"{topic}-{partition}".encode()) % len(brokers)]


def controller_id(gateway: Gateway) -> int:
    """The broker id of the controller gateway (the answering one when it is, when it alone
    runs, or when the controller publishes no Kafka address)."""
    session = gateway.gateway_session
    if session is not None:
        kafka_address = session.live_kafka_addresses().get(gateway.election.controller_address)
        if kafka_address is not None:
            return broker_id(kafka_address)
    return broker_id(gateway.kafka_advertised_address)


def broker_of_gateway(
    gateway: Gateway, gateway_address: str, advertised_address: str | None = None
) -> Broker | None:
    """The Kafka broker of the gateway at `gateway_address` (its gRPC address, as
    coordination names gateways: a group's coordinator, the controller); None when that
    gateway is not live or has no Kafka listener. The answering gateway is always known."""
    if gateway_address == gateway.advertised_address or gateway.gateway_session is None:
        return this_broker(gateway, advertised_address)
    kafka_address = gateway.gateway_session.live_kafka_addresses().get(gateway_address)
    return None if kafka_address is None else broker_at(kafka_address)


def cluster_id(gateway: Gateway) -> str:
    """The cluster's id as Kafka clients see it (Metadata, DescribeCluster): Kafka's form, a
    UUID in 22 URL-safe base64 characters, derived from where the registry lives (the etcd
    key prefix every gateway of the cluster shares, else the single gateway's data dir), so
    all gateways answer the same id without storing one."""
    config = gateway.config
    if config.registry_etcd is not None:
        home = f"etcd:{config.registry_etcd_prefix}"
    else:
        home = f"file:{config.data_dir.resolve()}"
    digest = uuid.uuid5(uuid.NAMESPACE_URL, f"seglog-registry:{home}").bytes
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
