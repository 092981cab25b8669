"""A short fault campaign (tests/faults/campaign.py) as part of the suite: a real cluster of
processes, real client processes recording their histories, a seeded schedule of faults, and
the history checker's verdict as the only pass/fail. `make fault-campaign` runs a longer one.

The schedule includes a network partition and dropped answers whenever this machine and work
tree can make them (root and tests/faults/netns.py; tests/faults/proxy.py)."""

from __future__ import annotations

from tests.faults.campaign import (
    NETWORK_FAULTS,
    PROXY_FAULTS,
    CampaignConfig,
    available_faults,
    run,
)

CYCLES = 6


def short_schedule_faults() -> list[str]:
    """A few process faults, and every network and answer fault available: the short
    campaign must meet a partition and a dropped answer when it can make them."""
    available = available_faults()
    chosen = ["node-kill", "node-pause", "gateway-kill"]
    return chosen + [n for n in available if n in NETWORK_FAULTS or n in PROXY_FAULTS]


def test_a_short_fault_campaign_leaves_a_valid_history(tmp_path):
    faults = short_schedule_faults()
    report = run(tmp_path, CampaignConfig(cycles=CYCLES, seed=12, faults=faults))
    print(report.summary())
    assert report.verdict is not None
    print("\n".join(report.verdict.details()))
    assert report.cycles == CYCLES
    assert report.verdict.sends["ok"] > 300, report.summary()
    assert report.verdict.final_records > 0, report.summary()
    assert report.verdict.ok, report.summary()
