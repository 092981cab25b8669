"""Tiered topics on a real cluster beside a real S3 store (SeaweedFS), shared by the tiered
read tests: a two-node cluster copying quickly, a topic whose rolled segments are all copied
and deleted locally, its expected records, and Kafka ListOffsets on the wire."""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from seglog.client.gateway import FetchPosition
from seglog.errors import LeaderNotAvailableError, NotLeaderError
from seglog.storage.remote_metadata import RemoteLogMetadata
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_for

BASE_MS = 1_700_000_000_000
RECORDS_PER_BATCH = 4
BATCHES = 150  # 600 records over ~12 segments of 4 KiB
REMOTE_WAIT_MS = 400  # remote.fetch.max.wait.ms on these nodes
TIMEOUT_S = 20


def tiered_cluster(directory, seaweedfs, prefix: str) -> LocalCluster:
    """Two nodes copying and reading tiered topics quickly: short passes and backoffs, a
    short remote.fetch.max.wait.ms, and few reader threads (so a stalled store fills them)."""
    return LocalCluster(
        directory,
        nodes=2,
        node_configs={"retention.check.interval.ms": "100"},
        remote_storage=seaweedfs.storage_config(prefix),
        node_settings={
            "remote_log_manager_task_interval_ms": 100,
            "remote_log_manager_task_retry_backoff_ms": 100,
            "remote_log_manager_task_retry_backoff_max_ms": 400,
            "remote_fetch_max_wait_ms": REMOTE_WAIT_MS,
            "remote_log_reader_threads": 2,
            "remote_log_reader_max_pending_tasks": 2,
        },
    )


def value(batch: int, record: int) -> bytes:
    return b"batch-%04d-record-%d-" % (batch, record) + b"x" * 80


def tiered_topic(cluster, store, topic: str, replicas: int = 2, write=None) -> int:
    """A topic of BATCHES batches (batch i at BASE_MS + i; `write(cluster, topic)` writes
    them when given), its rolled segments copied by the leader and deleted from its disk
    (local.retention.bytes=1: only the active segment stays); the local log start now."""
    cluster.admin.create_topic(
        topic,
        1,
        replicas,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",  # the records are from 2023: kept whatever their age
            "segment.bytes": "4096",
            "index.interval.bytes": "512",
            "file.delete.delay.ms": "0",
        },
    )
    (write or produce)(cluster, topic)
    total = BATCHES * RECORDS_PER_BATCH
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)

    def tiered() -> bool:
        start = log.log_start_offset
        return (
            log.high_watermark == total
            and start == log.segments[-1].base_offset
            and metadata.log_start_offset(topic_id, 0) == 0
            and metadata.remote_end_offset(topic_id, 0) == start - 1
        )

    wait_for(
        tiered,
        TIMEOUT_S,
        "rolled segments copied and deleted locally",
        lambda: f"local start {log.log_start_offset}, segments {len(log.segments)}",
        interval_s=0.2,  # each poll LISTs the store: the nodes in this process share the GIL
    )
    return log.log_start_offset


def produce(cluster, topic: str, batches: range = range(BATCHES)) -> None:
    """Each batch written once. A leader not yet (or no longer) known is waited out, as a
    client retries it: on a loaded machine a new topic's leader, or a node's session, can
    lag the create (nothing was written then, so trying again cannot duplicate)."""
    for i in batches:
        values = [value(i, j) for j in range(RECORDS_PER_BATCH)]
        batch = make_batch(values, timestamp_ms=BASE_MS + i)
        answers = []

        def written(batch: bytes = batch, answers: list = answers) -> bool:
            try:
                answers.append(cluster.client.produce(topic, {0: batch}))
            except (LeaderNotAvailableError, NotLeaderError):
                return False
            return True

        wait_for(written, TIMEOUT_S, f"batch {i} of {topic} written")
        assert answers[-1][0].error == 0


def expected() -> list[bytes]:
    return [value(i, j) for i in range(BATCHES) for j in range(RECORDS_PER_BATCH)]


def fetch_answer(cluster, topic: str, offset: int):
    return next(iter(cluster.client.fetch([FetchPosition(topic, 0, offset, 4096)], max_wait_ms=0)))


def list_offset(cluster, topic: str, timestamp: int, version: int = 9):
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp
    )
    request = ListOffsetsRequest[version](
        replica_id=-1,
        isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition])],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, version, ListOffsetsResponse).topics[0].partitions[0]
    return answer.error_code, answer.offset, answer.timestamp
