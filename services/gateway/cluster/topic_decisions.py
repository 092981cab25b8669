"""The registry's decisions about topics (the registry's `topic_decisions`, registry.py):
CreateTopics' checks and placement, CreatePartitions, IncrementalAlterConfigs of a topic, and
DeleteTopics. The rules are topic_rules.py's and partition_changes.py's (`place`); this
module finds the nodes and registrations a decision touches and stores the records.

Its rules (placement, the min.insync.replicas warning, the ELR cleared when a topic's
min.insync.replicas changes) are listed with the controller's others in registry.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from seglog.errors import TopicAlreadyExistsError

from .metadata_image import Topic, new_topic_id
from .metadata_records import partition_record, remove_topic_record, topic_record
from .partition_changes import PartitionAssignment, PartitionChange, place
from .registry_routes import RegistryRoutes
from .registry_state import MIN_ISR_CONFIG, RegistryState, min_isr_setting, retrying
from .topic_rules import (
    TopicLimits,
    altered_configs,
    check_cluster_room,
    check_enough_nodes,
    check_growth,
    check_new_topic,
    refuse_internal,
)


class TopicDecisions:
    def __init__(self, state: RegistryState, routes: RegistryRoutes, limits: TopicLimits) -> None:
        self._state = state
        self._routes = routes
        self.limits = limits

    def _place(self, count: int, replication_factor: int) -> list[PartitionAssignment]:
        nodes = self._eligible_nodes()
        return place(
            count,
            replication_factor,
            nodes,
            self._state.leader_counts(),
            self._state.replica_counts(),
        )

    def _eligible_nodes(self) -> list[int]:
        """Where new replicas may go: eligible nodes not decommissioned."""
        return [
            n
            for n in self._state.live_nodes()
            if self._state._eligible(n) and n not in self._state.image.decommissioned
        ]

    def placeable_nodes(self) -> list[int]:
        with self._state._lock:
            return self._eligible_nodes()

    def _check_enough_nodes(self, replication_factor: int, topic: str | None = None) -> None:
        check_enough_nodes(
            replication_factor, self._eligible_nodes(), topic, self._state.image.decommissioned
        )

    def min_isr_shortfall(self, replication_factor: int, configs: Mapping[str, str]) -> str:
        """A warning when a topic of this replication factor and these configs can never
        take an acks=all write (its nodes refuse one while fewer than min.insync.replicas
        replicas are in sync); "" when it can."""
        configured = min_isr_setting(configs.get(MIN_ISR_CONFIG))
        with self._state._lock:
            min_isr = configured or self._state.image.min_isr_default
        if replication_factor >= min_isr:
            return ""
        source = "the topic's" if configured else "the nodes' default"
        return (
            f"replication factor {replication_factor} is below min.insync.replicas "
            f"{min_isr} ({source}): every acks=all write to it will be refused with "
            f"NOT_ENOUGH_REPLICAS; use a replication factor of at least {min_isr}, or set "
            f"min.insync.replicas={replication_factor} on the topic"
        )

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> tuple[int, int]:
        """Every check CreateTopics makes (topic_rules.py); returns (partitions, replication
        factor) with the defaults applied for -1."""
        num_partitions, replication_factor = check_new_topic(
            name, num_partitions, replication_factor, configs, self.limits, internal=internal
        )
        with self._state._lock:
            if name in self._state.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            check_cluster_room(num_partitions, self._state.image.partition_count(), self.limits)
            self._check_enough_nodes(replication_factor)
        return num_partitions, replication_factor

    @retrying
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> Topic:
        """Place the partitions (`_place`) and persist: one topic record and one record per
        partition."""
        with self._state._lock:
            num_partitions, replication_factor = self.validate_new_topic(
                name, num_partitions, replication_factor, configs, internal=internal
            )
            partitions = self._place(num_partitions, replication_factor)
            self._state._commit(
                [
                    topic_record(
                        name,
                        replication_factor,
                        configs,
                        num_partitions,
                        new_topic_id(self._state.image),
                    ),
                    *(partition_record(name, i, p.to_json()) for i, p in enumerate(partitions)),
                ]
            )
            return self._routes.topic(name)

    @retrying
    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        """Grow a topic to `count` partitions, the new ones placed as create_topic places
        them; INVALID_PARTITIONS for a count that does not grow it or passes a limit."""
        refuse_internal(name, "clients cannot change it")
        with self._state._lock:
            topic = self._routes.topic(name)
            current = len(topic.partitions)
            check_growth(name, current, count, self.limits)
            check_cluster_room(count - current, self._state.image.partition_count(), self.limits)
            self._check_enough_nodes(topic.replication_factor, name)
            if validate_only:
                return topic
            added = self._place(count - current, topic.replication_factor)
            self._state._commit(
                [
                    topic_record(
                        name, topic.replication_factor, topic.configs, count, topic.topic_id
                    ),
                    *(
                        partition_record(name, current + i, p.to_json())
                        for i, p in enumerate(added)
                    ),
                ]
            )
            return self._routes.topic(name)

    @retrying
    def alter_topic_configs(
        self,
        name: str,
        set_configs: dict[str, str],
        delete: list[str],
        *,
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> Topic:
        """Kafka's IncrementalAlterConfigs, the whole result validated before anything
        changes (topic_rules.altered_configs)."""
        refuse_internal(name, "its configs are the cluster's")
        with self._state._lock:
            topic = self._routes.topic(name)
            configs = altered_configs(
                name,
                topic.configs,
                set_configs,
                delete,
                append=append,
                subtract=subtract,
                tiered=self.limits.remote_log_storage_system_enable,
            )
            if validate_only:
                return topic
            records = [
                topic_record(
                    name, topic.replication_factor, configs, len(topic.partitions), topic.topic_id
                )
            ]
            changed: set[PartitionChange] = set()
            if configs.get(MIN_ISR_CONFIG) != topic.configs.get(MIN_ISR_CONFIG):
                # An ELR member held every record committed under the former min ISR; a
                # lower one lets the high watermark pass it. Kafka clears the ELR too.
                with_elr = [(name, i) for i, p in enumerate(topic.partitions) if p.elr]
                working = self._state._working(with_elr)
                for p in working.values():
                    p.elr = []
                    p.partition_epoch += 1
                changed = set(working)
                records += self._state._partition_records(working, changed)
            self._state._commit(records)
        self._state._notify(changed)
        return self._routes.topic(name)

    @retrying
    def delete_topic(self, name: str) -> Topic:
        refuse_internal(name, "clients cannot delete it")
        with self._state._lock:
            topic = self._routes.topic(name)
            self._state._commit([remove_topic_record(name)])
            return topic
