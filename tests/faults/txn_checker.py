"""The transactional campaign's judge: the histories of the transactional workload
(tests/faults/txn_workload.py) checked for the anomalies Jepsen looks for in Kafka's
transactions (its Kafka workload and the Bufstream analysis). Pure functions over the
recorded events; nothing here imports seglog, so the checker cannot share a bug with what it
judges.

A transaction writes unique values (`<process>-<n>-<i>`) to several partitions; its outcome,
as the client saw it, is committed (`ok`), aborted (`fail`, or a transaction the client meant
to abort: it never asked to commit it) or unknown (`info`, or no completion: the process
died). Readers read with read_committed or read_uncommitted.

Anomaly classes:
- aborted-read: a read_committed read (a poll or the final read) of a value written by a
  transaction that was certainly not committed (Jepsen's G1a).
- lost-commit: a value of a transaction the client saw committed, absent from the final
  read_committed read of its partition.
- intermediate-read: a read_committed consumer that, in one session (between assignment
  changes), read some of a transaction's values and read past the offset of another of its
  values without reading it: part of a transaction visible where the whole should be
  (Jepsen's torn transactions; with one partition, its G1b-style intermediate read).
- premature-read: a read_committed poll returning a value before its producer asked to
  commit the value's transaction (a dirty read of a transaction then still open).
- torn-transaction: the final read_committed log holding some of a transaction's values but
  not all (for a transaction of unknown outcome: it committed or aborted, not half).
- duplicate: one value read at two positions (partition, offset).
- inconsistent-offsets: one position read holding two different values.
- phantom: a value read that no transaction ever wrote.
- nonmonotonic-lso: a partition's last stable offset (ListOffsets read_committed latest)
  observed lower than an observation that completed before this one was asked.
- txn-never-ending: once the faults stopped and the producers were stopped, a partition's
  last stable offset still below its high watermark after the bound the final reader waited
  (an open transaction nobody ends: a hanging transaction).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.faults.checker import EventLike

ABORTED_READ = "aborted-read"
LOST_COMMIT = "lost-commit"
INTERMEDIATE_READ = "intermediate-read"
PREMATURE_READ = "premature-read"
TORN_TRANSACTION = "torn-transaction"
DUPLICATE = "duplicate"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
PHANTOM = "phantom"
NONMONOTONIC_LSO = "nonmonotonic-lso"
TXN_NEVER_ENDING = "txn-never-ending"

ANOMALIES = (
    ABORTED_READ,
    LOST_COMMIT,
    INTERMEDIATE_READ,
    PREMATURE_READ,
    TORN_TRANSACTION,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    PHANTOM,
    NONMONOTONIC_LSO,
    TXN_NEVER_ENDING,
)
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
EXAMPLES_PER_CLASS = 10

Position = tuple[int, int]  # (partition, offset)


@dataclass
class TxnVerdict:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # transactions by the client's outcome, and what the final log says of the unknown ones
    txns: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reads: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by isolation
    final_records: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lso_observations: int = 0
    stable_partitions: int = 0

    def add(self, anomaly: str, example: str) -> None:
        self.counts[anomaly] += 1
        if len(self.examples[anomaly]) < EXAMPLES_PER_CLASS:
            self.examples[anomaly].append(example)

    @property
    def failures(self) -> dict[str, int]:
        return {name: count for name, count in self.counts.items() if count}

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        t = self.txns
        counts = ", ".join(f"{name} {count}" for name, count in self.counts.items())
        return (
            f"{'VALID' if self.ok else 'INVALID'}: transactions committed {t['committed']}, "
            f"aborted {t['aborted']} ({t['aborted-in-log']} with writes in the log), unknown "
            f"{t['unknown']} (then committed {t['unknown-committed']}, aborted "
            f"{t['unknown-aborted']}); records polled read_committed "
            f"{self.reads[READ_COMMITTED]}, read_uncommitted {self.reads[READ_UNCOMMITTED]}; "
            f"final read_committed {self.final_records[READ_COMMITTED]}, read_uncommitted "
            f"{self.final_records[READ_UNCOMMITTED]}; {self.lso_observations} LSO "
            f"observations, {self.stable_partitions} partitions stable at the end; {counts}"
        )

    def details(self) -> list[str]:
        return [
            f"  {name}: {example}" for name in ANOMALIES for example in self.examples.get(name, [])
        ]


@dataclass
class _Txn:
    name: str
    process: str
    writes: list[tuple[int, str]]  # (partition, value)
    intent: str  # commit or abort
    outcome: str = "unknown"  # committed, aborted, unknown
    error: str = ""
    commit_ns: int | None = None  # when its producer asked to commit it

    @property
    def never_committed(self) -> bool:
        """Certainly not committed: aborted as the client saw it, or never asked to commit."""
        return self.outcome == "aborted" or self.intent == "abort"


@dataclass
class _Read:
    process: str
    isolation: str
    partition: int
    offset: int
    value: str
    final: bool
    time_ns: int = 0  # when the read was recorded (after it returned)


@dataclass
class _Lso:
    process: str
    invoke_ns: int
    complete_ns: int
    offsets: dict[int, int]


@dataclass
class _History:
    txns: dict[str, _Txn] = field(default_factory=dict)  # by name
    by_value: dict[str, _Txn] = field(default_factory=dict)
    reads: list[_Read] = field(default_factory=list)
    # per read_committed consumer: its steps in order, a read or None for a new session
    sessions: dict[str, list[_Read | None]] = field(default_factory=lambda: defaultdict(list))
    final: dict[str, dict[int, dict[int, str]]] = field(
        default_factory=lambda: {READ_COMMITTED: {}, READ_UNCOMMITTED: {}}
    )
    delivered: dict[str, Position] = field(default_factory=dict)  # value -> reported position
    lsos: list[_Lso] = field(default_factory=list)
    stable: list[dict] = field(default_factory=list)


def check_transactions(history: Iterable[EventLike]) -> TxnVerdict:
    """The verdict on a merged history (events in time order)."""
    h = _collect(history)
    verdict = TxnVerdict()
    for txn in h.txns.values():
        verdict.txns[txn.outcome] += 1
    for read in h.reads:
        if read.final:
            verdict.final_records[read.isolation] += 1
        else:
            verdict.reads[read.isolation] += 1
    verdict.lso_observations = len(h.lsos)
    _check_values(verdict, h)
    _check_final(verdict, h)
    _check_sessions(verdict, h)
    _check_premature(verdict, h)
    _check_lso(verdict, h)
    for stable in h.stable:
        if int(stable["lso"]) < int(stable["hw"]):
            verdict.add(
                TXN_NEVER_ENDING,
                f"partition {stable['partition']}: last stable offset {stable['lso']} below "
                f"the high watermark {stable['hw']} after {stable.get('waited_ms', '?')} ms "
                "with no producer running",
            )
        else:
            verdict.stable_partitions += 1
    return verdict


def _collect(history: Iterable[EventLike]) -> _History:
    h = _History()
    open_lso: dict[str, int] = {}
    for event in history:
        value = event.value or {}
        if event.f == "txn":
            name = str(value.get("txn"))
            if event.type == "invoke":
                writes = [(int(p), str(v)) for p, v in value.get("writes", [])]
                txn = _Txn(name, event.process, writes, str(value.get("intent", "commit")))
                h.txns[name] = txn
                for _, v in writes:
                    h.by_value[v] = txn
            elif name in h.txns:
                txn = h.txns[name]
                txn.outcome = {"ok": "committed", "fail": "aborted"}.get(event.type, "unknown")
                txn.error = str(value.get("error", ""))
                for p, o, v in value.get("offsets", []):
                    h.delivered[str(v)] = (int(p), int(o))
        elif event.f == "commit" and event.type == "invoke":
            txn_asked = h.txns.get(str(value.get("txn")))
            if txn_asked is not None and txn_asked.commit_ns is None:
                txn_asked.commit_ns = event.time_ns
        elif event.f == "poll" and event.type == "ok":
            isolation = str(value.get("isolation", READ_COMMITTED))
            for p, o, v in value.get("records", []):
                read = _Read(event.process, isolation, int(p), int(o), str(v), False, event.time_ns)
                h.reads.append(read)
                if isolation == READ_COMMITTED:
                    h.sessions[event.process].append(read)
        elif event.f == "assign" and event.type == "ok":
            h.sessions[event.process].append(None)
        elif event.f == "final-read" and event.type == "ok":
            isolation = str(value.get("isolation", READ_COMMITTED))
            partition = int(value["partition"])
            records = h.final[isolation].setdefault(partition, {})
            for o, v in value.get("records", []):
                records[int(o)] = str(v)
                h.reads.append(_Read(event.process, isolation, partition, int(o), str(v), True))
        elif event.f == "lso":
            if event.type == "invoke":
                open_lso[event.process] = event.time_ns
            elif event.type == "ok" and event.process in open_lso:
                offsets = {int(p): int(o) for p, o in value.get("offsets", {}).items()}
                h.lsos.append(
                    _Lso(event.process, open_lso.pop(event.process), event.time_ns, offsets)
                )
            else:
                open_lso.pop(event.process, None)
        elif event.f == "stable" and event.type == "ok":
            h.stable.append(dict(value))
    return h


def _check_values(verdict: TxnVerdict, h: _History) -> None:
    positions: dict[str, set[Position]] = defaultdict(set)
    at_position: dict[Position, set[str]] = defaultdict(set)
    aborted_reads: dict[str, set[Position]] = defaultdict(set)
    for read in h.reads:
        where = (read.partition, read.offset)
        positions[read.value].add(where)
        at_position[where].add(read.value)
        txn = h.by_value.get(read.value)
        if read.isolation == READ_COMMITTED and txn is not None and txn.never_committed:
            aborted_reads[read.value].add(where)
    for where, values in sorted(at_position.items()):
        if len(values) > 1:
            verdict.add(INCONSISTENT_OFFSETS, f"{_at(where)} read as {sorted(values)}")
    for value, where_read in sorted(positions.items()):
        if len(where_read) > 1:
            verdict.add(DUPLICATE, f"{value} at {_positions(where_read)}")
        if value not in h.by_value:
            verdict.add(PHANTOM, f"{value} read at {_positions(where_read)}, never written")
    for value, where_read in sorted(aborted_reads.items()):
        txn = h.by_value[value]
        why = "aborted" if txn.outcome == "aborted" else f"meant to abort ({txn.outcome})"
        verdict.add(
            ABORTED_READ,
            f"{value} of {txn.name} ({why}) read read_committed at {_positions(where_read)}",
        )
    in_uncommitted = {v for records in h.final[READ_UNCOMMITTED].values() for v in records.values()}
    verdict.txns["aborted-in-log"] = sum(
        1
        for txn in h.txns.values()
        if txn.never_committed and any(v in in_uncommitted for _, v in txn.writes)
    )


def _check_final(verdict: TxnVerdict, h: _History) -> None:
    """Lost commits and torn transactions, against the final read_committed read of each
    partition (a partition without one judges nothing)."""
    final = h.final[READ_COMMITTED]
    visible = {p: set(records.values()) for p, records in final.items()}
    for txn in sorted(h.txns.values(), key=lambda t: t.name):
        judged = [(p, v) for p, v in txn.writes if p in final]
        if not judged:
            continue
        seen = [(p, v) for p, v in judged if v in visible[p]]
        missing = [(p, v) for p, v in judged if v not in visible[p]]
        if txn.outcome == "committed" and missing:
            verdict.add(
                LOST_COMMIT,
                f"{txn.name} committed, but the final read_committed log lacks "
                + ", ".join(f"{v} (partition {p})" for p, v in missing),
            )
        elif seen and missing and not txn.never_committed:
            verdict.add(
                TORN_TRANSACTION,
                f"{txn.name} ({txn.outcome}): the final read_committed log holds "
                + ", ".join(v for _, v in seen)
                + " but lacks "
                + ", ".join(f"{v} (partition {p})" for p, v in missing),
            )
        if txn.outcome == "unknown" and len(judged) == len(txn.writes):
            verdict.txns["unknown-committed" if seen else "unknown-aborted"] += 1


def _where_written(h: _History) -> dict[str, Position]:
    """Each value's position in the log: the final read_uncommitted read, else the final
    read_committed read, else the position its producer's delivery report gave."""
    where = dict(h.delivered)
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        for p, records in h.final[isolation].items():
            for o, v in records.items():
                where[v] = (p, o)
    return where


