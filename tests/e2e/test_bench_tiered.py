"""The tiered group's harness at a tiny size, so it cannot rot: a real SeaweedFS, a gateway and
a storage node as processes, the cold topic tiered and the hot one local, the cold read and
Spark's direct and brokers reads (one executor) each reported with a positive figure."""

from __future__ import annotations

import pytest

from bench import tiered

pytestmark = pytest.mark.long


def test_the_tiered_group_runs_and_reports_every_figure(monkeypatch):
    monkeypatch.setattr(tiered, "TOTAL_BYTES", 8 * tiered.MIB)
    monkeypatch.setattr(tiered, "SPARK_BYTES", 8 * tiered.MIB)
    monkeypatch.setattr(tiered, "SEGMENT_BYTES", 512 * 1024)
    monkeypatch.setattr(tiered, "EXECUTORS", (1,))
    monkeypatch.setattr(tiered, "ROUNDS", 1)
    reported: dict[str, tuple[float, float]] = {}

    def report(name, figure, baseline, unit, target, **_):
        reported[name] = (figure, baseline)

    tiered.run(report)
    assert len(reported) == 2, reported
    assert all(figure > 0 and baseline > 0 for figure, baseline in reported.values())
