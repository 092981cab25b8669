"""The Kafka listener's API registry (services/gateway/kafka/apis.py) and README's table of
it: the table README shows is the one the registry prints, every API the listener serves has
a row, and the registry is built without a gateway (handlers take their core from the call)."""

from __future__ import annotations

from pathlib import Path

from devtools.readme_tables import KAFKA_API_NOTES, kafka_api_markdown
from services.gateway.kafka.apis import kafka_api_table

ROOT = Path(__file__).resolve().parents[2]


def test_every_served_api_has_a_row_and_every_note_an_api():
    entries = kafka_api_table().entries()
    table = kafka_api_markdown()
    for entry in entries:
        assert f"| {entry.name} | {entry.api_key} |" in table
    names = {entry.name for entry in entries}
    assert set(KAFKA_API_NOTES) <= names, set(KAFKA_API_NOTES) - names
    # The areas' APIs (groups, quotas, reassignments among them), each once by api key.
    assert {"JoinGroup", "OffsetCommit", "DescribeClientQuotas", "ElectLeaders"} <= names
    assert len({entry.api_key for entry in entries}) == len(entries)
