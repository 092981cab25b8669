"""A short transactional fault campaign (tests/faults/txn_campaign.py): librdkafka's
transactional producers committing and aborting on purpose, read_committed and
read_uncommitted readers, while nodes and the gateway are killed and paused, clients killed,
answers dropped and delayed on the Kafka port and bits flipped in replicas' files; valid when
the transactional checker finds none of Jepsen's anomalies and the cluster healed after each
cycle. `make fault-campaign WORKLOAD=transactions CYCLES=100` runs the long one."""

from __future__ import annotations

import pytest

from tests.faults.campaign import NETWORK_FAULTS, PROXY_FAULTS, CampaignConfig, run
from tests.faults.catalog import available_faults
from tests.faults.txn_checker import READ_COMMITTED, TxnVerdict

CYCLES = 8
# Met in every run where this machine can make them: a producer SIGKILLed (its transaction
# left to time out), answers lost on the Kafka port, a leader cut from its followers, the
# gateway (the transaction coordinator) SIGKILLed.
MUST_MEET = ("client-kill", "drop-answers", "partition-leader-from-followers", "gateway-kill")


@pytest.mark.long  # a fault campaign
@pytest.mark.slow
def test_a_short_transactional_fault_campaign_leaves_a_valid_history(tmp_path):
    available = available_faults()
    opening = [name for name in MUST_MEET if name in available]
    faults = ["node-kill", "node-pause", "gateway-kill", "client-kill", "disk-bitflip"]
    faults += [n for n in available if n in NETWORK_FAULTS or n in PROXY_FAULTS]
    config = CampaignConfig(
        cycles=CYCLES,
        seed=54,
        faults=faults,
        opening=opening,
        network_prefix="sgtxn",
        subnet_octet=237,  # 231: make fault-campaign; 232-234: the lab's tests; 236: records
        workload="transactions",
    )
    report = run(tmp_path, config)
    print(report.summary())
    verdict = report.verdict
    assert isinstance(verdict, TxnVerdict)
    print("\n".join(verdict.details()))
    assert report.cycles == CYCLES
    for name in opening:
        assert report.faults[name] >= 1, report.summary()
    # Enough happened for the verdict to mean something: commits, aborts whose writes
    # reached the log (read_committed readers had to skip them), reads of both kinds.
    assert verdict.txns["committed"] > 50, report.summary()
    assert verdict.txns["aborted-in-log"] > 5, report.summary()
    assert verdict.reads[READ_COMMITTED] > 100, report.summary()
    assert verdict.final_records[READ_COMMITTED] > 0, report.summary()
    assert verdict.lso_observations > 10, report.summary()
    assert verdict.ok, report.summary()
    assert report.passed, report.summary()  # and the cluster healed after every cycle
