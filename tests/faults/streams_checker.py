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
  line: a line id at two offsets of the input (the idempotent producer wrote it twice).

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


@dataclass
class StreamsVerdict:
    lines: int = 0  # in the input, at the end
    acknowledged: int = 0
    words: int = 0  # distinct
    counted: int = 0  # the input's words, all occurrences
    output_records: int = 0  # the final read's
    readers: int = 0
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
            f"output counts in the final read, {self.readers} readers; final read "
            f"{'complete' if self.final_read else 'INCOMPLETE'}; anomalies: {found}"
        )

    def details(self) -> list[str]:
        return [
            f"  {kind}: {example}"
            for kind, examples in sorted(self.anomalies.items())
            for example in examples[:MAX_EXAMPLES]
        ]


def check_streams(history: Iterable[EventLike]) -> StreamsVerdict:
    verdict = StreamsVerdict()
    acknowledged: set[str] = set()
    input_lines: list[list[Any]] | None = None
    final_output: list[list[Any]] | None = None
    complete = False
    polls: dict[str, list[list[Any]]] = {}
    for event in history:
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
    if input_lines is None or final_output is None:
        verdict.note("no final read", "the final reader recorded no input or no output")
        return verdict
    verdict.final_read = complete
    expected = _input_counts(input_lines, acknowledged, verdict)
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
    lines: list[list[Any]], acknowledged: set[str], verdict: StreamsVerdict
) -> Counter[str]:
    """[partition, offset, id, text] lines, one per offset: the input's counts."""
    verdict.lines = len(lines)
    at: dict[str, list[str]] = {}
    for partition, offset, line, _ in lines:
        at.setdefault(line, []).append(f"{partition}@{offset}")
    for line, offsets in sorted(at.items()):
        if len(offsets) > 1:
            verdict.note("duplicate line", f"{line} is in the input at {', '.join(offsets)}")
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
