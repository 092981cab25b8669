"""How the campaign's clients (tests/faults/workload.py) classify a send's error: `info`
(unknown: it may have been written) for timeouts and retriable errors the producer gave up
on, `fail` (certainly not written) only for errors the cluster refused it with."""

from __future__ import annotations

import pytest

from seglog.client.config import ProducerConfig, from_kwargs
from seglog.errors import (
    InvalidRecordError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    OutOfOrderSequenceError,
    RegistryUnavailableError,
    RequestTimedOutError,
)
from tests.faults.workload import PRODUCER_MODES, outcome_of


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (RequestTimedOutError("expired"), "info"),
        (RegistryUnavailableError("no registry"), "info"),
        (NotLeaderError("moved"), "info"),
        (NotEnoughReplicasAfterAppendError("written, not replicated"), "info"),
        (ConnectionResetError("reset"), "info"),
        (OutOfOrderSequenceError("refused"), "fail"),
        (InvalidRecordError("refused"), "fail"),
    ],
)
def test_only_refusals_are_failures(error, outcome):
    assert outcome_of(error) == outcome


@pytest.mark.parametrize(
    ("mode", "acks", "idempotent"),
    [("idempotent", -1, True), ("plain", -1, False), ("acks1", 1, False)],
)
def test_each_producer_mode_configures_the_producer_it_names(mode, acks, idempotent):
    config = from_kwargs(ProducerConfig, dict(PRODUCER_MODES[mode]))
    assert (config.acks, config.enable_idempotence) == (acks, idempotent)
