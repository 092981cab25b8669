"""The metadata log's records (Kafka's KRaft metadata records, seglog's way): small JSON
objects, each naming its type, so a change touching k partitions is O(k) records whatever
the size of the cluster. A change is one batch of records, written atomically (the file
store's frame, one etcd transaction) and applied in order.

Record types (`type`), and what they set:

    topic          {name, replication_factor, configs, partitions[, topic_id]}: a topic
                   created or altered; `partitions` is its partition count (a growth is
                   followed by the new partitions' records in the same batch); `topic_id`
                   its KIP-516 id (Kafka's form, as the cluster id), made at creation and
                   never changed. Registries from before ids give each topic one once, at
                   start (registry_bootstrap.py): a record without it keeps the id held.
    partition      {topic, partition, replicas, leader, leader_epoch, isr,
                   partition_epoch[, adding_replicas, removing_replicas,
                   throttle_bytes_per_s, eligible_leader_replicas]}: one partition's
                   whole registration; the three reassignment fields only while a
                   reassignment moves it (KIP-455's addingReplicas/removingReplicas:
                   `replicas` is the target followed by the replicas being removed; absent
                   reads as none), the throttle in bytes/s on the adding replicas' catch-up
                   (0: none); eligible_leader_replicas (KIP-966's ELR, partition_changes.py)
                   only while the ISR is below min ISR and some replica left it
    remove_topic   {name}: the topic and all its partitions are gone
    node           {node_id, address[, min_insync_replicas]}: a storage node registered
                   (or moved), with the min.insync.replicas default its process runs with
                   (its --config): the registry counts eligible leader replicas by it, so
                   it must be known before the node's first heartbeat after a restart
    acl            {op: "add" | "remove", acl: {principal, host, resource_type,
                   pattern_type, resource_name, operation, permission}}
    producer_ids   {next}: the first producer id not yet handed out
    client_quota   {entity: {"user"?: name, "client-id"?: name}, values: {key: bytes/s}}:
                   one quota entity's whole set of values (Kafka's producer_byte_rate,
                   consumer_byte_rate); a name "<default>" is the entity type's default;
                   empty values remove the entity
    node_state     {node_id, decommissioned}: an operator's mark on a node (`seglog nodes
                   decommission|recommission`): a decommissioned node takes no new replica
                   and leads only where no other in-sync replica can; kept apart from the
                   node record, which each registration rewrites
    cluster        {cluster_id[, adopted_from]}: the cluster's id (Kafka's form, 22 URL-safe
                   base64 characters), written once when the registry is bootstrapped and
                   never changed; nodes learn it when they register and keep it in their
                   data dir's meta.properties. `adopted_from` {backend, offset}: this
                   registry began as a copy of another backend's image at that offset
                   (registry_bootstrap.py)
    scram_credential {user, mechanism[, credential: {salt, stored_key, server_key,
                   iterations}]}: a user's SCRAM credential for one mechanism (KIP-554's
                   UserScramCredentialRecord; SCRAM-SHA-256 or SCRAM-SHA-512), the three
                   byte strings in base64, never the password (scram_credentials.py); no
                   credential: removed
    broker_config  {broker, configs: {name: value}}: a broker's dynamic configs (Kafka's
                   `kafka-configs --entity-type brokers --alter`), broker "" for the
                   cluster-wide default; the whole set, empty removes it (broker_configs.py)
    group_config   {group, configs: {name: value}}: a group's dynamic configs (Kafka's
                   `kafka-configs --entity-type groups --alter`); the whole set, empty
                   removes it (group_configs.py)

Order inside a batch: a topic record comes before its partitions' records. A snapshot is
the whole image as one batch of the same records (the cluster record, nodes, producer ids,
ACLs, client quotas, node states, SCRAM credentials, broker configs, group configs, then
each topic followed by its partitions), applied onto an empty image.

`from_document` reads the registry's former format (registry.json, version 1: one JSON
document rewritten whole) as image records, so an existing deployment keeps its topics.
"""

from __future__ import annotations

import json
from typing import Any

from seglog.storage.meta_properties import check_uuid

Record = dict[str, Any]

TOPIC = "topic"
PARTITION = "partition"
REMOVE_TOPIC = "remove_topic"
NODE = "node"
ACL = "acl"
PRODUCER_IDS = "producer_ids"
CLIENT_QUOTA = "client_quota"
NODE_STATE = "node_state"
CLUSTER = "cluster"
SCRAM_CREDENTIAL = "scram_credential"
BROKER_CONFIG = "broker_config"
GROUP_CONFIG = "group_config"

