"""The campaign's share-group client: one member of a share group speaking Kafka's share
protocol on the wire (ShareGroupHeartbeat, ShareFetch), accepting every record it gets on
its next fetch, each delivery and acknowledgement written to its history
(tests/faults/history.py; share_checker.py reads it):

    python -m tests.faults.share_workload --bootstrap ADDR --topic-id ID --group G \
        --history-dir DIR --name share-0 [--max-records 20] [--hold-ms 0]

It runs until SIGTERM (then leaves the group, releasing what it holds); SIGKILL leaves its
records locked until the member's session or the records' locks lapse, which the checker's
"delivered until acknowledged" then proves released. A lost connection (a gateway killed)
makes its acknowledgements in flight unknown (`info`) and starts a new share session.
`--hold-ms` is how long it works on what it got before acknowledging it (the records stay
locked to it meanwhile: a kill then leaves them for the others once the locks lapse).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from services.gateway.kafka.share_messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from tests.faults.history import HistoryWriter
from tests.faults.workload import StopFlag, describe
from tests.kafka_wire import KafkaWire

ACCEPT = 1
FINAL_EPOCH = -1
HEARTBEAT_INTERVAL_S = 1.0
RECONNECT_BACKOFF_S = 0.2
IDLE_WAIT_MS = 200
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask again.
COORDINATOR_MOVED = (14, 15, 16)


class ShareMember:
    def __init__(self, args: argparse.Namespace, history: HistoryWriter) -> None:
        self.args = args
        self.history = history
        self.member_id = uuid.uuid4().hex[:22]
        self.topic_id = to_wire(args.topic_id)
        self.member_epoch = 0
        self.session_epoch = 0
        self.assigned: list[int] = []
        self.to_ack: dict[int, list[tuple[int, int]]] = {}  # partition -> ranges
        self.wire: KafkaWire | None = None
        # Heartbeats go to the group's coordinator, found as a client finds it (other
        # gateways answer NOT_COORDINATOR); fetches go to the bootstrap gateway.
        self.coordinator: KafkaWire | None = None
        self.beat_at = 0.0

    def connect(self) -> KafkaWire:
        if self.wire is None:
            self.wire = KafkaWire(self.args.bootstrap, client_id=self.args.name)
            self.session_epoch = 0
        return self.wire

    def drop_connection(self) -> None:
        if self.wire is not None:
            self.wire.close()
        self.wire = None
        self.drop_coordinator()

    def drop_coordinator(self) -> None:
        if self.coordinator is not None:
            self.coordinator.close()
        self.coordinator = None

    def coordinated(self) -> KafkaWire | None:
        """A connection to the group's coordinator (None: none is known yet)."""
        if self.coordinator is None:
            request = FindCoordinatorRequest[3](key=self.args.group, key_type=0)
            found = self.connect().request(request, 3, FindCoordinatorResponse)
            if found.error_code != 0:
                logging.info("%s: no coordinator yet: error %d", self.args.name, found.error_code)
                return None
            self.coordinator = KafkaWire(f"{found.host}:{found.port}", client_id=self.args.name)
        return self.coordinator

    def heartbeat(self, leaving: bool = False) -> None:
        request = ShareGroupHeartbeatRequest[1](
            group_id=self.args.group,
            member_id=self.member_id,
            member_epoch=FINAL_EPOCH if leaving else self.member_epoch,
            rack_id=None,
            subscribed_topic_names=[self.args.topic] if self.member_epoch == 0 else None,
        )
        coordinator = self.coordinated()
        if coordinator is None:
            return
        answer = coordinator.request(request, 1, ShareGroupHeartbeatResponse)
        self.beat_at = time.monotonic()
        if answer.error_code != 0:
            logging.info("%s: heartbeat: error %d", self.args.name, answer.error_code)
        if answer.error_code in COORDINATOR_MOVED:
            self.drop_coordinator()  # the same epoch, at the coordinator found next
            return
        if answer.error_code != 0:
            self.member_epoch = 0  # fenced or unknown (a new coordinator): join again
            return
        self.member_epoch = answer.member_epoch
        if answer.assignment is not None:
            self.assigned = sorted(
                p
                for t in answer.assignment.topic_partitions
                if t.topic_id == self.topic_id
                for p in t.partitions
            )

    def fetch(self, final: bool = False) -> None:
        request_class = ShareFetchRequest[1]
        partition_class = request_class.FetchTopic.FetchPartition
        acks = self.to_ack if self.session_epoch > 0 else {}
        acked = [
            [p, o] for p, ranges in acks.items() for f, last in ranges for o in range(f, last + 1)
        ]
        partitions = [
            partition_class(
                partition_index=p,
                acknowledgement_batches=[
                    partition_class.AcknowledgementBatch(
                        first_offset=f, last_offset=last, acknowledge_types=[ACCEPT]
                    )
                    for f, last in acks.get(p, ())
                ],
            )
            for p in sorted(set(self.assigned) | set(acks))
        ]
        request = request_class(
            group_id=self.args.group,
            member_id=self.member_id,
            share_session_epoch=FINAL_EPOCH if final else self.session_epoch,
            max_wait_ms=0 if final else IDLE_WAIT_MS,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=0 if final else self.args.max_records,
            batch_size=self.args.max_records,
            topics=[request_class.FetchTopic(topic_id=self.topic_id, partitions=partitions)]
            if partitions
            else [],
            forgotten_topics_data=[],
        )
        if acked:
            self.history.record("invoke", "share-ack", {"records": acked})
        self.to_ack = {}
        try:
            answer = self.connect().request(request, 1, ShareFetchResponse)
        except (OSError, ConnectionError) as exc:
            if acked:
                self.history.record("info", "share-ack", {"records": acked, "error": describe(exc)})
            raise
        if answer.error_code != 0:
            logging.info("%s: share fetch: error %d", self.args.name, answer.error_code)
            if acked:
                self.history.record(
                    "fail", "share-ack", {"records": acked, "error": answer.error_code}
                )
            self.session_epoch = 0
            return
        self.session_epoch += 1
        self._answered(answer, acks)

    def _answered(self, answer: Any, acks: dict[int, list[tuple[int, int]]]) -> None:
        delivered = []
        for topic in answer.responses:
            for p in topic.partitions:
                if p.error_code != 0:
                    logging.info(
                        "%s: partition %d: error %d: %s",
                        self.args.name, p.partition_index, p.error_code, p.error_message,
                    )  # fmt: skip
                sent = [
                    [p.partition_index, o]
                    for f, last in acks.get(p.partition_index, ())
                    for o in range(f, last + 1)
                ]
                if sent:
                    outcome = "ok" if p.acknowledge_error_code == 0 else "fail"
                    self.history.record(
                        outcome, "share-ack", {"records": sent, "error": p.acknowledge_error_code}
                    )
                for r in p.acquired_records:
                    self.to_ack.setdefault(p.partition_index, []).append(
                        (r.first_offset, r.last_offset)
                    )
                    delivered += [
                        [p.partition_index, o, r.delivery_count]
                        for o in range(r.first_offset, r.last_offset + 1)
                    ]
        if delivered:
            self.history.record("ok", "share-fetch", {"records": delivered})


