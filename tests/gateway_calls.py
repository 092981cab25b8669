"""Raw calls through a test cluster's gateway: produce prepared batches and fetch what a
partition holds, as the gateway's protobuf messages, for tests that check its answers field by
field."""

from __future__ import annotations

import grpc

from seglog.client.gateway import FetchPosition
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2


def produce_raw(cluster, topic, batches, *, acks=1, epochs=None):
    request = common_pb2.ProduceRequest(topic=topic, acks=acks, timeout_ms=10_000)
    for partition, records in batches.items():
        request.partitions.add(
            partition=partition,
            records=records,
            current_leader_epoch=(epochs or {}).get(partition, -1),
        )
    try:
        return cluster.stub.Produce(request, timeout=30)
    except grpc.RpcError as exc:
        raise error_from_rpc(exc) from None


def fetch_all(cluster, topic, partition, offset=0, **kwargs):
    messages = list(
        cluster.client.fetch(
            [FetchPosition(topic, partition, offset, kwargs.pop("max_bytes", 1 << 24))],
            max_wait_ms=kwargs.pop("max_wait_ms", 0),
            **kwargs,
        )
    )
    return messages


def log_end_offsets(cluster, topic, partitions):
    return [cluster.log(topic, p).log_end_offset for p in range(partitions)]
