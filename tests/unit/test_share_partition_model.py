"""The share partition's per-batch state (share/share_partition.py over share/offset_runs.py)
against the simplest model there is: one entry per offset. Random acquire / acknowledge /
release / lock-expiry / read-back sequences must get the same answers, the same per-offset
states and delivery counts, and the same state written to __share_group_state; updates laid
over a snapshot (state_formats.apply_update) the same as laid offset by offset."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.errors import SeglogError
from services.gateway.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    RELEASE,
    AcquiredRange,
    FetchedBatch,
    PartitionLimits,
    SharePartition,
    StateBatch,
)
from services.gateway.share.state_formats import ShareState, apply_update

LOCK_S, LIMIT = 10.0, 3


@dataclass
class Rec:
    state: int
    count: int
    member: str = ""
    deadline: float = 0.0


@dataclass
class Model:
    """Every offset in [start, end) held explicitly; each operation a loop over offsets."""

    limits: PartitionLimits
    start: int
    end: int = -1
    recs: dict[int, Rec] = field(default_factory=dict)
    redelivered: int = 0
    archived_at_limit: int = 0

    def __post_init__(self) -> None:
        self.end = max(self.end, self.start)

    @classmethod
    def from_state(cls, limits, start, batches) -> Model:
        model = cls(limits, start)
        for b in batches:
            for o in range(max(b.first_offset, start), b.last_offset + 1):
                model.grow_to(o)
                state = AVAILABLE if b.delivery_state == ACQUIRED else b.delivery_state
                model.recs[o] = Rec(state, b.delivery_count)
                model.end = max(model.end, o + 1)
        for rec in model.recs.values():
            # Available at the limit: archiving when written (archiving.py), archived now.
            if rec.state == AVAILABLE and rec.count >= limits.delivery_count_limit:
                rec.state = ARCHIVED
                model.archived_at_limit += 1
        model.advance()
        return model

    def grow_to(self, offset: int) -> None:
        for o in range(self.end, offset):
            self.recs[o] = Rec(AVAILABLE, 0)
        self.end = max(self.end, offset)

    def archive_missing(self, o: int) -> None:
        if o >= self.end:
            self.grow_to(o)
            self.recs[o] = Rec(ARCHIVED, 0)
            self.end = o + 1
        elif self.recs[o].state == AVAILABLE:
            self.recs[o].state = ARCHIVED

    def next_fetch_offset(self) -> int | None:
        for o in range(self.start, self.end):
            if self.recs[o].state == AVAILABLE:
                return o
        if self.end - self.start >= self.limits.max_record_locks:
            return None
        return self.end

    def acquire(self, member, fetch_offset, batches, max_records, now) -> list[AcquiredRange]:
        out: list[AcquiredRange] = []
        taken = 0
        position = max(fetch_offset, self.start)
        for b in batches:
            if taken >= max_records:
                break
            if b.base_offset > position:
                if position >= self.end and self.start == self.end:
                    self.start = self.end = b.base_offset
                else:
                    for o in range(position, b.base_offset):
                        self.archive_missing(o)
            for o in range(max(b.base_offset, position), b.last_offset + 1):
                if b.is_control:
                    self.archive_missing(o)
                    continue
                if taken >= max_records:
                    break
                if o >= self.end:
                    self.grow_to(o)
                    if self.end - self.start >= self.limits.max_record_locks:
                        break
                    self.recs[o] = rec = Rec(ACQUIRED, 1, member, now + LOCK_S)
                    self.end = o + 1
                else:
                    rec = self.recs[o]
                    if rec.state != AVAILABLE:
                        continue
                    self.redelivered += 1 if rec.count else 0
                    rec.state, rec.member, rec.deadline = ACQUIRED, member, now + LOCK_S
                    rec.count += 1
                taken += 1
                if out and out[-1].last_offset == o - 1 and out[-1].delivery_count == rec.count:
                    out[-1] = out[-1]._replace(last_offset=o)
                else:
                    out.append(AcquiredRange(o, o, rec.count))
            position = max(position, b.last_offset + 1)
        self.advance()
        return out

    def acknowledge(self, member, first, last, types, now) -> None:
        if first > last or first < 0:
            raise ValueError("empty")
        for o in range(first, last + 1):
            rec = self.recs.get(o)
            if rec is None or rec.state != ACQUIRED or rec.member != member:
                raise ValueError("not held")
        for o in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[o - first]
            rec = self.recs[o]
            if kind == ACCEPT:
                rec.state = ACKNOWLEDGED
            elif kind in (0, 3):
                rec.state = ARCHIVED
            elif kind == RELEASE:
                self.release(rec)
            else:
                rec.deadline = now + LOCK_S
        self.advance()

    def release(self, rec: Rec) -> None:
        rec.member, rec.deadline = "", 0.0
        if rec.count >= LIMIT:
            rec.state = ARCHIVED
            self.archived_at_limit += 1
        else:
            rec.state = AVAILABLE

    def release_where(self, pick) -> int:
        chosen = [r for r in self.recs.values() if r.state == ACQUIRED and pick(r)]
        for rec in chosen:
            self.release(rec)
        self.advance()
        return len(chosen)

    def advance(self) -> None:
        while self.start in self.recs and self.recs[self.start].state in (ACKNOWLEDGED, ARCHIVED):
            del self.recs[self.start]
            self.start += 1
        self.end = max(self.end, self.start)

    def state_of(self, o: int) -> tuple[int, int, str]:
        if o < self.start:
            return ACKNOWLEDGED, 0, ""
        rec = self.recs.get(o)
        if rec is None:
            return AVAILABLE, 0, ""
        return rec.state, rec.count, rec.member

    def state_batches(self) -> list[StateBatch]:
        out: list[StateBatch] = []
        for o in range(self.start, self.end):
            rec = self.recs[o]
            state = AVAILABLE if rec.state == ACQUIRED else rec.state
            if state == AVAILABLE and rec.count == 0:
                continue
            last = out[-1] if out else None
            if last and last.last_offset == o - 1 and last[2:] == (state, rec.count):
                out[-1] = last._replace(last_offset=o)
            else:
                out.append(StateBatch(o, o, state, rec.count))
        return out


def assert_same(p: SharePartition, m: Model) -> None:
    assert (p.start_offset, p.end_offset) == (m.start, m.end)
    for o in range(m.start - 2, m.end + 2):
        state, count, holder = p.state_of(o)
        expected = m.state_of(o)
        assert (state, count) == expected[:2], o
        if state == ACQUIRED:
            assert holder == expected[2], o
    assert p.next_fetch_offset() == m.next_fetch_offset()
    assert p.in_flight() == sum(1 for r in m.recs.values() if r.state == ACQUIRED)
    assert p.waiting() == sum(1 for r in m.recs.values() if r.state == AVAILABLE and r.count)
    assert (p.redelivered, p.archived_at_limit) == (m.redelivered, m.archived_at_limit)
    assert p.state_batches() == m.state_batches()
    runs = list(p.runs)  # the runs tile the window exactly, no two alike side by side
    assert not any(a.joins(b) for a, b in zip(runs, runs[1:], strict=False))
    assert [r.first for r in runs[1:]] == [r.last + 1 for r in runs[:-1]]
    assert (runs[0].first, runs[-1].last + 1) == (m.start, m.end) if runs else m.start == m.end


MEMBERS = ("a", "b", "c")


@st.composite
def fetched(draw, near: int) -> list[FetchedBatch]:
    base = near + draw(st.integers(-3, 4))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        base += draw(st.sampled_from((0, 0, 0, 1, 3)))
        size = draw(st.integers(1, 6))
        out.append(
            FetchedBatch(max(base, 0), max(base, 0) + size - 1, draw(st.integers(0, 7)) == 0)
        )
        base = max(base, 0) + size
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), max_locks=st.sampled_from((4, 9, 40)), start=st.integers(0, 5))
def test_per_batch_state_answers_as_a_per_offset_model(data, max_locks, start):
    limits = PartitionLimits(LOCK_S, LIMIT, max_locks)
    p, m = SharePartition(limits, start), Model(limits, start)
    now = 0.0
    for _ in range(data.draw(st.integers(1, 30))):
        now += data.draw(st.sampled_from((0.0, 1.0, 4.0, 11.0)))
        op = data.draw(
            st.sampled_from(("acquire", "acquire", "ack", "ack", "release", "expire", "reload"))
        )
        if op == "acquire":
            member = data.draw(st.sampled_from(MEMBERS))
            offset = m.next_fetch_offset()
            offset = m.start if offset is None else offset
            offset += data.draw(st.sampled_from((0, 0, 0, -1, 2)))
            batches = data.draw(fetched(offset))
            most = data.draw(st.integers(1, 12))
            assert p.acquire(member, offset, batches, most, now) == m.acquire(
                member, offset, batches, most, now
            )
        elif op == "ack":
            held = [(o, r.member) for o, r in m.recs.items() if r.state == ACQUIRED]
            if held and data.draw(st.booleans()):  # mostly a range one member holds
                first, member = data.draw(st.sampled_from(held))
                last = first + data.draw(st.integers(0, 4))
            else:
                member = data.draw(st.sampled_from(MEMBERS))
                first = m.start + data.draw(st.integers(-1, 8))
                last = first + data.draw(st.integers(-1, 6))
            size = last - first + 1
            if size > 1 and data.draw(st.booleans()):
                types = tuple(data.draw(st.lists(st.integers(0, 4), min_size=size, max_size=size)))
            else:
                types = (data.draw(st.integers(0, 4)),)
            try:
                m.acknowledge(member, first, last, types, now)
            except ValueError:
                with pytest.raises(SeglogError):
                    p.acknowledge(member, first, last, types, now)
            else:
                p.acknowledge(member, first, last, types, now)
        elif op == "release":
            member = data.draw(st.sampled_from(MEMBERS))
            assert p.release_member(member) == m.release_where(
                lambda r, who=member: r.member == who
            )
        elif op == "expire":
            assert p.expire_locks(now) == m.release_where(lambda r, at=now: r.deadline <= at)
        else:  # the state written, read back (a failover)
            written = p.state_batches()
            p = SharePartition.from_state(limits, p.start_offset, written, 0)
            m = Model.from_state(limits, m.start, m.state_batches())
        assert_same(p, m)


def _per_offset(batches, start) -> dict[int, tuple[int, int]]:
    out = {}
    for b in batches:
        for o in range(max(b.first_offset, start), b.last_offset + 1):
            out[o] = (b.delivery_state, b.delivery_count)
    return out


state_batch = st.builds(
    lambda first, size, state, count: StateBatch(first, first + size, state, count),
    st.integers(0, 40),
    st.integers(0, 8),
    st.sampled_from((AVAILABLE, ACKNOWLEDGED, ARCHIVED)),
    st.integers(0, 3),
)


@settings(max_examples=300, deadline=None)
@given(
    snapshot=st.lists(state_batch, max_size=6),
    update=st.lists(state_batch, max_size=6),
    start=st.integers(-1, 20),
)
def test_updates_lay_over_a_snapshot_as_offset_by_offset(snapshot, update, start):
    # A snapshot's batches never overlap (Kafka writes them from disjoint in-flight batches).
    snapshot = [
        b
        for b in snapshot
        if not any(
            b is not c and b.first_offset <= c.last_offset and c.first_offset <= b.last_offset
            for c in snapshot[: snapshot.index(b)]
        )
    ]
    snapshot.sort()
    state = ShareState(0, 0, -1, 0, 0, 0, tuple(snapshot))
    merged = apply_update(state, start, tuple(update))
    at = merged.start_offset
    assert at == (0 if start < 0 else start)
    assert _per_offset(merged.state_batches, at) == _per_offset((*snapshot, *update), at)
    pairs = zip(merged.state_batches, merged.state_batches[1:], strict=False)
    for before, after in pairs:  # sorted, disjoint, alike neighbours merged
        assert before.last_offset < after.first_offset
        if before.last_offset + 1 == after.first_offset:
            assert before[2:] != after[2:]