_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    TOPIC: {"name": str, "replication_factor": int, "configs": dict, "partitions": int},
    PARTITION: {
        "topic": str,
        "partition": int,
        "replicas": list,
        "leader": int,
        "leader_epoch": int,
        "isr": list,
        "partition_epoch": int,
    },
    REMOVE_TOPIC: {"name": str},
    NODE: {"node_id": int, "address": str},
    ACL: {"op": str, "acl": dict},
    PRODUCER_IDS: {"next": int},
    CLIENT_QUOTA: {"entity": dict, "values": dict},
    NODE_STATE: {"node_id": int},  # and "decommissioned", a bool (checked below)
    CLUSTER: {"cluster_id": str},
    SCRAM_CREDENTIAL: {"user": str, "mechanism": str},  # and "credential" (checked below)
    BROKER_CONFIG: {"broker": str, "configs": dict},
    GROUP_CONFIG: {"group": str, "configs": dict},
}
# Optional lists of replicas in a partition record (a reassignment in progress; the ELR).
_REASSIGNMENT_FIELDS = ("adding_replicas", "removing_replicas", "eligible_leader_replicas")
_LEGACY_VERSION = 1
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID: "no id", never a topic's


class MetadataRecordError(ValueError):
    """A record that is not one of the types above, or lacks a field: nothing of its batch
    is applied."""


def check_records(records: list[Record]) -> list[Record]:
    """Every record well formed (validated before anything is written or applied)."""
    if not isinstance(records, list):
        raise MetadataRecordError(f"a batch is a list of records, not {type(records)}")
    for record in records:
        fields = _FIELDS.get(record.get("type", "")) if isinstance(record, dict) else None
        if fields is None:
            raise MetadataRecordError(f"unknown metadata record {record!r}")
        for name, kind in fields.items():
            value = record.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise MetadataRecordError(f"metadata record {record!r}: bad {name!r}")
        if record["type"] == PARTITION and not (
            record["replicas"] and all(type(n) is int for n in record["replicas"] + record["isr"])
        ):
            raise MetadataRecordError(f"metadata record {record!r}: replicas are node ids")
        if record["type"] == PARTITION:
            _check_reassignment(record)
        if record["type"] == NODE and "min_insync_replicas" in record:
            value = record["min_insync_replicas"]
            if type(value) is not int or value < 1:
                raise MetadataRecordError(f"metadata record {record!r}: bad min_insync_replicas")
        if record["type"] == ACL and record["op"] not in ("add", "remove"):
            raise MetadataRecordError(f"metadata record {record!r}: op is add or remove")
        if record["type"] == NODE_STATE and type(record.get("decommissioned")) is not bool:
            raise MetadataRecordError(f"metadata record {record!r}: bad 'decommissioned'")
        if record["type"] == CLUSTER:
            _check_cluster(record)
        if record["type"] == TOPIC and "topic_id" in record:
            _check_topic_id(record)
        if record["type"] == SCRAM_CREDENTIAL:
            _check_scram_credential(record)
        if record["type"] == BROKER_CONFIG and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in record["configs"].items()
        ):
            raise MetadataRecordError(f"metadata record {record!r}: configs are strings")
    return records


def _check_topic_id(record: Record) -> None:
    topic_id = record["topic_id"]
    try:
        check_uuid(topic_id if isinstance(topic_id, str) else "", "topic_id")
    except ValueError as exc:
        raise MetadataRecordError(f"metadata record {record!r}: {exc}") from None
    if topic_id == ZERO_TOPIC_ID:
        raise MetadataRecordError(f"metadata record {record!r}: the zero topic id")


def _check_reassignment(record: Record) -> None:
    for name in _REASSIGNMENT_FIELDS:
        value = record.get(name, [])
        if not isinstance(value, list) or not all(type(n) is int for n in value):
            raise MetadataRecordError(f"metadata record {record!r}: bad {name!r}")
        if not set(value) <= set(record["replicas"]):
            raise MetadataRecordError(f"metadata record {record!r}: {name} not among replicas")
    throttle = record.get("throttle_bytes_per_s", 0)
    if type(throttle) is not int or throttle < 0:
        raise MetadataRecordError(f"metadata record {record!r}: bad 'throttle_bytes_per_s'")


def _check_cluster(record: Record) -> None:
    try:
        check_uuid(record["cluster_id"], "cluster_id")
    except ValueError as exc:
        raise MetadataRecordError(f"metadata record {record!r}: {exc}") from None
    adopted = record.get("adopted_from", {})
    if not (
        isinstance(adopted, dict)
        and isinstance(adopted.get("backend", ""), str)
        and type(adopted.get("offset", 0)) is int
    ):
        raise MetadataRecordError(f"metadata record {record!r}: bad 'adopted_from'")


