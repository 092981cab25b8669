"""The streams campaign's checker: judges a history (tests/faults/history.py events, written by
tests/faults/streams_workload.py) of Kafka Streams' exactly_once_v2 word count run through
faults. Independent of what it judges: it imports nothing of seglog's, only the history's
shape.

The word count emits, per occurrence of a word, the word's new count; its output topic read at
read_committed must therefore hold for every word exactly 1, 2, ..., N, where N is the word's
count in the input. What it looks for:

- double count: a count repeated, or a count stepping back (a replayed input record whose
  output was committed twice, or a state store restored behind its committed output);
- lost update: a count skipped (a gap: output committed without its predecessor);
- divergent read: two readers saw different records at one output offset;
- wrong final count: the final read of the output does not end at the input's exact counts
  (input lost or counted twice), or the output never caught up;
- lost line: a line the input's producer saw acknowledged is not in the input; duplicate
  line: a line id at two offsets of the input that its producer's epoch bumps do not explain.

The expected counts are those of the input as written (read back to its end at read_committed
by the final reader), not of the lines the producers meant to write: exactly-once is a promise
about what the word count does with the input topic it reads, and the input is whatever its
writers put there. A writer's sends whose outcome it never learned are Jepsen's `info`
(indeterminate): they are counted if they are in the input, and not missed if they are not.
A line at two offsets is written twice by its own producer when that producer (librdkafka,
idempotent) bumped its producer epoch while the line was outstanding (between its `invoke` and
its `ok`/`info`, or the end of the history): librdkafka bumps the epoch of all its partitions
at once and sends every unacknowledged message again from sequence 0 under the new epoch,
including one it took for unwritten (an answer such as NOT_LEADER_OR_FOLLOWER after the append,
as Kafka's leaders give too) though it was (librdkafka issue 4953, seen on Apache Kafka).
No broker can deduplicate across producer epochs; the line is input counted twice, as it
must be, and reported as the writer's (`writer_duplicates`), not as an anomaly of the system
under test. A line written twice with no epoch bump of its producer around it is one batch
written twice under one epoch (or answered for and written again): a broker's duplicate, an
anomaly. (The idempotent producer itself is judged by the records workload's checker.)

Every reader (the running ones, replaced when killed, and the final one) reads the output from
its start, so each one's counts per word must be a prefix of 1, 2, ...: each is checked alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

MAX_EXAMPLES = 5


class EventLike(Protocol):
    process: str
    type: str
    f: str
    value: Any
    time_ns: int


@dataclass
class StreamsVerdict:
    lines: int = 0  # in the input, at the end
    acknowledged: int = 0
    words: int = 0  # distinct
    counted: int = 0  # the input's words, all occurrences
    output_records: int = 0  # the final read's
    readers: int = 0
    epoch_bumps: int = 0  # the input producers' (librdkafka's) bumps of their producer epochs
    writer_duplicates: list[str] = field(default_factory=list)  # lines written twice, explained
    final_read: bool = False  # the input and the output were read to their ends
    anomalies: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, example: str) -> None:
        examples = self.anomalies.setdefault(kind, [])
        examples.append(example)

    @property
    def ok(self) -> bool:
        return self.final_read and not self.anomalies

    def summary(self) -> str:
        verdict = "VALID" if self.ok else "INVALID"
        found = ", ".join(f"{k} {len(v)}" for k, v in sorted(self.anomalies.items())) or "none"
        return (
            f"{verdict}: {self.lines} input lines ({self.acknowledged} acknowledged), "
            f"{self.counted} words counted over {self.words} distinct, {self.output_records} "
            f"output counts in the final read, {self.readers} readers; {self.epoch_bumps} "
            f"producer epoch bumps, {len(self.writer_duplicates)} lines written twice by "
            f"their producer across one (counted twice); final read "
            f"{'complete' if self.final_read else 'INCOMPLETE'}; anomalies: {found}"
        )

    def details(self) -> list[str]:
        return [
            f"  {kind}: {example}"
            for kind, examples in sorted(self.anomalies.items())
            for example in examples[:MAX_EXAMPLES]
        ] + [f"  written twice by its producer: {x}" for x in self.writer_duplicates[:MAX_EXAMPLES]]


@dataclass
class Writers:
    """What the input's producers recorded: each line's process and the times it was sent and
    its outcome known, and each producer's epoch bumps."""

    process: dict[str, str] = field(default_factory=dict)  # line -> its producer
    sent_ns: dict[str, int] = field(default_factory=dict)
    done_ns: dict[str, int] = field(default_factory=dict)  # ok or info
    bumps_ns: dict[str, list[int]] = field(default_factory=dict)  # producer -> bumped at

    def note(self, event: EventLike) -> None:
        if event.f == "line":
            line = event.value["line"]
            if event.type == "invoke":
                self.process[line] = event.process
                self.sent_ns[line] = event.time_ns
            else:
                self.done_ns.setdefault(line, event.time_ns)
        elif event.f == "epoch-bump" and event.value.get("phase") == "bumped":
            self.bumps_ns.setdefault(event.process, []).append(event.time_ns)

    def bumped_while_outstanding(self, line: str) -> bool:
        process, sent = self.process.get(line), self.sent_ns.get(line)
        if process is None or sent is None:
            return False
        done = self.done_ns.get(line)
        return any(
            sent <= at and (done is None or at <= done) for at in self.bumps_ns.get(process, ())
        )