def _check_sessions(verdict: TxnVerdict, h: _History) -> None:
    """Per read_committed consumer session: a transaction partly read while the reader went
    past the position of one of its values it did not read."""
    where = _where_written(h)
    for process, steps in sorted(h.sessions.items()):
        session: list[_Read] = []
        for step in [*steps, None]:
            if step is not None:
                session.append(step)
                continue
            if session:
                _check_one_session(verdict, h, where, process, session)
            session = []


def _check_one_session(
    verdict: TxnVerdict,
    h: _History,
    where: dict[str, Position],
    process: str,
    session: list[_Read],
) -> None:
    read_values = {read.value for read in session}
    highest: dict[int, int] = {}
    for read in session:
        highest[read.partition] = max(highest.get(read.partition, -1), read.offset)
    touched = {h.by_value[v].name: h.by_value[v] for v in read_values if v in h.by_value}
    for name, txn in sorted(touched.items()):
        if txn.never_committed:
            continue  # an aborted read, counted as such
        skipped = []
        for p, v in txn.writes:
            position = where.get(v)
            if v in read_values or position is None:
                continue
            if position[0] == p and highest.get(p, -1) > position[1]:
                skipped.append(f"{v} at {_at(position)}")
        if skipped:
            seen = sorted(v for _, v in txn.writes if v in read_values)
            verdict.add(
                INTERMEDIATE_READ,
                f"{process} read {', '.join(seen)} of {name} ({txn.outcome}) and read past "
                f"{', '.join(skipped)} without it",
            )