def run(args: argparse.Namespace) -> int:
    stop = StopFlag()
    with HistoryWriter(Path(args.history_dir), args.name) as history:
        member = ShareMember(args, history)
        while not stop:
            try:
                if (
                    member.member_epoch == 0
                    or time.monotonic() - member.beat_at > HEARTBEAT_INTERVAL_S
                ):
                    member.heartbeat()
                if member.member_epoch == 0 or not member.assigned:
                    stop.wait(RECONNECT_BACKOFF_S)
                    continue
                member.fetch()
                if member.to_ack and args.hold_ms:
                    stop.wait(args.hold_ms / 1000)
            except (OSError, ConnectionError) as exc:
                logging.info("%s: connection lost: %s", args.name, exc)
                member.drop_connection()
                stop.wait(RECONNECT_BACKOFF_S)
        try:  # leave: acknowledge what is held, close the session, leave the group
            member.fetch(final=True)
            member.heartbeat(leaving=True)
        except (OSError, ConnectionError):
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.share_workload")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--topic-id", required=True, help="the topic id, as the registry writes it")
    parser.add_argument("--group", required=True)
    parser.add_argument("--history-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--max-records", type=int, default=20)
    parser.add_argument("--hold-ms", type=int, default=0)
    logging.basicConfig(level=logging.INFO)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
