"""A Kafka handler's unexpected exception (handler_guard.py, applied by the api table to every
handler): one log line naming the api, its version, the peer, the cause and where it was
raised, and the connection closed (a FrameError); what a handler raises on purpose passes."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from kafka.protocol.metadata import MetadataRequest

from seglog.errors import MemoryBudgetExhaustedError
from services.gateway.kafka.api_table import ApiTable
from services.gateway.kafka.framing import FrameError
from services.gateway.kafka.handler_guard import HandlerFailed
from services.gateway.kafka.kafka_call import ConnectionIdentity, ConnectionSession, KafkaCall
from services.gateway.kafka.sasl import SaslFailed


def a_call() -> KafkaCall:
    session = ConnectionSession(ConnectionIdentity("127.0.0.1", 40000), "127.0.0.1:9092")
    return KafkaCall(cast(Any, None), 3, 9, 7, "client", session)


def table_with(handler: Any) -> ApiTable:
    table = ApiTable()
    table.register(MetadataRequest, 0, 9, handler)
    return table


def test_an_unexpected_exception_is_one_line_naming_the_api_and_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(call: KafkaCall, request: Any) -> Any:
        return request.topics[0]  # None: not what the handler was written for

    entry = table_with(handler).entry(3)
    assert entry is not None
    with caplog.at_level(logging.INFO), pytest.raises(HandlerFailed) as failed:
        entry.handler(a_call(), MetadataRequest[9](topics=None))
    assert isinstance(failed.value, FrameError)  # the listener closes the connection
    [record] = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert record.levelno == logging.ERROR and not record.exc_info
    line = record.getMessage()
    assert "Kafka Metadata v9 from 127.0.0.1:40000 failed: TypeError" in line
    assert "test_kafka_handler_guard.py" in line and "in handler" in line
    assert "\n" not in line


@pytest.mark.parametrize("raised", [FrameError("refused"), SaslFailed(cast(Any, None))])
def test_what_a_handler_raises_on_purpose_passes(
    caplog: pytest.LogCaptureFixture, raised: Exception
) -> None:
    def handler(call: KafkaCall, request: Any) -> Any:
        raise raised

    entry = table_with(handler).entry(3)
    assert entry is not None
    with caplog.at_level(logging.INFO), pytest.raises(type(raised)) as passed:
        entry.handler(a_call(), MetadataRequest[9](topics=None))
    assert passed.value is raised
    assert not caplog.records


def test_the_memory_budget_running_out_closes_as_a_refusal_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(call: KafkaCall, request: Any) -> Any:
        raise MemoryBudgetExhaustedError("the pool is full")

    entry = table_with(handler).entry(3)
    assert entry is not None
    with caplog.at_level(logging.INFO), pytest.raises(FrameError) as refused:
        entry.handler(a_call(), MetadataRequest[9](topics=None))
    assert not isinstance(refused.value, HandlerFailed)
    assert "the pool is full" in str(refused.value)
    assert not caplog.records