def check_streams(history: Iterable[EventLike]) -> StreamsVerdict:
    verdict = StreamsVerdict()
    acknowledged: set[str] = set()
    input_lines: list[list[Any]] | None = None
    final_output: list[list[Any]] | None = None
    complete = False
    polls: dict[str, list[list[Any]]] = {}
    writers = Writers()
    for event in history:
        writers.note(event)
        if event.f == "line" and event.type == "ok":
            acknowledged.add(event.value["line"])
        elif event.f == "poll" and event.type == "ok":
            polls.setdefault(event.process, []).extend(event.value["records"])
        elif event.f == "final-input" and event.type == "ok":
            input_lines = event.value["lines"]
        elif event.f == "final-output":
            final_output = event.value["records"]
            complete = bool(event.value["complete"])
    verdict.acknowledged = len(acknowledged)
    verdict.epoch_bumps = sum(len(v) for v in writers.bumps_ns.values())
    if input_lines is None or final_output is None:
        verdict.note("no final read", "the final reader recorded no input or no output")
        return verdict
    verdict.final_read = complete
    expected = _input_counts(input_lines, acknowledged, writers, verdict)
    verdict.output_records = len(final_output)
    readers = {**polls, "final-read": final_output}
    verdict.readers = len(readers)
    for process, records in sorted(readers.items()):
        _check_sequences(process, records, verdict)
    _check_agreement(readers, verdict)
    latest: dict[str, int] = {}
    for _, _, word, count in final_output:
        latest[word] = count
    for word in sorted(set(latest) | set(expected)):
        if latest.get(word, 0) != expected.get(word, 0):
            verdict.note(
                "wrong final count",
                f"{word}: output ends at {latest.get(word, 0)}, input holds "
                f"{expected.get(word, 0)}",
            )
    return verdict


def _input_counts(
    lines: list[list[Any]], acknowledged: set[str], writers: Writers, verdict: StreamsVerdict
) -> Counter[str]:
    """[partition, offset, id, text] lines, one per offset: the input's counts, every copy
    of a line counted (the input as written)."""
    verdict.lines = len(lines)
    at: dict[str, list[str]] = {}
    for partition, offset, line, _ in lines:
        at.setdefault(line, []).append(f"{partition}@{offset}")
    for line, offsets in sorted(at.items()):
        if len(offsets) > 1:
            where = f"{line} is in the input at {', '.join(offsets)}"
            if writers.bumped_while_outstanding(line):
                verdict.writer_duplicates.append(f"{where}, its producer's epoch bumped meanwhile")
            else:
                verdict.note("duplicate line", where)
    for line in sorted(acknowledged - set(at)):
        verdict.note("lost line", f"{line} was acknowledged and is not in the input")
    expected = Counter(word for *_, text in lines for word in text.split())
    verdict.words = len(expected)
    verdict.counted = sum(expected.values())
    return expected


def _check_sequences(process: str, records: list[list[Any]], verdict: StreamsVerdict) -> None:
    """One reader's counts per word, in the order it read them: 1, 2, 3, ... (a record the
    consumer hands over again, at an offset it had read, is no new count)."""
    last: dict[str, tuple[int, int, int]] = {}  # word -> (count, partition, offset)
    read: set[tuple[int, int]] = set()
    for partition, offset, word, count in records:
        if (partition, offset) in read:
            continue
        read.add((partition, offset))
        previous, at_partition, at_offset = last.get(word, (0, -1, -1))
        if count != previous + 1:
            kind = "lost update" if count > previous + 1 else "double count"
            verdict.note(
                kind,
                f"{process}: {word} counted {count} at {partition}@{offset} after {previous} "
                f"at {at_partition}@{at_offset}",
            )
        last[word] = (count, partition, offset)


def _check_agreement(readers: dict[str, list[list[Any]]], verdict: StreamsVerdict) -> None:
    """Every reader saw the same record at each output offset."""
    seen: dict[tuple[int, int], tuple[str, int, str]] = {}
    for process, records in sorted(readers.items()):
        for partition, offset, word, count in records:
            first = seen.setdefault((partition, offset), (word, count, process))
            if first[:2] != (word, count):
                verdict.note(
                    "divergent read",
                    f"{partition}@{offset}: {first[2]} read {first[0]}={first[1]}, {process} "
                    f"read {word}={count}",
                )