def _check_premature(verdict: TxnVerdict, h: _History) -> None:
    for read in h.reads:
        txn = h.by_value.get(read.value)
        if read.final or read.isolation != READ_COMMITTED or txn is None:
            continue
        if txn.commit_ns is not None and read.time_ns < txn.commit_ns:
            verdict.add(
                PREMATURE_READ,
                f"{read.process} read {read.value} of {txn.name} at "
                f"{_at((read.partition, read.offset))}, "
                f"{(txn.commit_ns - read.time_ns) / 1e6:.1f} ms before its commit was asked",
            )


def _check_lso(verdict: TxnVerdict, h: _History) -> None:
    """Per partition, each observation against the highest one completed before it was
    asked (a sweep in time order)."""
    by_partition: dict[int, list[tuple[int, int, int, str]]] = defaultdict(list)
    for lso in h.lsos:
        for p, offset in lso.offsets.items():
            if offset >= 0:
                by_partition[p].append((lso.invoke_ns, lso.complete_ns, offset, lso.process))
    for partition, observed in sorted(by_partition.items()):
        by_completion = sorted(observed, key=lambda o: o[1])
        done = 0
        highest: tuple[int, str] | None = None
        for invoke_ns, _, offset, process in sorted(observed):
            while done < len(by_completion) and by_completion[done][1] < invoke_ns:
                _, _, done_offset, done_process = by_completion[done]
                if highest is None or done_offset > highest[0]:
                    highest = (done_offset, done_process)
                done += 1
            if highest is not None and offset < highest[0]:
                verdict.add(
                    NONMONOTONIC_LSO,
                    f"partition {partition}: {highest[1]} saw the last stable offset at "
                    f"{highest[0]}, then {process} saw it at {offset}",
                )


def _at(position: Position) -> str:
    return f"{position[0]}/{position[1]}"


def _positions(where: Iterable[Position]) -> str:
    return ", ".join(_at(w) for w in sorted(where))


def main(argv: list[str] | None = None) -> int:
    """Check a kept run's histories again: python -m tests.faults.txn_checker DIR."""
    import argparse
    from pathlib import Path

    from tests.faults.history import read_history

    parser = argparse.ArgumentParser(prog="python -m tests.faults.txn_checker")
    parser.add_argument("history_dir", type=Path)
    args = parser.parse_args(argv)
    verdict = check_transactions(read_history(args.history_dir))
    print(verdict.summary())
    print("\n".join(verdict.details()))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
