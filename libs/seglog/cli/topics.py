"""`seglog topics create|list|describe|alter|delete` (and `reassign`: reassign.py), with
kafka-topics' everyday flags: `create --if-not-exists`, `delete --if-exists`, and describe's
`--under-replicated-partitions`, `--unavailable-partitions`, `--under-min-isr-partitions`,
`--at-min-isr-partitions`, which print only the partition lines that match any of them.

As kafka-topics, a topic may be named with `--topic` instead of the positional name; for
`list` and `describe`, `--topic` is a regular expression matched against whole names (commas
separate alternatives, as Kafka's IncludeList reads it) and `--exclude-internal` leaves
internal topics out."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from ..client.admin import Admin
from ..client.admin_reassignments import PartitionReassignment
from ..client.structs import TopicPartition
from ..errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from ..v1 import common_pb2, gateway_pb2
from . import reassign


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    _add_topic_name(create)
    create.add_argument("--partitions", type=int, default=-1, help="default: 1")
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas on distinct nodes (default: the gateway's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="topic config with Kafka's name, e.g. retention.ms=60000 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="do nothing when the topic exists already"
    )
    create.set_defaults(handler=_named(create_topic))

    listing = actions.add_parser("list", parents=[common], help="list topic names")
    listing.add_argument("--include-internal", action="store_true")
    _add_topic_patterns(listing)
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser("describe", parents=[common], help="partitions and offsets")
    describe.add_argument("names", nargs="*", help="default: every user topic")
    describe.add_argument(
        "--include-internal", action="store_true", help="with no names: internal topics too"
    )
    _add_topic_patterns(describe)
    # As kafka-topics: any of these prints only the partitions that match one of them.
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica set",
    )
    describe.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a leader, or whose leader is down",
    )
    describe.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than min.insync.replicas",
    )
    describe.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="only partitions whose ISR is exactly min.insync.replicas",
    )
    describe.set_defaults(handler=describe_topics)

    alter = actions.add_parser("alter", parents=[common], help="grow a topic's partitions")
    _add_topic_name(alter)
    alter.add_argument("--partitions", type=int, required=True, help="the new, larger count")
    alter.set_defaults(handler=_named(alter_topic))

    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    _add_topic_name(delete)
    delete.add_argument("--if-exists", action="store_true", help="do nothing when it is absent")
    delete.set_defaults(handler=_named(delete_topic))

    reassign.add_topics_parser(actions, common)


def _add_topic_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="the topic (or --topic NAME, as kafka-topics)")
    parser.add_argument("--topic", dest="topic_option", metavar="NAME", help="the topic")


def _named(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The handler, given the topic whether named positionally or with --topic."""

    def run(args: argparse.Namespace) -> int:
        if (args.name is None) == (args.topic_option is None):
            raise SystemExit("seglog: name the topic once: NAME or --topic NAME")
        if args.name is None:
            args.name = args.topic_option
        return handler(args)

    return run


def _add_topic_patterns(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topic",
        dest="topic_patterns",
        action="append",
        default=[],
        metavar="REGEX",
        help="topics whose whole name matches (repeatable; a,b means a or b), as kafka-topics",
    )
    parser.add_argument(
        "--exclude-internal", action="store_true", help="leave internal topics out (the default)"
    )


def topic_pattern(patterns: list[str]) -> re.Pattern[str] | None:
    """kafka-topics' --topic: a regular expression, commas read as alternatives and quotes
    dropped (Kafka's IncludeList), matched against the whole name."""
    if not patterns:
        return None
    alternatives = [p.strip().strip("'\"").replace(",", "|") for p in patterns]
    try:
        return re.compile("|".join(f"(?:{a})" for a in alternatives))
    except re.error as exc:
        raise SystemExit(f"seglog: --topic {patterns!r}: not a regular expression: {exc}") from None


def _selected_topics(admin: Admin, args: argparse.Namespace, *, must_match: bool) -> list[str]:
    """The topics a list or describe covers: the named ones; else, with --topic patterns,
    every topic whose name matches (internal ones too unless --exclude-internal, as
    kafka-topics); else every user topic (internal ones too with --include-internal)."""
    names: list[str] = list(getattr(args, "names", []) or [])
    if names:
        return names
    pattern = topic_pattern(args.topic_patterns)
    if pattern is None:
        return admin.list_topics(args.include_internal and not args.exclude_internal)
    names = [n for n in admin.list_topics(not args.exclude_internal) if pattern.fullmatch(n)]
    if must_match and not names:
        # kafka-topics --describe: "Topic 'X' does not exist as expected", exit 1
        raise UnknownTopicOrPartitionError(
            f"no topic matches --topic {','.join(args.topic_patterns)}"
        )
    return names


