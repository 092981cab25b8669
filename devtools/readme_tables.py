"""The docs' generated tables: each service's settings (declared on their config fields,
services/settings.py) and the Kafka APIs the listener serves (its registry,
services/gateway/kafka/apis.py). `python -m devtools.readme_tables` writes them, with the
CLI's reference, into docs/reference/ (devtools/reference_pages.py); tests keep the pages
equal to them.

Here, not beside what they print: the settings' module is imported by every service, and
the gateway's settings import the gateway's planes for their defaults, so a printer there
would tie the services' shared settings module into the gateway's imports.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from services.gateway.kafka.api_table import ApiEntry
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.settings import GatewayConfig
from services.settings import markdown_table
from services.storage_node.settings import NodeConfig

KAFKA_TABLE_MARK = "<!-- Kafka APIs: python -m devtools.readme_tables -->"

# What a client should know beside an API's versions: where seglog serves less than Kafka's
# broker or differently. Keyed by the API's name (ApiEntry.name); an API without a note
# gets none.
KAFKA_API_NOTES: Mapping[str, str] = {
    "Produce": "leader hints (KIP-951) from v10, topic ids from v13; transactional batches "
    "verified (KIP-890)",
    "Fetch": "fetch sessions (KIP-227); topic ids, KIP-516: by id from v13",
    "ListOffsets": (
        "earliest (the remote log start when tiered), latest (the LSO for read_committed), "
        "max timestamp, earliest local, latest tiered, by time"
    ),
    "InitProducerId": "idempotent and transactional producers (epoch bump, fencing)",
    "AddPartitionsToTxn": "v4+ the brokers' batched form, verify-only (KIP-890)",
    "EndTxn": "no transaction.version 2: v5 answers without an epoch bump",
    "Metadata": "topic ids, KIP-516: by id from v12",
    "CreateTopics": "no replica assignments: seglog places replicas; answers the topic id",
    "DeleteTopics": "by name, or by topic id from v6",
    "DescribeTopicPartitions": "topic ids and ELRs, paged by cursor",
    "CreatePartitions": "no replica assignments",
    "DeleteRecords": "the low watermark is the leader's new log start offset",
    "DescribeConfigs": (
        "topics; the gateway's settings as its broker, read-only, and its dynamic "
        "replication throttles; groups' configs"
    ),
    "AlterConfigs": "topics; brokers' replication throttles; groups' configs",
    "IncrementalAlterConfigs": (
        "topics; APPEND/SUBTRACT on list configs; brokers' replication throttles; groups' configs"
    ),
    "DescribeAcls": "topic, group, cluster and transactional id resources",
    "CreateAcls": "topic, group, cluster and transactional id resources",
    "DeleteAcls": "topic, group, cluster and transactional id resources",
    "SaslHandshake": "PLAIN, OAUTHBEARER, SCRAM-SHA-256, SCRAM-SHA-512",
    "ApiVersions": (
        "v3+: the features this release implements, as `kafka-features describe` prints them"
    ),
    "UpdateFeatures": "only to the levels this release has",
    "DescribeProducers": "from the leader's producer state",
    "ListConfigResources": "groups with configs; no client metrics subscriptions",
    "FindCoordinator": (
        "groups, transactional ids; batched keys from v4; share partitions (KIP-932) from v6"
    ),
    "ShareGroupHeartbeat": "share groups (KIP-932): the simple assignor",
    "ShareFetch": "records acquired under locks; state in __share_group_state",
    "DescribeShareGroupOffsets": "each partition's share-partition start offset and lag",
    "AlterShareGroupOffsets": "groups without members, as Kafka's",
    "DeleteShareGroupOffsets": "groups without members, as Kafka's",
    "ConsumerGroupHeartbeat": (
        "KIP-848: uniform and range assignors, regex subscriptions (RE2); no migration from "
        "or to classic groups"
    ),
    "ConsumerGroupDescribe": "KIP-848 groups; authorized operations are not computed",
    "OffsetCommit": "KIP-848 members from v9, checked against their member epoch",
}


def _versions(entry: ApiEntry) -> str:
    if entry.min_version == entry.max_version:
        return str(entry.min_version)
    return f"{entry.min_version}–{entry.max_version}"


def kafka_api_markdown() -> str:
    """The table of every API the listener serves, by api key (ApiVersions' order)."""
    rows = ["| API | key | versions | notes |", "|---|---|---|---|"]
    for entry in kafka_api_table().entries():
        note = KAFKA_API_NOTES.get(entry.name, "")
        rows.append(f"| {entry.name} | {entry.api_key} | {_versions(entry)} | {note} |")
    return "\n".join(rows) + "\n"


def settings_tables() -> Mapping[str, str]:
    """Each service's settings table, under the title the README gives it."""
    return {"gateway": markdown_table(GatewayConfig), "storage node": markdown_table(NodeConfig)}


def main() -> None:
    from devtools import reference_pages  # it imports this module

    if sys.argv[1:] == ["--check"]:  # make docs: a stale page fails, it is not rewritten
        sys.exit(reference_pages.check())
    reference_pages.write()


if __name__ == "__main__":
    main()
