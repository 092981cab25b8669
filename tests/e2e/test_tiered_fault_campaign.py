"""A short fault campaign with a tiered topic (tests/faults/tiered_campaign.py, issue 56): a
real SeaweedFS beside the cluster, a topic whose segments are copied to it and deleted from
the nodes while nodes, the gateway and the store itself fail (killed, slow, answering 503);
it passes when both topics' histories are valid, the copies went on after the faults, and
the tiered topic was read back from offset 0 through the store's segments.
`make fault-campaign TIERED=1` runs a longer one."""

from __future__ import annotations

import pytest

from tests.faults.campaign import NETWORK_FAULTS, CampaignConfig, run
from tests.faults.catalog import STORE_FAULTS, available_faults
from tests.faults.tiered_campaign import REREAD_EVERY_CYCLES

CYCLES = REREAD_EVERY_CYCLES + 1  # a consumer reads from offset 0 under the last faults


@pytest.mark.long  # a fault campaign
@pytest.mark.slow
def test_a_short_tiered_fault_campaign_loses_nothing_through_store_faults(tmp_path):
    opening = list(STORE_FAULTS)  # each store fault met at least once
    faults = ["node-kill", "node-pause", "gateway-kill", *STORE_FAULTS]
    faults += [n for n in available_faults() if n in NETWORK_FAULTS]
    config = CampaignConfig(
        cycles=CYCLES,
        seed=56,
        faults=faults,
        opening=opening,
        tiered=True,
        network_prefix="sgtiered",
        subnet_octet=238,  # 231: make fault-campaign; 232-234: the lab's tests; 236: the suite's
    )
    report = run(tmp_path, config)
    print(report.summary())
    assert report.cycles == CYCLES
    for name in opening:
        assert report.faults[name] >= 1, report.summary()
    assert report.tiered_verdict is not None, report.summary()
    print("\n".join(report.tiered_verdict.details()))
    assert report.tiered_verdict.sends["ok"] > 300, report.summary()
    assert report.tiered_verdict.final_records >= report.tiered_verdict.sends["ok"]
    assert report.tiered_verdict.ok, report.summary()
    assert any("reads campaign-tiered from offset 0" in s for s in report.schedule)
    # copies went on after the last fault, and every partition's start is only in the store
    assert report.passed, report.summary()
