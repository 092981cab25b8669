"""`seglog topics reassign` (kafka-reassign-partitions' options and JSON), `seglog
elect-leaders` (kafka-leader-election), `seglog log-dirs` (kafka-log-dirs --describe) and
`seglog nodes list|decommission|recommission|balance`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..client.admin import Admin
from ..client.admin_reassignments import PREFERRED, UNCLEAN, PartitionReassignment
from ..client.reassignment_plans import (
    Plan,
    balance,
    decommission,
    generate,
    parse_plan,
    parse_topics_to_move,
    plan_json,
)
from ..client.structs import TopicPartition
from ..errors import InvalidReplicaAssignmentError, PermissionDeniedError, RequestTimedOutError

WAIT_POLL_S = 0.5


def add_topics_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    reassign = actions.add_parser(
        "reassign",
        parents=[common],
        help="move partitions to other nodes (kafka-reassign-partitions)",
    )
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--execute", action="store_true", help="start the plan's moves")
    mode.add_argument("--verify", action="store_true", help="report each move: done or not")
    mode.add_argument("--cancel", action="store_true", help="cancel the plan's moves")
    mode.add_argument("--generate", action="store_true", help="propose a plan (prints it)")
    reassign.add_argument("--reassignment-json-file", type=Path, help="the plan")
    reassign.add_argument("--topics-to-move-json-file", type=Path, help="with --generate")
    reassign.add_argument("--broker-list", help="with --generate: node ids, e.g. 2,3,4")
    reassign.add_argument(
        "--throttle",
        type=int,
        default=0,
        help="with --execute: bytes/s the new replicas' catch-up may take (0: none)",
    )
    reassign.set_defaults(handler=topics_reassign)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    elect = sub.add_parser(
        "elect-leaders", parents=[common], help="elect leaders (kafka-leader-election)"
    )
    elect.add_argument("--election-type", choices=[PREFERRED, UNCLEAN], required=True)
    elect.add_argument("--topic")
    elect.add_argument("--partition", type=int)
    elect.add_argument("--all-topic-partitions", action="store_true")
    elect.set_defaults(handler=elect_leaders)

    log_dirs = sub.add_parser(
        "log-dirs", parents=[common], help="partition sizes per node (kafka-log-dirs --describe)"
    )
    log_dirs.add_argument("--describe", action="store_true", help="(the only action)")
    log_dirs.add_argument("--broker-list", help="node ids, e.g. 1,2 (default: every node)")
    log_dirs.add_argument("--topic-list", help="only these topics, e.g. a,b")
    log_dirs.set_defaults(handler=describe_log_dirs)

    nodes = sub.add_parser("nodes", help="list nodes; move partitions off a node or onto new ones")
    actions = nodes.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list", parents=[common], help="every registered node: live, state, leaders, replicas"
    )
    listing.set_defaults(handler=list_nodes)
    off = actions.add_parser(
        "decommission",
        parents=[common],
        help="mark a node decommissioned (no new replicas or leaders), move every replica "
        "off it, then wait",
    )
    off.add_argument("--node", type=int, required=True)
    back = actions.add_parser(
        "recommission", parents=[common], help="undo decommission: the node takes replicas again"
    )
    back.add_argument("--node", type=int, required=True)
    back.set_defaults(handler=recommission_node)
    balanced = actions.add_parser(
        "balance", parents=[common], help="even replicas and leaders per node (within one)"
    )
    balanced.add_argument("--max-moves", type=int, default=0, help="replica moves (0: all)")
    for action in (off, balanced):
        action.add_argument("--throttle", type=int, default=0, help="bytes/s for the copies")
        action.add_argument("--timeout-s", type=float, default=600.0, help="wait this long")
        action.add_argument("--dry-run", action="store_true", help="print the plan only")
    off.set_defaults(handler=decommission_node)
    balanced.set_defaults(handler=balance_nodes)


# -- reading the cluster -------------------------------------------------------------------


def current_assignment(admin: Admin, topics: list[str] | None = None) -> Plan:
    """Every partition's replicas (of `topics`, or every user topic)."""
    names = topics if topics is not None else admin.list_topics()
    current: Plan = {}
    for topic in admin.describe_topics(names) if names else []:
        if topic.error:
            raise InvalidReplicaAssignmentError(f"topic {topic.name}: {topic.error_message}")
        for p in topic.partitions:
            current[TopicPartition(topic.name, p.partition)] = list(p.replicas)
    return current


