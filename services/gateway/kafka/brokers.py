"""The gateways as Kafka brokers: their broker ids and addresses, and which one Metadata names
as each partition's leader.

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
    from ..server import Gateway

GATEWAY_BROKER_ID_BASE = 1 << 30
# Kafka's cluster id (Metadata 2+, DescribeCluster). seglog keeps none of its own, so one
# name for every seglog cluster; it must not be null: librdkafka's describe_cluster, which
# reads it from Metadata, never completes when it is.
CLUSTER_ID = "seglog"


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


def this_broker(gateway: Gateway) -> Broker:
    """The answering gateway as a broker (its Kafka listener's advertised address)."""
    return broker_at(gateway.kafka_advertised_address)


def live_brokers(gateway: Gateway) -> list[Broker]:
    """Every gateway a client may use. Only the answering gateway for now: several gateways
    on etcd publish gRPC addresses, not Kafka ones, so a client reaches the cluster through
    the gateway(s) it was given (every gateway relays every partition)."""
    return [this_broker(gateway)]


def leader_broker(gateway: Gateway, topic: str, partition: int) -> Broker:
    """The gateway Metadata names as the partition's leader: any gateway relays to the real
    leader, so the answering one."""
    return this_broker(gateway)
