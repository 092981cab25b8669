"""Admin, the one admin API (the `seglog` CLI uses it too): topics and their configs,
offsets, the cluster, ACLs, and consumer groups with their committed offsets and lag — what
Kafka's AdminClient and kafka-consumer-groups.sh answer.

    with Admin(bootstrap="127.0.0.1:7070") as admin:
        admin.create_topic("orders", num_partitions=6, configs={"retention.ms": "86400000"})
        for tp, position in admin.list_group_offsets("billing").items():
            print(tp, position.committed, position.lag)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import grpc

from ..errors import InvalidConfigError, SeglogError
from ..rpc.client_id import check_client_id
from ..rpc.status import error_from_code, error_from_rpc
from ..security.acls import AclBinding
from ..security.tls import ClientSecurity
from ..v1 import common_pb2, gateway_pb2, groups_pb2
from .admin_reassignments import ReassignmentAdmin
from .gateway import EARLIEST, LATEST, GatewayClient, partition_offsets
from .group_types import GroupDescription, GroupListing, GroupOffset, MemberDescription
from .structs import OffsetAndTimestamp, TopicPartition
from .transaction_admin import (
    TransactionDescription,
    TransactionListing,
    describe_transaction,
    list_transactions,
)

logger = logging.getLogger(__name__)

DEFAULT_CLIENT_ID = "seglog-admin"  # as the producer's and consumer's defaults (config.py)


class Admin(ReassignmentAdmin):
    """Every admin operation, for programs and the `seglog` CLI alike: topics and their
    configs, the cluster, offsets, consumer groups and ACLs (Kafka's AdminClient); moving
    partitions, elections and log dirs (admin_reassignments.py). Security
    as the producer's and consumer's: `security_protocol` and `ssl_*` files, `bearer_token`
    (else SEGLOG_BEARER_TOKEN), or SEGLOG_TLS_CA / _CERT / _KEY when none is given;
    `client_id` as theirs (Kafka's client.id, on every call)."""

    def __init__(
        self,
        bootstrap: str | None = None,
        *,
        timeout_s: float = 30.0,
        security_protocol: str = "",
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        bearer_token: str | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
    ) -> None:
        try:
            security = ClientSecurity.resolve(
                security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile, bearer_token
            )
            check_client_id(client_id)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        self._client = GatewayClient(
            bootstrap, timeout_s=timeout_s, security=security, client_id=client_id
        )
        self._groups = self._client.group_coordinators
        self.timeout_s = timeout_s

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics and cluster ----------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> str:
        """-1 partitions: one (Kafka's num.partitions default); -1 replicas: the gateway's
        default.replication.factor. Returns the gateway's warning ("" when none), also
        logged: a replication factor below the topic's min.insync.replicas, so that every
        acks=all write to it would be refused."""
        request = gateway_pb2.CreateTopicsRequest(validate_only=validate_only)
        request.topics.add(
            name=name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=dict(configs or {}),
        )
        response = self._client.call("CreateTopics", request)
        _raise_first(response.topics)  # type: ignore[attr-defined]
        warning: str = response.topics[0].warning  # type: ignore[attr-defined]
        if warning:
            logger.warning("topic %s: %s", name, warning)
        return warning

    def delete_topic(self, name: str) -> None:
        request = gateway_pb2.DeleteTopicsRequest(names=[name])
        response = self._client.call("DeleteTopics", request)
        _raise_first(response.topics)  # type: ignore[attr-defined]

    def create_partitions(self, topic: str, count: int, *, validate_only: bool = False) -> None:
        """Grow `topic` to `count` partitions (Kafka's AdminClient.createPartitions). Keyed
        records go to murmur2(key) % count, so most keys move to other partitions, as in
        Kafka: per-key order holds only within each partition count."""
        request = gateway_pb2.CreatePartitionsRequest(validate_only=validate_only)
        request.topics.add(topic=topic, count=count)
        response = self._client.call("CreatePartitions", request)
        _raise_first(response.topics)  # type: ignore[attr-defined]

    def describe_configs(self, topic: str) -> dict[str, tuple[str, str]]:
        """Every topic config: Kafka name -> (effective value, source), the source being
        "topic" (its override), "node" (the leader node's default) or "default" (Kafka's)."""
        request = gateway_pb2.DescribeConfigsRequest(topics=[topic])
        response = self._client.call("DescribeConfigs", request)
        (described,) = response.topics  # type: ignore[attr-defined]
        if described.error:
            raise error_from_code(described.error, described.error_message)
        return {e.name: (e.value, e.source) for e in described.entries}

    def describe_cluster_configs(self) -> dict[str, dict[str, str]]:
        """The cluster's settings: "gateway" -> its settings, "node <id>" -> that node's
        topic defaults (its --config log.* settings)."""
        request = gateway_pb2.DescribeConfigsRequest(cluster=True)
        response = self._client.call("DescribeConfigs", request)
        out = {"gateway": {e.name: e.value for e in response.gateway}}  # type: ignore[attr-defined]
        for node in response.nodes:  # type: ignore[attr-defined]
            out[f"node {node.node_id}"] = {e.name: e.value for e in node.entries}
        return out

    def alter_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str],
        delete: Iterable[str] = (),
        *,
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Kafka's incrementalAlterConfigs: set and delete overrides, append items to and
        subtract items from list configs (`{"cleanup.policy": "compact"}`), validated
        together."""
        request = gateway_pb2.AlterConfigsRequest(
            topic=topic,
            set=dict(set_configs),
            delete=list(delete),
            append=dict(append or {}),
            subtract=dict(subtract or {}),
            validate_only=validate_only,
        )
        response = self._client.call("AlterConfigs", request)
        if response.error:  # type: ignore[attr-defined]
            raise error_from_code(response.error, response.error_message)  # type: ignore[attr-defined]

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return [t.name for t in self._client.list_topics(include_internal)]

    def describe_topics(self, names: Iterable[str] = ()) -> list[gateway_pb2.TopicDescription]:
        """Every topic when `names` is empty; an unknown name comes back with its error set."""
        return self._client.describe_topics(names)

    def describe_topic(self, name: str) -> gateway_pb2.TopicDescription:
        """One topic; its error (an unknown topic) raised."""
        (description,) = self._client.describe_topics([name])
        if description.error:
            raise error_from_code(description.error, description.error_message)
        return description

    def describe_cluster(self) -> gateway_pb2.DescribeClusterResponse:
        request = gateway_pb2.DescribeClusterRequest()
        return self._client.call("DescribeCluster", request)  # type: ignore[return-value]

    def list_offsets(
        self, specs: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Per partition: EARLIEST, LATEST, MAX_TIMESTAMP or a timestamp in ms ->
        (offset, timestamp); offset -1 when no record is as late as the timestamp."""
        return partition_offsets(self._client, specs)

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Kafka's deleteRecords: each partition's log start offset moved forward to the offset
        given (-1: the high watermark); returns each partition's new log start offset (the
        low watermark). The first partition's error is raised (OFFSET_OUT_OF_RANGE beyond
        the high watermark), after every partition was tried."""
        request = common_pb2.DeleteRecordsRequest()
        for tp, offset in before.items():
            request.partitions.add(topic=tp.topic, partition=tp.partition, offset=offset)
        response = self._client.call("DeleteRecords", request)
        results = list(response.partitions)  # type: ignore[attr-defined]
        _raise_first(results)
        return {TopicPartition(r.topic, r.partition): r.low_watermark for r in results}

    # -- ACLs (Kafka's model: security/acls.py) ----------------------------------------------

    # -- client quotas (Kafka's; the gateway enforces them on Produce and Fetch) -----------

    def alter_client_quotas(
        self,
        entity: Mapping[str, str | None],
        set_rates: Mapping[str, float] | None = None,
        remove: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set or remove quota keys (producer_byte_rate, consumer_byte_rate, bytes/s) of one
        entity: {"user": name, "client-id": name}, either or both, a None name being that
        type's default."""
        entry = gateway_pb2.ClientQuotaAlteration(entity=_quota_entity(entity))
        for key, value in (set_rates or {}).items():
            entry.ops.add(key=key, value=value)
        for key in remove:
            entry.ops.add(key=key, remove=True)
        request = gateway_pb2.AlterClientQuotasRequest(validate_only=validate_only)
        request.entries.append(entry)
        self._client.call("AlterClientQuotas", request)

    def describe_client_quotas(
        self, entity: Mapping[str, str | None] | None = None
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Every entity's quotas (or one entity's): (entity as alter_client_quotas takes it,
        key -> bytes/s)."""
        request = gateway_pb2.DescribeClientQuotasRequest(
            components=_quota_entity(entity) if entity else []
        )
        response = self._client.call("DescribeClientQuotas", request)
        return [
            (
                {c.entity_type: None if c.is_default else c.name for c in entry.entity},
                dict(entry.values),
            )
            for entry in response.entries  # type: ignore[attr-defined]
        ]

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        self._client.call(
            "CreateAcls",
            gateway_pb2.CreateAclsRequest(
                acls=[gateway_pb2.AclBinding(**a.to_json()) for a in acls]
            ),
        )

    def describe_acls(
        self, principal: str = "", resource_type: str = "", resource_name: str = ""
    ) -> list[AclBinding]:
        response = self._client.call(
            "DescribeAcls",
            gateway_pb2.DescribeAclsRequest(
                principal=principal, resource_type=resource_type, resource_name=resource_name
            ),
        )
        return [AclBinding.from_message(a) for a in response.acls]  # type: ignore[attr-defined]

    def delete_acls(self, acls: Iterable[AclBinding]) -> int:
        response = self._client.call(
            "DeleteAcls",
            gateway_pb2.DeleteAclsRequest(
                acls=[gateway_pb2.AclBinding(**a.to_json()) for a in acls]
            ),
        )
        return int(response.deleted)  # type: ignore[attr-defined]

    # -- consumer groups -----------------------------------------------------------------------

    def _group_call(self, method: str, request: object, group_id: str | None = None) -> object:
        """A group call, sent to the group's coordinator (the bootstrap gateways when the
        call is about no group)."""
        try:
            if group_id is None:
                stub = self._groups.stub_at("")
                response = getattr(stub, method)(request, timeout=self.timeout_s)
            else:
                response = self._groups.call(group_id, method, request, self.timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        error = getattr(response, "error", 0)
        if error:
            raise error_from_code(error, response.error_message)
        return response

    def list_groups(self) -> list[GroupListing]:
        """Every gateway lists the groups it coordinates (Kafka's admin client asks every
        broker); with one gateway that is all of them."""
        gateways = list(self.describe_cluster().gateways)
        listings: dict[str, GroupListing] = {}
        for address in gateways if len(gateways) > 1 else [""]:
            try:
                stub = self._groups.stub_at(address)
                response = stub.ListGroups(groups_pb2.ListGroupsRequest(), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                raise error_from_rpc(exc) from None
            for g in response.groups:
                listings[g.group_id] = GroupListing(g.group_id, g.state, g.member_count)
        return [listings[g] for g in sorted(listings)]

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        out = []
        for group_id in group_ids:  # each to its own coordinator
            request = groups_pb2.DescribeGroupsRequest(group_ids=[group_id])
            response = self._group_call("DescribeGroups", request, group_id)
            out.extend(self._descriptions(response))
        return out

    def _descriptions(self, response: object) -> list[GroupDescription]:
        out = []
        for g in response.groups:  # type: ignore[attr-defined]
            if g.error:
                raise error_from_code(g.error, g.error_message)
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    frozenset(
                        TopicPartition(tp.topic, p) for tp in m.assignment for p in tp.partitions
                    ),
                )
                for m in g.members
            )
            out.append(
                GroupDescription(
                    g.group_id, g.state, g.generation_id, g.assignment_strategy, members
                )
            )
        return out

    def describe_group(self, group_id: str) -> GroupDescription:
        (description,) = self.describe_groups([group_id])
        return description

    def list_group_offsets(self, group_id: str) -> dict[TopicPartition, GroupOffset]:
        """Every partition the group has committed, with the log end offset and the lag."""
        response = self._group_call(
            "FetchOffsets", groups_pb2.FetchOffsetsRequest(group_id=group_id), group_id
        )
        committed = {
            TopicPartition(o.topic, o.partition): o
            for o in response.offsets  # type: ignore[attr-defined]
        }
        if not committed:
            return {}
        try:
            ends = self.list_offsets(dict.fromkeys(committed, LATEST))
        except SeglogError:
            ends = {}
        out = {}
        for tp, entry in sorted(committed.items()):
            end = ends[tp].offset if tp in ends else -1
            lag = max(end - entry.offset, 0) if end >= 0 else -1
            out[tp] = GroupOffset(entry.offset, end, lag, entry.metadata)
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, SeglogError | None]:
        """Kafka's deleteConsumerGroups: per group None, or why it was not deleted (active
        members: NON_EMPTY_GROUP; unknown: GROUP_ID_NOT_FOUND)."""
        out: dict[str, SeglogError | None] = {}
        for group_id in group_ids:
            response = self._group_call(
                "DeleteGroups", groups_pb2.DeleteGroupsRequest(group_ids=[group_id]), group_id
            )
            for r in response.groups:  # type: ignore[attr-defined]
                out[r.group_id] = error_from_code(r.error, r.error_message) if r.error else None
        return out

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> int:
        """Kafka's deleteConsumerGroupOffsets, for topics its members do not read; returns
        how many committed offsets were deleted."""
        request = groups_pb2.DeleteOffsetsRequest(group_id=group_id)
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for topic, numbers in sorted(by_topic.items()):
            request.partitions.add(topic=topic, partitions=sorted(numbers))
        response = self._group_call("DeleteOffsets", request, group_id)
        return int(response.deleted)  # type: ignore[attr-defined]

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set a group's committed offsets (Kafka's AdminClient.alterConsumerGroupOffsets);
        refused while the group has active members, who own their positions."""
        request = groups_pb2.CommitOffsetsRequest(group_id=group_id, member_id="", generation_id=-1)
        for tp, offset in sorted(offsets.items()):
            request.offsets.add(topic=tp.topic, partition=tp.partition, offset=offset)
        response = self._group_call("CommitOffsets", request, group_id)
        for result in response.partitions:  # type: ignore[attr-defined]
            if result.error:
                raise error_from_code(result.error, result.error_message)

    # -- transactions ---------------------------------------------------------------------

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The transactional id's state, asked of its coordinator."""
        calls = self._client.txn_coordinators
        return describe_transaction(calls, transactional_id, self.timeout_s)

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        calls = self._client.txn_coordinators
        return list_transactions(calls, states, producer_ids, self.timeout_s)


def _raise_first(
    results: Iterable[gateway_pb2.TopicResult] | Iterable[common_pb2.DeleteRecordsResult],
) -> None:
    for result in results:
        if result.error:
            raise error_from_code(result.error, result.error_message)


__all__ = [
    "EARLIEST",
    "LATEST",
    "Admin",
    "GroupDescription",
    "GroupListing",
    "GroupOffset",
    "MemberDescription",
]


def _quota_entity(entity: Mapping[str, str | None]) -> list[gateway_pb2.QuotaEntity]:
    return [
        gateway_pb2.QuotaEntity(entity_type=kind, name=name or "", is_default=name is None)
        for kind, name in entity.items()
    ]