def ongoing_moves(admin: Admin) -> dict[TopicPartition, PartitionReassignment]:
    """The moves under way, or none when the caller may not list them (Describe on the
    cluster): `topics describe` shows them when it can."""
    try:
        return admin.list_partition_reassignments()
    except PermissionDeniedError:
        return {}


def _node_list(text: str) -> list[int]:
    try:
        return [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise SystemExit(f"seglog: node list {text!r}: expected ids like 1,2,3") from None


def _names(tps: list[TopicPartition]) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


def _read(path: Path | None, option: str) -> str:
    if path is None:
        raise SystemExit(f"seglog: {option} is required here")
    return path.read_text()


# -- topics reassign -----------------------------------------------------------------------


def topics_reassign(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        if args.generate:
            return _generate(admin, args)
        plan = parse_plan(_read(args.reassignment_json_file, "--reassignment-json-file"))
        if args.execute:
            _execute(admin, plan, args.throttle)
            return 0
        if args.cancel:
            ongoing = admin.list_partition_reassignments(plan)
            admin.alter_partition_reassignments(dict.fromkeys(ongoing))
            print(f"Successfully cancelled partition reassignments for: {_names(list(ongoing))}")
            return 0
        return 0 if _verify(admin, plan) else 1


def _generate(admin: Admin, args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(
        _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
    )
    if not args.broker_list:
        raise SystemExit("seglog: --generate needs --broker-list")
    current = current_assignment(admin, topics)
    nodes = _node_list(args.broker_list)
    decommissioned = sorted(
        n.node_id for n in admin.describe_cluster().nodes if n.decommissioned and n.node_id in nodes
    )
    if decommissioned:
        raise InvalidReplicaAssignmentError(
            f"--broker-list names decommissioned node(s) {decommissioned}: they take no new "
            "replica (seglog nodes recommission --node N first)"
        )
    proposed = generate(current, nodes)
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def _execute(admin: Admin, plan: Plan, throttle_bytes_per_s: int) -> None:
    current = current_assignment(admin, sorted({tp.topic for tp in plan}))
    print("Current partition replica assignment")
    print()
    print(plan_json({tp: current[tp] for tp in plan if tp in current}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    admin.alter_partition_reassignments(plan, throttle_bytes_per_s=throttle_bytes_per_s)
    if throttle_bytes_per_s:
        print(f"The new replicas' catch-up is throttled to {throttle_bytes_per_s} B/s.")
    print(f"Successfully started partition reassignments for {_names(list(plan))}")


def _verify(admin: Admin, plan: Plan) -> bool:
    """Each move's state, as kafka-reassign-partitions --verify prints it; True when all are
    complete."""
    ongoing = admin.list_partition_reassignments(plan)
    current = current_assignment(admin, sorted({tp.topic for tp in plan}))
    print("Status of partition reassignment:")
    done = True
    for tp, target in sorted(plan.items()):
        name = f"{tp.topic}-{tp.partition}"
        if tp in ongoing:
            done = False
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            done = False
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{current.get(tp)} rather than {target}."
            )
    if done:
        # The throttle belongs to the moves: it ended with the last of them.
        print("Throttle removed: no reassignment of these partitions is in progress.")
    return done


def wait_done(admin: Admin, plan: Plan, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        ongoing = admin.list_partition_reassignments(plan)
        if not ongoing:
            return
        if time.monotonic() > deadline:
            raise RequestTimedOutError(
                f"after {timeout_s:.0f} s still moving {_names(list(ongoing))}"
            )
        time.sleep(WAIT_POLL_S)


# -- elect-leaders, log-dirs ---------------------------------------------------------------


def elect_leaders(args: argparse.Namespace) -> int:
    if args.all_topic_partitions == bool(args.topic):
        raise SystemExit("seglog: give --topic [--partition] or --all-topic-partitions")
    with Admin(args.bootstrap) as admin:
        partitions: list[TopicPartition] = []
        if args.topic:
            if args.partition is not None:
                partitions = [TopicPartition(args.topic, args.partition)]
            else:
                partitions = sorted(current_assignment(admin, [args.topic]))
        results = admin.elect_leaders(args.election_type, partitions)
    status = 0
    elected = [tp for tp, r in results.items() if r.error is None]
    if elected:
        print(
            f"Successfully completed leader election ({args.election_type}) for partitions "
            f"{_names(elected)}"
        )
    for tp, result in sorted(results.items()):
        if result.error is None:
            continue
        if result.error.reason != "ELECTION_NOT_NEEDED":
            status = 1
        print(f"Election for {tp.topic}-{tp.partition}: {result.error.reason}: {result.error}")
    if not results:
        print("Valid replica already elected for all partitions.")
    return status


def describe_log_dirs(args: argparse.Namespace) -> int:
    topics = set(args.topic_list.split(",")) if args.topic_list else None
    with Admin(args.bootstrap) as admin:
        described = admin.describe_log_dirs(_node_list(args.broker_list or ""))
    brokers = []
    for node_id, logs in sorted(described.items()):
        if isinstance(logs, Exception):
            brokers.append({"broker": node_id, "error": f"{logs.reason}: {logs}", "logDirs": []})
            continue
        partitions = [
            {
                "partition": f"{tp.topic}-{tp.partition}",
                "size": log.size_bytes,
                "logStartOffset": log.log_start_offset,
                "logEndOffset": log.log_end_offset,
                "isFuture": False,
            }
            for tp, log in sorted(logs.items())
            if topics is None or tp.topic in topics
        ]
        brokers.append({"broker": node_id, "logDirs": [{"error": None, "partitions": partitions}]})
    print(json.dumps({"version": 1, "brokers": brokers}))
    return 0


# -- nodes decommission / balance ----------------------------------------------------------


def _nodes(admin: Admin) -> tuple[list[int], list[int]]:
    """Every registered node, and the live ones new replicas may go to (not
    decommissioned)."""
    described = admin.describe_cluster().nodes
    return (
        sorted(n.node_id for n in described),
        sorted(n.node_id for n in described if n.live and not n.decommissioned),
    )


def list_nodes(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        described = admin.describe_cluster().nodes
    rows = [("NODE", "ADDRESS", "LIVE", "STATE", "LEADERS", "REPLICAS")]
    for n in sorted(described, key=lambda n: n.node_id):
        state = "decommissioned" if n.decommissioned else "active"
        rows.append(
            (
                str(n.node_id),
                n.address,
                "yes" if n.live else "no",
                state,
                str(n.leader_partitions),
                str(n.replica_partitions),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def recommission_node(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        admin.recommission_node(args.node)
    print(f"Node {args.node} is recommissioned: it may take new replicas and lead again.")
    return 0


def _run_plan(admin: Admin, plan: Plan, args: argparse.Namespace, what: str) -> None:
    current = current_assignment(admin, sorted({tp.topic for tp in plan}))
    if not plan:
        print(f"{what}: nothing to move.")
        return
    print(f"{what}: {len(plan)} partition(s) to move:")
    for tp, target in sorted(plan.items()):
        print(f"  {tp.topic}-{tp.partition}: {current.get(tp)} -> {target}")
    if args.dry_run:
        print(plan_json(plan))
        return
    admin.alter_partition_reassignments(plan, throttle_bytes_per_s=args.throttle)
    wait_done(admin, plan, args.timeout_s)
    print(f"{what}: every move is complete.")


def decommission_node(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        known, live = _nodes(admin)
        if args.node not in known:
            raise InvalidReplicaAssignmentError(f"node {args.node} is not registered ({known})")
        others = [n for n in live if n != args.node]
        # A plan that cannot be made (a partition with a replica on every other node) is
        # refused before the node is marked.
        decommission(
            current_assignment(admin, admin.list_topics(include_internal=True)), args.node, others
        )
        if not args.dry_run:
            # Then durably: no topic created meanwhile, or afterwards, lands on it.
            moved = admin.decommission_node(args.node)
            print(
                f"Node {args.node} is decommissioned: no new replicas or leaderships "
                f"({moved} leaderships handed over); `seglog nodes recommission --node "
                f"{args.node}` undoes it."
            )
        current = current_assignment(admin, admin.list_topics(include_internal=True))
        plan = decommission(current, args.node, others)
        _run_plan(admin, plan, args, f"Decommissioning node {args.node}")
        if not args.dry_run:
            everything = current_assignment(admin, admin.list_topics(include_internal=True))
            left = [tp for tp, r in everything.items() if args.node in r]
            if left:
                print(f"Node {args.node} still holds {_names(left)}", file=sys.stderr)
                return 1
            print(f"Node {args.node} holds no replica: it may be stopped.")
    return 0


def balance_nodes(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap) as admin:
        _, live = _nodes(admin)
        current = current_assignment(admin, admin.list_topics(include_internal=True))
        plan = balance(current, live, args.max_moves)
        _run_plan(admin, plan, args, f"Balancing over nodes {live}")
        if not args.dry_run:
            # Leadership follows the preferred replicas (also when only the leaders drifted).
            elected = admin.elect_leaders(PREFERRED)
            done = [tp for tp, r in elected.items() if r.error is None]
            print(f"Preferred leaders elected for {len(done)} partition(s).")
    return 0
