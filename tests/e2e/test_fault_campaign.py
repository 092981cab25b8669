"""A short fault campaign (tests/fault_campaign.py) as part of the suite: real processes,
SIGKILL, SIGSTOP/SIGCONT and SIGTERM of random nodes, leaders included; `make
fault-campaign` runs a longer one."""

from __future__ import annotations

from tests.fault_campaign import run


def test_acknowledged_records_survive_a_fault_campaign_exactly_once(tmp_path):
    report = run(tmp_path, cycles=6, seed=12)
    print(report.summary())
    assert report.cycles == 6
    assert report.acknowledged > 300
    assert not report.lost, report.lost[:5]
    assert not report.duplicates, report.duplicates[:5]
    assert not report.out_of_order, report.out_of_order[:5]
    assert not report.vanished, report.vanished[:5]
    assert not report.divergent_replicas, report.divergent_replicas
