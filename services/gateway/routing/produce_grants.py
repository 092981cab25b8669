"""Gateway.ProduceGrants: produce grants for the bulk path (proto/seglog/v1/bulk.md, version
3). A producer holding one sends its produce requests straight to each partition's leader's
bulk listener, one hop instead of two; the leader appends them as it appends the gateway's.

A grant names the topics it covers and one node, and expires (`ttl_ms`); one is made for
each node with a bulk listener, since a topic's leaders move between them. What the gateway
checks on each Produce it checks here, once per grant: the caller's Write on each topic (the
authorizer's rule for this call), the topic existing and not internal. What it cannot
check per grant — a producer_byte_rate quota, metered per request — means no grant: that
caller's records go through Produce. A topic refused is named in `errors`, partition -1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seglog.errors import InvalidRequestError, InvalidTopicError, SeglogError
from seglog.rpc import grants
from seglog.rpc.status import error_code_for
from seglog.v1 import bulk_pb2

from ..cluster.topic_rules import is_internal_topic


def produce_grants(
    request: bulk_pb2.ProduceGrantsRequest,
    topic_exists: Callable[[str], Any],
    bulk_routes: Callable[[], dict[int, str]],
    cluster_secret: bytes | None,
    ttl_ms: int,
    acls_offset: int,
) -> bulk_pb2.ProduceGrantsResponse:
    """`topic_exists` raises UnknownTopicOrPartitionError for a topic that does not;
    `acls_offset`: the metadata offset of the ACLs the caller's Write was checked under."""
    response = bulk_pb2.ProduceGrantsResponse()
    granted: list[str] = []
    for topic in dict.fromkeys(request.topics):
        try:
            if cluster_secret is None:
                raise InvalidRequestError(
                    "the bulk produce path is off: the gateway has no cluster secret"
                )
            if is_internal_topic(topic):
                raise InvalidTopicError(
                    f"topic {topic!r} is internal: only the cluster itself writes it"
                )
            topic_exists(topic)
        except SeglogError as exc:
            response.errors.add(
                topic=topic, partition=-1, error=error_code_for(exc), error_message=str(exc)
            )
            continue
        granted.append(topic)
    if not granted:
        return response
    assert cluster_secret is not None
    for node_id, bulk_address in sorted(bulk_routes().items()):
        grant, signature, expires_at_ms = grants.issue(
            cluster_secret, node_id, (), ttl_ms, produce_topics=granted, acls_offset=acls_offset
        )
        response.grants.add(
            node_id=node_id,
            bulk_address=bulk_address,
            grant=grant,
            signature=signature,
            expires_at_ms=expires_at_ms,
        )
    return response
