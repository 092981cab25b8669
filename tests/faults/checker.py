"""The campaign's judge: a history of client operations (tests/faults/history.py) checked
for the anomalies Jepsen's Kafka workload looks for. Pure functions over the recorded
events; nothing here imports seglog, so the checker cannot share a bug with what it judges.

Anomaly classes (a value is a record's unique payload, `<process>-<n>`):
- lost-write: a send acknowledged `ok` whose value is absent from the final read of its
  partition (or, without a final read, never read although a read reached past its offset).
- duplicate: one value read at two positions (partition, offset).
- inconsistent-offsets: one (partition, offset) read with two different values.
- wrong-ack: a send acknowledged at (partition, offset) whose value is read only elsewhere,
  or whose position is read holding another value.
- aborted-read: a value read whose send certainly failed (`fail`, not `info`).
- phantom: a value read that no process ever invoked a send of (G0-style garbage).
- nonmonotonic-send: one producer's acknowledged sends to a partition, in the order it
  sent them, at offsets that do not increase.
- nonmonotonic-poll: one consumer, between assignment changes, reading a partition at an
  offset not above the one it read before.
- poll-skip: one consumer, between assignment changes, reading offsets o1 then o2 of a
  partition while the final log holds a record between them.
- commit-regression: a consumer group's acknowledged committed offset for a partition lower
  than one acknowledged before that commit was invoked.
- vanished: a record a consumer polled (so below the high watermark) at an offset the final
  log does not hold any more (read beyond what later exists).

`info` sends (timed out, unknown) may be in the log once or not at all; twice is a duplicate.
Which classes a producer mode is allowed to show is `Guarantees`: acks=1 may lose acknowledged
writes (and so acknowledge offsets that later hold other records); without idempotence a
retried send may be written twice, out of order, and a send reported failed may have landed.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

LOST_WRITE = "lost-write"
DUPLICATE = "duplicate"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
WRONG_ACK = "wrong-ack"
ABORTED_READ = "aborted-read"
PHANTOM = "phantom"
NONMONOTONIC_SEND = "nonmonotonic-send"
NONMONOTONIC_POLL = "nonmonotonic-poll"
POLL_SKIP = "poll-skip"
COMMIT_REGRESSION = "commit-regression"
VANISHED = "vanished"

ANOMALIES = (
    LOST_WRITE,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    WRONG_ACK,
    ABORTED_READ,
    PHANTOM,
    NONMONOTONIC_SEND,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    COMMIT_REGRESSION,
    VANISHED,
)
EXAMPLES_PER_CLASS = 10


class EventLike(Protocol):
    @property
    def process(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def f(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def time_ns(self) -> int: ...


@dataclass(frozen=True)
class Guarantees:
    """What the producer mode promises; anomalies it does not promise against are counted
    but do not fail the verdict."""

    acks_all: bool = True
    idempotent: bool = True

    @classmethod
    def for_producer_mode(cls, mode: str) -> Guarantees:
        modes = {
            "idempotent": cls(acks_all=True, idempotent=True),
            "plain": cls(acks_all=True, idempotent=False),
            "acks1": cls(acks_all=False, idempotent=False),
        }
        if mode not in modes:
            raise ValueError(f"producer mode must be one of {sorted(modes)}, not {mode!r}")
        return modes[mode]

    @property
    def allowed(self) -> frozenset[str]:
        allowed: set[str] = set()
        if not self.acks_all:
            allowed |= {LOST_WRITE, WRONG_ACK}
        if not self.idempotent:
            allowed |= {DUPLICATE, NONMONOTONIC_SEND, ABORTED_READ}
        return frozenset(allowed)


@dataclass
class Verdict:
    guarantees: Guarantees
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # sends acknowledged / failed / unknown, and what became of the unknown ones
    sends: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reads: int = 0
    final_records: int = 0

    def add(self, anomaly: str, example: str) -> None:
        self.counts[anomaly] += 1
        if len(self.examples[anomaly]) < EXAMPLES_PER_CLASS:
            self.examples[anomaly].append(example)

    @property
    def failures(self) -> dict[str, int]:
        """Counts of the anomalies the guarantees forbid, those above zero."""
        return {
            name: count
            for name, count in self.counts.items()
            if count and name not in self.guarantees.allowed
        }

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        sends = self.sends
        counts = ", ".join(
            f"{name} {count}{' (allowed)' if name in self.guarantees.allowed else ''}"
            for name, count in self.counts.items()
        )
        return (
            f"{'VALID' if self.ok else 'INVALID'}: sends acknowledged {sends['ok']}, failed "
            f"{sends['fail']}, unknown {sends['info']} ({sends['info-written']} of them in the "
            f"log); {self.reads} records polled, {self.final_records} in the final read; "
            f"{counts}"
        )

    def details(self) -> list[str]:
        return [
            f"  {name}: {example}" for name in ANOMALIES for example in self.examples.get(name, [])
        ]


@dataclass
class _Send:
    process: str
    invoke_index: int
    outcome: str = "pending"  # ok, fail, info; pending: the process died before it knew
    partition: int | None = None
    offset: int | None = None
    error: str = ""


@dataclass
class _Read:
    process: str
    partition: int
    offset: int
    value: str
    final: bool


@dataclass
class _Commit:
    process: str
    group: str
    offsets: dict[int, int]
    invoke_ns: int
    complete_ns: int | None = None
    outcome: str = "pending"


def check(history: Iterable[EventLike], guarantees: Guarantees | None = None) -> Verdict:
    """The verdict on a merged history (events in time order, each process's own in the
    order it wrote them)."""
    guarantees = guarantees or Guarantees()
    verdict = Verdict(guarantees)
    sends: dict[str, _Send] = {}
    reads: list[_Read] = []
    # per consumer process: its reads and assignment changes in order, as ("read", _Read)
    # or ("assign", None)
    consumer_steps: dict[str, list[tuple[str, _Read | None]]] = defaultdict(list)
    commits: list[_Commit] = []
    open_commits: dict[str, _Commit] = {}
    final: dict[int, dict[int, str]] = {}

    for index, event in enumerate(history):
        value = event.value or {}
        if event.f == "send":
            record_value = str(value.get("value"))
            if event.type == "invoke":
                sends.setdefault(record_value, _Send(event.process, index))
                continue
            send = sends.setdefault(record_value, _Send(event.process, index))
            send.outcome = event.type
            if event.type == "ok":
                send.partition = int(value["partition"])
                send.offset = int(value["offset"])
            else:
                send.error = str(value.get("error", ""))
        elif event.f == "poll" and event.type == "ok":
            for partition, offset, record_value in value.get("records", []):
                read = _Read(event.process, int(partition), int(offset), str(record_value), False)
                reads.append(read)
                consumer_steps[event.process].append(("read", read))
        elif event.f == "assign" and event.type == "ok":
            consumer_steps[event.process].append(("assign", None))
        elif event.f == "commit":
            if event.type == "invoke":
                commit = _Commit(
                    event.process,
                    str(value.get("group", "")),
                    {int(p): int(o) for p, o in value.get("offsets", {}).items()},
                    event.time_ns,
                )
                commits.append(commit)
                open_commits[event.process] = commit
            elif event.process in open_commits:
                commit = open_commits.pop(event.process)
                commit.outcome = event.type
                commit.complete_ns = event.time_ns
        elif event.f == "final-read" and event.type == "ok":
            partition = int(value["partition"])
            records = final.setdefault(partition, {})
            for offset, record_value in value.get("records", []):
                records[int(offset)] = str(record_value)
                reads.append(_Read(event.process, partition, int(offset), str(record_value), True))

    for send in sends.values():
        verdict.sends["info" if send.outcome == "pending" else send.outcome] += 1
    verdict.reads = sum(1 for read in reads if not read.final)
    verdict.final_records = sum(len(records) for records in final.values())

    positions = _check_reads(verdict, reads, sends)
    _check_acknowledged(verdict, sends, positions, final, reads)
    _check_send_order(verdict, sends)
    _check_poll_order(verdict, consumer_steps, final)
    _check_commits(verdict, commits)
    _check_vanished(verdict, reads, final)
    final_values = {v for records in final.values() for v in records.values()}
    verdict.sends["info-written"] = sum(
        1
        for value, send in sends.items()
        if send.outcome in ("info", "pending") and value in final_values
    )
    return verdict


def _check_reads(
    verdict: Verdict, reads: list[_Read], sends: dict[str, _Send]
) -> dict[str, set[tuple[int, int]]]:
    """Value-level checks over every read; returns each value's read positions."""
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    at_position: dict[tuple[int, int], set[str]] = defaultdict(set)
    for read in reads:
        positions[read.value].add((read.partition, read.offset))
        at_position[(read.partition, read.offset)].add(read.value)
    for (partition, offset), values in sorted(at_position.items()):
        if len(values) > 1:
            verdict.add(INCONSISTENT_OFFSETS, f"{partition}/{offset} read as {sorted(values)}")
    for value, where in sorted(positions.items()):
        if len(where) > 1:
            verdict.add(DUPLICATE, f"{value} at {_positions(where)}")
        send = sends.get(value)
        if send is None:
            verdict.add(PHANTOM, f"{value} read at {_positions(where)}, never sent")
        elif send.outcome == "fail":
            verdict.add(
                ABORTED_READ, f"{value} read at {_positions(where)}, its send failed: {send.error}"
            )
    return positions