def parse_configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"seglog: --config {item!r}: expected NAME=VALUE")
        configs[name] = value
    return configs


def create_topic(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        try:
            admin.create_topic(
                args.name, args.partitions, args.replication_factor, parse_configs(args.config)
            )
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
            return 0  # as kafka-topics: silently
    print(f"Created topic {args.name}.")
    return 0


def list_topics(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        for name in _selected_topics(admin, args, must_match=False):
            print(name)
    return 0


def describe_topics(args: argparse.Namespace) -> int:
    status = 0
    with Admin(args.bootstrap) as admin:
        names = _selected_topics(admin, args, must_match=True)
        if not names:
            return 0  # describe_topics([]) would mean every topic, internal ones included
        moving = reassign.ongoing_moves(admin)
        only_matching = _partition_filter(args)
        for topic in admin.describe_topics(names):
            if topic.error:
                print(f"Topic: {topic.name}\tError: {topic.error_message}")
                status = 1
                continue
            if only_matching is not None:
                min_isr = _min_insync_replicas(admin, topic.name, args)
                shown = [p for p in topic.partitions if only_matching(p, min_isr)]
                for p in shown:
                    print(_partition_line(topic.name, p, moving))
                continue
            configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
            print(
                f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
                f"ReplicationFactor: {topic.replication_factor}\tConfigs: {configs}"
            )
            for p in topic.partitions:
                print(_partition_line(topic.name, p, moving))
    return status


PartitionFilter = Callable[[gateway_pb2.PartitionDescription, int], bool]


def _partition_filter(args: argparse.Namespace) -> PartitionFilter | None:
    """The partitions the describe flags ask for (any one of them matching), or None: all."""
    tests: list[PartitionFilter] = []
    if args.under_replicated_partitions:
        tests.append(lambda p, _: len(p.isr) < len(p.replicas))
    if args.unavailable_partitions:
        tests.append(lambda p, _: not _leader_live(p))
    if args.under_min_isr_partitions:
        tests.append(lambda p, min_isr: len(p.isr) < min_isr)
    if args.at_min_isr_partitions:
        tests.append(lambda p, min_isr: len(p.isr) == min_isr)
    if not tests:
        return None
    return lambda p, min_isr: any(test(p, min_isr) for test in tests)


def _leader_live(p: gateway_pb2.PartitionDescription) -> bool:
    if p.leader < 0:
        return False
    return any(r.node_id == p.leader and r.live for r in p.replica_states)


def _min_insync_replicas(admin: Admin, topic: str, args: argparse.Namespace) -> int:
    """The topic's effective min.insync.replicas (its own, its leader node's or Kafka's
    default), asked for only when a flag compares the ISR with it."""
    if not (args.under_min_isr_partitions or args.at_min_isr_partitions):
        return 0
    value, _source = admin.describe_configs(topic)["min.insync.replicas"]
    return int(value)


def _partition_line(
    topic: str,
    p: gateway_pb2.PartitionDescription,
    moving: dict[TopicPartition, PartitionReassignment],
) -> str:
    # Kafka's layout, then each replica's own log end offset and high watermark.
    replicas = " ".join(
        f"{r.node_id}:{r.log_end_offset}/{r.high_watermark}" + ("" if r.live else "(down)")
        for r in p.replica_states
    )
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader}\t"
        f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
        f"\tLeaderEpoch: {p.leader_epoch}\tHighWatermark: {p.high_watermark}\t"
        f"LogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\t"
        f"ReplicaLogEnd/HW: {replicas}"
    )
    if p.eligible_leader_replicas:  # as kafka-topics --describe shows KIP-966's ELR
        line += f"\tElr: {','.join(map(str, p.eligible_leader_replicas))}"
    move = moving.get(TopicPartition(topic, p.partition))
    if move is not None:  # as kafka-topics --describe shows a move under way
        line += (
            f"\tAdding Replicas: {','.join(map(str, move.adding))}"
            f"\tRemoving Replicas: {','.join(map(str, move.removing))}"
        )
    if p.error:
        line += f"\tError: {common_pb2.ErrorCode.Name(p.error)}"
    return line


def alter_topic(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        admin.create_partitions(args.name, args.partitions)
    print(
        f"Topic {args.name} now has {args.partitions} partitions; keyed records of new sends "
        f"map to the new count.",
    )
    return 0


def delete_topic(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        try:
            admin.delete_topic(args.name)
        except UnknownTopicOrPartitionError:
            if not args.if_exists:
                raise
            return 0
    print(f"Deleted topic {args.name}.")
    return 0
