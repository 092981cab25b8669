"""Gateway.FetchGrants: transfer grants for the bulk path (proto/seglog/v1/bulk.md). Each
partition is routed as Fetch routes it; one grant per leader node with a bulk listener,
signed with the cluster secret (rpc/grants.py). What cannot go that way (no secret, no
listener, a routing error) is named in `errors`, and the client reads it through Fetch."""

from __future__ import annotations

from collections.abc import Callable

from seglog.errors import InvalidRequestError, InvalidTopicError, SeglogError
from seglog.rpc import client_leader_epoch, grants
from seglog.rpc.status import error_code_for
from seglog.v1 import bulk_pb2

from ..cluster.registry import Route
from ..cluster.topic_rules import is_internal_topic

# (topic, partition, client leader epoch) -> the leader's route, or a routing error.
RouteOf = Callable[[str, int, int], Route]


def fetch_grants(
    request: bulk_pb2.FetchGrantsRequest,
    route_of: RouteOf,
    cluster_secret: bytes | None,
    ttl_ms: int,
    acls_offset: int,
) -> bulk_pb2.FetchGrantsResponse:
    """`acls_offset`: the metadata offset of the ACLs the caller's Read was checked under."""
    response = bulk_pb2.FetchGrantsResponse()
    by_node: dict[int, tuple[Route, list[tuple[str, int, int, int]]]] = {}
    for p in request.partitions:
        try:
            if is_internal_topic(p.topic):
                raise InvalidTopicError(f"topic {p.topic!r} is internal")
            if cluster_secret is None:
                raise InvalidRequestError(
                    "the bulk fetch path is off: the gateway has no cluster secret"
                )
            route = route_of(p.topic, p.partition, client_leader_epoch(p))
            if not route.bulk_address:
                raise InvalidRequestError(f"node {route.leader} has no bulk listener")
        except SeglogError as exc:
            response.errors.add(
                topic=p.topic,
                partition=p.partition,
                error=error_code_for(exc),
                error_message=str(exc),
            )
            continue
        entry = by_node.setdefault(route.leader, (route, []))
        entry[1].append((p.topic, p.partition, p.fetch_offset, route.leader_epoch))
    for node_id, (route, partitions) in by_node.items():
        assert cluster_secret is not None
        grant, signature, expires_at_ms = grants.issue(
            cluster_secret, node_id, partitions, ttl_ms, acls_offset=acls_offset
        )
        response.grants.add(
            node_id=node_id,
            bulk_address=route.bulk_address,
            grant=grant,
            signature=signature,
            expires_at_ms=expires_at_ms,
        )
    return response