def _check_acknowledged(
    verdict: Verdict,
    sends: dict[str, _Send],
    positions: dict[str, set[tuple[int, int]]],
    final: dict[int, dict[int, str]],
    reads: list[_Read],
) -> None:
    final_values: dict[int, set[str]] = {p: set(records.values()) for p, records in final.items()}
    highest_read: dict[int, int] = defaultdict(lambda: -1)
    for read in reads:
        highest_read[read.partition] = max(highest_read[read.partition], read.offset)
    read_values_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    for read in reads:
        read_values_at[(read.partition, read.offset)].add(read.value)
    for value, send in sorted(sends.items()):
        if send.outcome != "ok":
            continue
        assert send.partition is not None and send.offset is not None
        position = (send.partition, send.offset)
        if send.partition in final:
            lost = value not in final_values[send.partition]
        else:
            lost = not positions.get(value) and highest_read[send.partition] >= send.offset
        if lost:
            holder = final.get(send.partition, {}).get(send.offset)
            verdict.add(
                LOST_WRITE,
                f"{value} acknowledged at {send.partition}/{send.offset}"
                + (f", which holds {holder}" if holder is not None else ", beyond the log end"),
            )
        others = read_values_at.get(position, set()) - {value}
        read_at = positions.get(value, set())
        # read, but never where acknowledged (a copy there too is a duplicate, not this)
        elsewhere = read_at if read_at and position not in read_at else set()
        if others or elsewhere:
            verdict.add(
                WRONG_ACK,
                f"{value} acknowledged at {send.partition}/{send.offset}"
                + (f", which reads as {sorted(others)}" if others else "")
                + (f", read at {_positions(elsewhere)}" if elsewhere else ""),
            )


