"""The registry's metadata image (Kafka's MetadataImage): topics with their ids (KIP-516:
`topic_name_of`, `topic_id_of`) and each partition's registration, node addresses and
states, ACLs and the producer-id block, built only by applying the metadata log's records
(metadata_records.py) in offset order: a gateway's own writes and the ones it watches from
other gateways alike.

Applying keeps indexes so the controller never walks every partition to find the few it
must decide on: the partitions hosted on each node, those led by each node, those with no
leader, those not led by their preferred replica, and those being reassigned. Each applied
partition lands in the history (metadata_history.py) that heartbeat answers are cut from.

Routing reads `topics` without a lock, so a registration is never edited in place: applying
a record swaps in a new PartitionAssignment object, and a new topic enters `topics` only with
all its partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seglog.security.acls import AclBinding
from seglog.storage.meta_properties import random_uuid

from .metadata_history import MetadataHistory
from .metadata_records import (
    ACL,
    BROKER_CONFIG,
    CLIENT_QUOTA,
    CLUSTER,
    GROUP_CONFIG,
    NODE,
    NODE_STATE,
    PARTITION,
    PRODUCER_IDS,
    REMOVE_TOPIC,
    SCRAM_CREDENTIAL,
    TOPIC,
    MetadataRecordError,
    Record,
    acl_record,
    broker_config_record,
    client_quota_record,
    cluster_record,
    group_config_record,
    node_record,
    node_state_record,
    partition_record,
    producer_ids_record,
    scram_credential_record,
    topic_record,
)
from .partition_changes import NO_LEADER, PartitionAssignment, PartitionChange
from .scram_credentials import ScramCredential
from .topic_rules import is_internal_topic


@dataclass
class Topic:
    name: str
    replication_factor: int
    configs: dict[str, str]
    partitions: list[PartitionAssignment]
    topic_id: str = ""  # KIP-516 ("" only until a registry from before ids gives one)

    @property
    def internal(self) -> bool:
        return is_internal_topic(self.name)


QuotaEntityKey = tuple[tuple[str, str], ...]


def new_topic_id(image: MetadataImage) -> str:
    """A topic id no topic of the image has (Kafka's Uuid.randomUuid: 122 random bits, so
    a clash is never expected, but one would merge two topics' names)."""
    while True:
        topic_id = random_uuid()
        if topic_id not in image.topic_names:
            return topic_id


@dataclass
class Applied:
    """What one batch changed."""

    partitions: set[PartitionChange] = field(default_factory=set)  # registrations changed
    # Topics whose configs changed (or that were given an id): their nodes get the states.
    configs: set[str] = field(default_factory=set)
    nodes: set[int] = field(default_factory=set)  # node records applied
    acls: bool = False
    node_states: set[int] = field(default_factory=set)  # decommissioned or recommissioned
    created: bool = False  # a topic or partitions added: long-lived objects to settle


class MetadataImage:
    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # of the last batch applied
        self.topics: dict[str, Topic] = {}
        self.topic_names: dict[str, str] = {}  # topic id -> name (topic_name_of)
        self.node_addresses: dict[int, str] = {}
        self.node_min_isr: dict[int, int] = {}  # each node's min.insync.replicas default
        self.min_isr_default = 1  # the largest of them (Kafka's 1 when none is set)
        self.acls: list[AclBinding] = []
        # The offset of the latest ACL change that may narrow access (an ACL deleted, a Deny
        # added): clients' grants given under older ACLs are refused by nodes from then on.
        self.acls_narrowed_offset = 0
        # entity (sorted (entity type, name) pairs) -> quota key -> bytes/s
        self.client_quotas: dict[QuotaEntityKey, dict[str, float]] = {}
        self.next_producer_id_block = 0
        # user -> SCRAM mechanism -> its credential (scram_credential records)
        self.scram_credentials: dict[str, dict[str, ScramCredential]] = {}
        # broker id ("" the cluster's default) -> its dynamic configs (broker_config records)
        self.broker_configs: dict[str, dict[str, str]] = {}
        # group id -> its dynamic configs (group_config records)
        self.group_configs: dict[str, dict[str, str]] = {}
        # Nodes an operator decommissioned (node_state records): no new replicas, and
        # leaders only where no other in-sync replica can lead.
        self.decommissioned: set[int] = set()
        # The cluster's id ("" until the registry is bootstrapped), and the backend and
        # offset this registry was copied from, if it was (registry_bootstrap.py).
        self.cluster_id = ""
        self.adopted_from: dict[str, Any] = {}
        self.hosted: dict[int, set[PartitionChange]] = {}
        self.led: dict[int, set[PartitionChange]] = {}
        self.leaderless: set[PartitionChange] = set()
        # Led by another than its preferred (first) replica: preferred-leader election's work.
        self.misled: set[PartitionChange] = set()
        # Being reassigned (adding or removing replicas): the controller's tick completes them.
        self.reassigning: set[PartitionChange] = set()
        self.history = MetadataHistory(offset)
        # Per batch: each changed partition's replicas before it, each growing topic's count.
        self._before: dict[PartitionChange, tuple[int, ...]] = {}
        self._growing: dict[str, int] = {}

    @classmethod
    def from_batches(cls, batches: list[tuple[int, list[Record]]]) -> MetadataImage:
        """A snapshot's batch then the log's tail, replayed; the history starts after them."""
        image = cls()
        for offset, records in batches:
            image.apply(offset, records, remember=False)
        image.history = MetadataHistory(image.offset)
        return image

    def apply(self, offset: int, records: list[Record], *, remember: bool = True) -> Applied:
        if offset <= self.offset:
            raise MetadataRecordError(f"batch at offset {offset} after offset {self.offset}")
        applied = Applied()
        new_topics: dict[str, Topic] = {}
        for record in records:
            kind = record["type"]
            if kind == TOPIC:
                self._apply_topic(record, new_topics, applied)
            elif kind == PARTITION:
                self._apply_partition(record, new_topics, applied)
            elif kind == REMOVE_TOPIC:
                self._remove_topic(record["name"], new_topics, applied)
            elif kind == NODE:
                self.node_addresses[record["node_id"]] = record["address"]
                if "min_insync_replicas" in record:
                    self.node_min_isr[record["node_id"]] = record["min_insync_replicas"]
                else:
                    self.node_min_isr.pop(record["node_id"], None)
                self.min_isr_default = max(self.node_min_isr.values(), default=1)
                applied.nodes.add(record["node_id"])
            elif kind == ACL:
                if self._apply_acl(record):
                    self.acls_narrowed_offset = offset
                applied.acls = True
            elif kind == PRODUCER_IDS:
                self.next_producer_id_block = record["next"]
            elif kind == CLUSTER:
                if self.cluster_id and record["cluster_id"] != self.cluster_id:
                    raise MetadataRecordError(
                        f"the cluster id is {self.cluster_id}: it never changes "
                        f"(a record says {record['cluster_id']})"
                    )
                self.cluster_id = record["cluster_id"]
                self.adopted_from = dict(record.get("adopted_from", {}))
            elif kind == CLIENT_QUOTA:
                entity = tuple(sorted(record["entity"].items()))
                if record["values"]:
                    self.client_quotas[entity] = dict(record["values"])
                else:
                    self.client_quotas.pop(entity, None)
            elif kind == SCRAM_CREDENTIAL:
                self._apply_scram_credential(record)
            elif kind == BROKER_CONFIG:
                # Swapped whole: routing and nodes' throttles read it without a lock.
                configs = dict(self.broker_configs)
                if record["configs"]:
                    configs[record["broker"]] = dict(record["configs"])
                else:
                    configs.pop(record["broker"], None)
                self.broker_configs = configs
            elif kind == GROUP_CONFIG:
                # Swapped whole, as broker configs: heartbeats read it without a lock.
                groups = dict(self.group_configs)
                if record["configs"]:
                    groups[record["group"]] = dict(record["configs"])
                else:
                    groups.pop(record["group"], None)
                self.group_configs = groups
            elif kind == NODE_STATE:
                if record["decommissioned"]:
                    self.decommissioned.add(record["node_id"])
                else:
                    self.decommissioned.discard(record["node_id"])
                applied.node_states.add(record["node_id"])
        for name, topic in new_topics.items():
            if any(p is None for p in topic.partitions):
                raise MetadataRecordError(f"topic {name} created without all its partitions")
            self.topics[name] = topic  # whole, for routing
            if topic.topic_id:
                self.topic_names[topic.topic_id] = name
        for name, count in self._growing.items():
            grown = self.topics.get(name)
            if grown is not None and len(grown.partitions) != count:
                raise MetadataRecordError(f"topic {name} grown without all its partitions")
        applied.created = bool(new_topics or self._growing)
        self._growing.clear()
        self.offset = offset
        if remember:
            self._remember(offset, applied)
        self._before.clear()
        return applied

    def _topic(self, name: str, new_topics: dict[str, Topic]) -> Topic | None:
        return new_topics.get(name) or self.topics.get(name)

    def _apply_topic(self, record: Record, new_topics: dict[str, Topic], applied: Applied) -> None:
        name, count = record["name"], record["partitions"]
        topic = self._topic(name, new_topics)
        topic_id = record.get("topic_id", "")
        if topic is None:
            if topic_id in self.topic_names:
                raise MetadataRecordError(f"topic {name}: id {topic_id} is another topic's")
            placeholder: list[PartitionAssignment] = [None] * count  # type: ignore[list-item]
            configs = dict(record["configs"])
            new_topics[name] = Topic(
                name, record["replication_factor"], configs, placeholder, topic_id
            )
            return
        if topic_id and topic_id != topic.topic_id:
            if topic.topic_id or topic_id in self.topic_names:
                raise MetadataRecordError(
                    f"topic {name} has id {topic.topic_id or 'none'}: it never changes "
                    f"(a record says {topic_id})"
                )
            topic.topic_id = topic_id  # a topic from before ids given its id, once
            applied.configs.add(name)  # its nodes are told, as of a config change
            if name in self.topics:
                self.topic_names[topic_id] = name
        if count < len(topic.partitions):
            raise MetadataRecordError(f"topic {name} cannot shrink to {count} partitions")
        if topic.configs != record["configs"]:
            topic.configs = dict(record["configs"])
            applied.configs.add(name)
        topic.replication_factor = record["replication_factor"]
        self._growing[name] = count

    def _apply_partition(
        self, record: Record, new_topics: dict[str, Topic], applied: Applied
    ) -> None:
        name, i = record["topic"], record["partition"]
        topic = self._topic(name, new_topics)
        if topic is None:
            raise MetadataRecordError(f"partition record of unknown topic {name}")
        p = PartitionAssignment(
            list(record["replicas"]),
            record["leader"],
            record["leader_epoch"],
            list(record["isr"]),
            record["partition_epoch"],
            list(record.get("adding_replicas", [])),
            list(record.get("removing_replicas", [])),
            record.get("throttle_bytes_per_s", 0),
            list(record.get("eligible_leader_replicas", [])),
        )
        tp = (name, i)
        if i < 0:
            raise MetadataRecordError(f"partition record {name}-{i}")
        if i < len(topic.partitions):
            old = topic.partitions[i]
        elif i == len(topic.partitions) and i < self._growing.get(name, 0):
            old = None
        else:
            raise MetadataRecordError(f"partition record {name}-{i} beyond its topic's count")
        if old is not None:
            self._unindex(tp, old)
        self._index(tp, p)
        if i < len(topic.partitions):
            topic.partitions[i] = p
        else:
            topic.partitions.append(p)  # a growth: the count rises only with the partition
        applied.partitions.add(tp)
        self._before.setdefault(tp, tuple(old.replicas) if old is not None else ())

    def _remove_topic(self, name: str, new_topics: dict[str, Topic], applied: Applied) -> None:
        topic = new_topics.pop(name, None) or self.topics.pop(name, None)
        if topic is None:
            raise MetadataRecordError(f"removal of unknown topic {name}")
        self.topic_names.pop(topic.topic_id, None)
        for i, p in enumerate(topic.partitions):
            if p is not None:
                tp = (name, i)
                self._unindex(tp, p)
                self._before.setdefault(tp, tuple(p.replicas))
                applied.partitions.add(tp)

    def _apply_acl(self, record: Record) -> bool:
        """Whether the change may narrow what someone may do: an ACL deleted, a Deny added."""
        acl = AclBinding(**record["acl"])
        if record["op"] == "add":
            if acl not in self.acls:
                self.acls = sorted([*self.acls, acl], key=lambda a: tuple(a.to_json().values()))
            return acl.permission == "deny"
        self.acls = [a for a in self.acls if a != acl]
        return True

    def _remember(self, offset: int, applied: Applied) -> None:
        for tp in sorted(applied.partitions):
            p = self.partition(tp)
            after = tuple(p.replicas) if p is not None else ()
            self.history.add(offset, tp[0], tp[1], self._before.get(tp, ()), after)
        for name in sorted(applied.configs):
            topic = self.topics.get(name)
            for i, p in enumerate(topic.partitions if topic else []):
                if (name, i) not in applied.partitions:
                    replicas = tuple(p.replicas)
                    self.history.add(offset, name, i, replicas, replicas)

    def _index(self, tp: PartitionChange, p: PartitionAssignment) -> None:
        for replica in p.replicas:
            self.hosted.setdefault(replica, set()).add(tp)
        if p.leader == NO_LEADER:
            self.leaderless.add(tp)
        else:
            self.led.setdefault(p.leader, set()).add(tp)
        if p.leader != p.replicas[0]:
            self.misled.add(tp)
        if p.reassigning:
            self.reassigning.add(tp)

    def _unindex(self, tp: PartitionChange, p: PartitionAssignment) -> None:
        for replica in p.replicas:
            self.hosted.get(replica, set()).discard(tp)
        self.leaderless.discard(tp)
        self.misled.discard(tp)
        self.reassigning.discard(tp)
        self.led.get(p.leader, set()).discard(tp)

    def _apply_scram_credential(self, record: Record) -> None:
        # Swapped whole, never edited in place: SASL exchanges read it without a lock.
        user, mechanism = record["user"], record["mechanism"]
        by_mechanism = dict(self.scram_credentials.get(user, {}))
        if "credential" in record:
            by_mechanism[mechanism] = ScramCredential.from_json(record["credential"])
        else:
            by_mechanism.pop(mechanism, None)
        credentials = dict(self.scram_credentials)
        if by_mechanism:
            credentials[user] = by_mechanism
        else:
            credentials.pop(user, None)
        self.scram_credentials = credentials

    # -- reading -------------------------------------------------------------------------

    def partition(self, tp: PartitionChange) -> PartitionAssignment | None:
        topic = self.topics.get(tp[0])
        if topic is None or not 0 <= tp[1] < len(topic.partitions):
            return None
        return topic.partitions[tp[1]]

    def topic_id_of(self, name: str) -> str:
        """The topic's id ("" when no such topic)."""
        topic = self.topics.get(name)
        return topic.topic_id if topic is not None else ""

    def topic_name_of(self, topic_id: str) -> str:
        """The name of the topic with that id ("" when none has it: deleted, or never)."""
        return self.topic_names.get(topic_id, "")

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def records(self) -> list[Record]:
        """The whole image as one batch (a snapshot), in the order metadata_records.py
        documents."""
        records = [cluster_record(self.cluster_id, self.adopted_from)] if self.cluster_id else []
        records += [
            node_record(n, address, self.node_min_isr.get(n))
            for n, address in sorted(self.node_addresses.items())
        ]
        records.append(producer_ids_record(self.next_producer_id_block))
        records += [acl_record("add", acl.to_json()) for acl in self.acls]
        records += [
            client_quota_record(dict(entity), values)
            for entity, values in sorted(self.client_quotas.items())
        ]
        records += [node_state_record(n, True) for n in sorted(self.decommissioned)]
        records += [
            scram_credential_record(user, mechanism, credential.to_json())
            for user, by_mechanism in sorted(self.scram_credentials.items())
            for mechanism, credential in sorted(by_mechanism.items())
        ]
        records += [
            broker_config_record(broker, configs)
            for broker, configs in sorted(self.broker_configs.items())
        ]
        records += [
            group_config_record(group, configs)
            for group, configs in sorted(self.group_configs.items())
        ]
        for name in sorted(self.topics):
            topic = self.topics[name]
            records.append(
                topic_record(
                    name,
                    topic.replication_factor,
                    topic.configs,
                    len(topic.partitions),
                    topic.topic_id,
                )
            )
            records += [
                partition_record(name, i, p.to_json()) for i, p in enumerate(topic.partitions)
            ]
        return records
