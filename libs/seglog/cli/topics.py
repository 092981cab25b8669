"""`seglog topics create|list|describe|alter|delete` (and `reassign`: reassign.py)."""

from __future__ import annotations

import argparse

from ..client.admin import Admin
from ..client.structs import TopicPartition
from ..v1 import common_pb2
from . import reassign


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
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
    create.set_defaults(handler=create_topic)

    listing = actions.add_parser("list", parents=[common], help="list topic names")
    listing.add_argument("--include-internal", action="store_true")
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser("describe", parents=[common], help="partitions and offsets")
    describe.add_argument("names", nargs="*", help="default: every user topic")
    describe.add_argument(
        "--include-internal", action="store_true", help="with no names: internal topics too"
    )
    describe.set_defaults(handler=describe_topics)

    alter = actions.add_parser("alter", parents=[common], help="grow a topic's partitions")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, required=True, help="the new, larger count")
    alter.set_defaults(handler=alter_topic)

    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(handler=delete_topic)

    reassign.add_topics_parser(actions, common)


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
        admin.create_topic(
            args.name, args.partitions, args.replication_factor, parse_configs(args.config)
        )
    print(f"Created topic {args.name}.")
    return 0


def list_topics(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        for name in admin.list_topics(args.include_internal):
            print(name)
    return 0


def describe_topics(args: argparse.Namespace) -> int:
    status = 0
    with Admin(args.bootstrap) as admin:
        names = args.names or admin.list_topics(getattr(args, "include_internal", False))
        if not names:
            return 0  # describe_topics([]) would mean every topic, internal ones included
        moving = reassign.ongoing_moves(admin)
        for topic in admin.describe_topics(names):
            if topic.error:
                print(f"Topic: {topic.name}\tError: {topic.error_message}")
                status = 1
                continue
            configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
            print(
                f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
                f"ReplicationFactor: {topic.replication_factor}\tConfigs: {configs}"
            )
            for p in topic.partitions:
                # Kafka's layout, then each replica's own log end offset and high watermark.
                replicas = " ".join(
                    f"{r.node_id}:{r.log_end_offset}/{r.high_watermark}"
                    + ("" if r.live else "(down)")
                    for r in p.replica_states
                )
                line = (
                    f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                    f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                    f"\tLeaderEpoch: {p.leader_epoch}\tHighWatermark: {p.high_watermark}\t"
                    f"LogStartOffset: {p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\t"
                    f"ReplicaLogEnd/HW: {replicas}"
                )
                move = moving.get(TopicPartition(topic.name, p.partition))
                if move is not None:  # as kafka-topics --describe shows a move under way
                    line += (
                        f"\tAdding Replicas: {','.join(map(str, move.adding))}"
                        f"\tRemoving Replicas: {','.join(map(str, move.removing))}"
                    )
                if p.error:
                    line += f"\tError: {common_pb2.ErrorCode.Name(p.error)}"
                print(line)
    return status


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
        admin.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0