def _check_send_order(verdict: Verdict, sends: dict[str, _Send]) -> None:
    by_producer: dict[tuple[str, int], list[tuple[int, str, int]]] = defaultdict(list)
    for value, send in sends.items():
        if send.outcome == "ok":
            assert send.partition is not None and send.offset is not None
            by_producer[(send.process, send.partition)].append(
                (send.invoke_index, value, send.offset)
            )
    for (process, partition), acked in sorted(by_producer.items()):
        acked.sort()
        for (_, before, before_offset), (_, after, after_offset) in zip(
            acked, acked[1:], strict=False
        ):
            if after_offset <= before_offset:
                verdict.add(
                    NONMONOTONIC_SEND,
                    f"{process} sent {before} then {after} to partition {partition}, "
                    f"acknowledged at {before_offset} then {after_offset}",
                )


def _check_poll_order(
    verdict: Verdict,
    consumer_steps: dict[str, list[tuple[str, _Read | None]]],
    final: dict[int, dict[int, str]],
) -> None:
    final_offsets = {p: sorted(records) for p, records in final.items()}
    for process, steps in sorted(consumer_steps.items()):
        last: dict[int, int] = {}
        for kind, read in steps:
            if kind == "assign" or read is None:
                last.clear()  # a new assignment starts from the committed offsets
                continue
            previous = last.get(read.partition)
            last[read.partition] = read.offset
            if previous is None:
                continue
            if read.offset <= previous:
                verdict.add(
                    NONMONOTONIC_POLL,
                    f"{process} read partition {read.partition} at {previous} then {read.offset}",
                )
                continue
            offsets = final_offsets.get(read.partition, [])
            start = bisect.bisect_right(offsets, previous)
            if start < len(offsets) and offsets[start] < read.offset:
                verdict.add(
                    POLL_SKIP,
                    f"{process} read partition {read.partition} at {previous} then "
                    f"{read.offset}, skipping {offsets[start]}",
                )


