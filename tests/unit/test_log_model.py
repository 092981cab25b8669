"""Model-based test: random appends, rolls, reads, truncations and reopens against a list."""

import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from seglog.records import RecordBatchBuilder, iter_records
from seglog.storage import Log, LogConfig
from tests.unit.test_log import read_all

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=90, index_size_max_bytes=240)
BASE_MS = time.time_ns() // 1_000_000


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.log = Log.open(self.tmp / "m-0", CONFIG)
        self.batches: list[list[tuple[int, int, bytes]]] = []  # per batch: (offset, ts, value)

    @property
    def records(self):
        return [r for batch in self.batches for r in batch]

    @property
    def end(self):
        return self.batches[-1][-1][0] + 1 if self.batches else 0

    @rule(
        values=st.lists(st.binary(max_size=60), min_size=1, max_size=6),
        ts_step=st.integers(0, 50),
        codec=st.sampled_from([0, 1, 3, 4]),
    )
    def append(self, values, ts_step, codec):
        ts = BASE_MS + len(self.records) * 5 + ts_step
        builder = RecordBatchBuilder(compression=codec)
        for i, value in enumerate(values):
            builder.append(None, value, ts + i)
        info = self.log.append(builder.build())
        assert info.first_offset == self.end
        self.batches.append([(self.end + i, ts + i, v) for i, v in enumerate(values)])

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def read_by_offset(self, data):
        offset = data.draw(st.integers(0, self.end - 1))
        got = [r for r in iter_records(self.log.read(offset, 200)) if r.offset >= offset]
        assert got, "a read at a valid offset returns at least one batch"
        expected = [r for r in self.records if r[0] >= offset][: len(got)]
        assert [(r.offset, r.timestamp_ms, r.value) for r in got] == expected

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        target = data.draw(st.integers(BASE_MS - 10, BASE_MS + 5 * len(self.records) + 100))
        found = self.log.offset_for_timestamp(target)
        # Kafka's rule: the first batch whose max timestamp >= target, then its first record
        # with timestamp >= target (timestamps here increase, so that is the first such record).
        expected = next((o for o, ts, _ in self.records if ts >= target), None)
        assert (found.offset if found else None) == expected

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, self.end))
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b[-1][0] < offset]
        assert self.log.log_end_offset == self.end

    @rule()
    def reopen(self):
        self.log.close()
        self.log = Log.open(self.tmp / "m-0", CONFIG)

    @invariant()
    def same_records(self):
        assert self.log.log_end_offset == self.end
        got = [(r.offset, r.timestamp_ms, r.value) for r in read_all(self.log)]
        assert got == self.records

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


LogModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_log_matches_an_in_memory_model = LogModel.TestCase
