"""A short Kafka Streams fault campaign (tests/faults/streams_campaign.py): the exactly_once_v2
word count as two instances of two stream threads over the campaign's 3-partition topic, while
nodes and the gateway are killed and paused, instances, producers and readers SIGKILLed,
answers dropped on the Kafka port and leaders cut from their followers; valid when every
word's committed counts are exactly 1..N in every reader and the final output equals the
input's counts (tests/faults/streams_checker.py), and the cluster healed after each cycle.
`make fault-campaign WORKLOAD=streams CYCLES=30` runs the long one."""

from __future__ import annotations

import pytest

from tests.faults.campaign import NETWORK_FAULTS, PROXY_FAULTS, CampaignConfig, run
from tests.faults.catalog import available_faults
from tests.faults.streams_checker import StreamsVerdict

CYCLES = 4
# Met in every run where this machine can make them: an instance (or another client)
# SIGKILLed, the gateway (the transaction and group coordinator) SIGKILLed, a storage node
# SIGKILLed, answers lost on the Kafka port.
MUST_MEET = ("client-kill", "gateway-kill", "node-kill", "drop-answers")


@pytest.mark.long  # a fault campaign
@pytest.mark.slow
@pytest.mark.timeout(1200)  # two JVMs starting, and catching up after the last fault
def test_a_short_streams_fault_campaign_counts_every_word_exactly(tmp_path):
    available = available_faults()
    opening = [name for name in MUST_MEET if name in available]
    faults = ["node-kill", "node-pause", "gateway-kill", "client-kill"]
    faults += [n for n in available if n in NETWORK_FAULTS or n in PROXY_FAULTS]
    config = CampaignConfig(
        cycles=CYCLES,
        seed=54,
        faults=faults,
        opening=opening,
        network_prefix="sgstrm",
        subnet_octet=241,  # 231: make fault-campaign; 232-234: the lab's; 236-237: the others
        workload="streams",
    )
    report = run(tmp_path, config)
    print(report.summary())
    verdict = report.verdict
    assert isinstance(verdict, StreamsVerdict)
    print("\n".join(verdict.details()))
    assert report.cycles == CYCLES
    for name in opening:
        assert report.faults[name] >= 1, report.summary()
    # Enough happened for the verdict to mean something: input counted through the faults,
    # read by the running readers and by the final one.
    assert verdict.counted > 1000, report.summary()
    assert verdict.output_records == verdict.counted, report.summary()
    assert verdict.readers >= 3, report.summary()
    assert verdict.ok, report.summary()
    assert report.passed, report.summary()  # and the cluster healed after every cycle