def _check_commits(verdict: Verdict, commits: list[_Commit]) -> None:
    """Per group and partition, each acknowledged commit against the highest offset
    acknowledged before it was invoked (a sweep in time order, not every pair)."""
    by_partition: dict[tuple[str, int], list[tuple[int, int, int, str]]] = defaultdict(list)
    for commit in commits:
        if commit.outcome != "ok" or commit.complete_ns is None:
            continue
        for partition, offset in commit.offsets.items():
            by_partition[(commit.group, partition)].append(
                (commit.invoke_ns, commit.complete_ns, offset, commit.process)
            )
    for (group, partition), acknowledged in sorted(by_partition.items()):
        by_completion = sorted(acknowledged, key=lambda c: c[1])
        done = 0
        highest: tuple[int, str] | None = None  # (offset, process) completed so far
        for invoke_ns, _, offset, process in sorted(acknowledged):
            while done < len(by_completion) and by_completion[done][1] < invoke_ns:
                _, _, done_offset, done_process = by_completion[done]
                if highest is None or done_offset > highest[0]:
                    highest = (done_offset, done_process)
                done += 1
            if highest is not None and offset < highest[0]:
                verdict.add(
                    COMMIT_REGRESSION,
                    f"group {group} partition {partition}: {highest[1]} committed "
                    f"{highest[0]}, then {process} committed {offset}",
                )


def _check_vanished(verdict: Verdict, reads: list[_Read], final: dict[int, dict[int, str]]) -> None:
    seen: set[tuple[int, int]] = set()
    for read in reads:
        position = (read.partition, read.offset)
        if read.final or read.partition not in final or position in seen:
            continue
        seen.add(position)
        if read.offset not in final[read.partition]:
            verdict.add(
                VANISHED,
                f"{read.process} polled {read.value} at {read.partition}/{read.offset}, "
                "which the final log does not hold",
            )


def _positions(where: Iterable[tuple[int, int]]) -> str:
    return ", ".join(f"{p}/{o}" for p, o in sorted(where))


def main(argv: list[str] | None = None) -> int:
    """Check a kept run's histories again: python -m tests.faults.checker DIR [--producer M]."""
    import argparse
    from pathlib import Path

    from tests.faults.history import read_history

    parser = argparse.ArgumentParser(prog="python -m tests.faults.checker")
    parser.add_argument("history_dir", type=Path)
    parser.add_argument("--producer", default="idempotent")
    args = parser.parse_args(argv)
    verdict = check(read_history(args.history_dir), Guarantees.for_producer_mode(args.producer))
    print(verdict.summary())
    print("\n".join(verdict.details()))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