def _check_scram_credential(record: Record) -> None:
    credential = record.get("credential", {})
    fields = {"salt": str, "stored_key": str, "server_key": str, "iterations": int}
    if not isinstance(credential, dict) or (
        credential and any(type(credential.get(k)) is not t for k, t in fields.items())
    ):
        raise MetadataRecordError(f"metadata record {record!r}: bad 'credential'")


def encode(records: list[Record]) -> bytes:
    return json.dumps(records, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes | str) -> list[Record]:
    try:
        records = json.loads(data)
    except ValueError as exc:
        raise MetadataRecordError(f"metadata records that are not JSON: {exc}") from None
    return check_records(records)


def topic_record(
    name: str,
    replication_factor: int,
    configs: dict[str, str],
    partitions: int,
    topic_id: str = "",
) -> Record:
    record: Record = {
        "type": TOPIC,
        "name": name,
        "replication_factor": replication_factor,
        "configs": dict(configs),
        "partitions": partitions,
    }
    if topic_id:
        record["topic_id"] = topic_id
    return record


def partition_record(topic: str, partition: int, registration: dict[str, Any]) -> Record:
    return {"type": PARTITION, "topic": topic, "partition": partition, **registration}


def remove_topic_record(name: str) -> Record:
    return {"type": REMOVE_TOPIC, "name": name}


def node_record(node_id: int, address: str, min_insync_replicas: int | None = None) -> Record:
    record: Record = {"type": NODE, "node_id": node_id, "address": address}
    if min_insync_replicas is not None:
        record["min_insync_replicas"] = min_insync_replicas
    return record


def acl_record(op: str, acl: dict[str, str]) -> Record:
    return {"type": ACL, "op": op, "acl": dict(acl)}


def client_quota_record(entity: dict[str, str], values: dict[str, float]) -> Record:
    return {"type": CLIENT_QUOTA, "entity": dict(entity), "values": dict(values)}


def cluster_record(cluster_id: str, adopted_from: dict[str, Any] | None = None) -> Record:
    record: Record = {"type": CLUSTER, "cluster_id": cluster_id}
    if adopted_from:
        record["adopted_from"] = dict(adopted_from)
    return record


def producer_ids_record(next_id: int) -> Record:
    return {"type": PRODUCER_IDS, "next": next_id}


def node_state_record(node_id: int, decommissioned: bool) -> Record:
    return {"type": NODE_STATE, "node_id": node_id, "decommissioned": decommissioned}


def scram_credential_record(user: str, mechanism: str, credential: dict[str, Any] | None) -> Record:
    record: Record = {"type": SCRAM_CREDENTIAL, "user": user, "mechanism": mechanism}
    if credential:
        record["credential"] = dict(credential)
    return record


def broker_config_record(broker: str, configs: dict[str, str]) -> Record:
    return {"type": BROKER_CONFIG, "broker": broker, "configs": dict(configs)}


def group_config_record(group: str, configs: dict[str, str]) -> Record:
    return {"type": GROUP_CONFIG, "group": group, "configs": dict(configs)}


def from_document(state: dict[str, Any]) -> list[Record]:
    """The records of a version 1 registry.json (`isr`, `partition_epoch`,
    `next_producer_id_block` and `acls` absent read as every replica, 0, 0 and none)."""
    if state.get("version") != _LEGACY_VERSION:
        raise MetadataRecordError(f"unknown registry version {state.get('version')!r}")
    records = [
        node_record(int(node_id), node["address"])
        for node_id, node in sorted(state.get("nodes", {}).items(), key=lambda n: int(n[0]))
    ]
    records.append(producer_ids_record(int(state.get("next_producer_id_block", 0))))
    records += [acl_record("add", acl) for acl in state.get("acls", [])]
    for name, topic in sorted(state.get("topics", {}).items()):
        partitions = topic["partitions"]
        records.append(
            topic_record(name, topic["replication_factor"], topic["configs"], len(partitions))
        )
        for i, p in enumerate(partitions):
            replicas = list(p["replicas"])
            records.append(
                partition_record(
                    name,
                    i,
                    {
                        "replicas": replicas,
                        "leader": p["leader"],
                        "leader_epoch": p.get("leader_epoch", 0),
                        "isr": list(p.get("isr") or replicas),
                        "partition_epoch": p.get("partition_epoch", 0),
                    },
                )
            )
    return check_records(records)
