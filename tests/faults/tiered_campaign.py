"""The tiered topic's part in a fault campaign (campaign.py calls it with `--tiered`, issue
56): a real S3 store (SeaweedFS, devtools/seaweedfs.py) beside the cluster, reached by the
nodes through an S3 fault proxy (tests/s3_fault_proxy.py) so that store_faults.py can make it
slow or failing; one topic with remote.storage.enable=true whose small segments are copied to
the store and deleted from the nodes' disks while the faults run; producers and a group
consumer of the records workload on it, their histories in `history/tiered` (judged by the
same independent checker, apart from the main topic's); and every few cycles a consumer of a
fresh group, which reads from offset 0 through the copied (remote) segments into the local
ones while faults go on.

At the end: the copies must have gone on after the last fault (each partition's remote end
offset moves past where it stood when the cycles ended), every partition must have data
only the store holds (its local log start above 0), and the final reader reads each
partition from offset 0, through remote data, to its end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from devtools.seaweedfs import ACCESS_KEY_ID, BUCKET, SECRET_ACCESS_KEY, SeaweedProcess
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStore
from tests.faults.clients import ClientProcess, Clients
from tests.kafka_wire import KafkaWire
from tests.s3_fault_proxy import S3FaultProxy
from tests.waiting import wait_until

TIERED_TOPIC = "campaign-tiered"
TIERED_PARTITIONS = 2
TIERED_GROUP = "campaign-tiered-readers"
HISTORY_SUBDIR = "tiered"
# Small segments, two of them kept locally: the workload's few KiB a second roll a segment
# every few seconds, so each partition copies and deletes many during a campaign.
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(32 * 1024),
    "local.retention.bytes": str(64 * 1024),
    "retention.ms": "-1",  # the total kept: nothing is deleted from the store
    "index.interval.bytes": "1024",
    "file.delete.delay.ms": "0",
}
# The nodes copy and apply retention often, and retry a failing store quickly (a backoff up
# to 4 s, below the store faults' longest hold), so copies catch up within a cycle.
NODE_CONFIGS = {
    "remote.log.manager.task.interval.ms": "500",
    "remote.log.manager.task.retry.backoff.ms": "200",
    "remote.log.manager.task.retry.backoff.max.ms": "4000",
    "retention.check.interval.ms": "1000",
}
GATEWAY_ARGS = ("--remote-log-storage-system-enable", "true")
REREAD_EVERY_CYCLES = 5
PRODUCER_INTERVAL_MS = 5.0
COPIES_TIMEOUT_S = 120.0
# ListOffsets' earliest-local timestamp (KIP-405, v8+): the partition's local log start.
EARLIEST_LOCAL_TIMESTAMP = -4


class TieredStore:
    """SeaweedFS (its data under `root/seaweedfs`) and the fault proxy in front of it, where
    the nodes reach the store: on loopback, or on the network lab's bridge address."""

    def __init__(self, root: Path, proxy_host: str = "127.0.0.1") -> None:
        self.weed = SeaweedProcess(root / "seaweedfs", log_path=root / "logs" / "seaweedfs.log")
        self.proxy: S3FaultProxy | None = None
        self.weed.start()
        try:
            self.proxy = S3FaultProxy(self.weed.endpoint_url, host=proxy_host)
        except BaseException:
            self.weed.stop()
            raise

    def node_args(self) -> list[str]:
        assert self.proxy is not None
        configs = [arg for k, v in NODE_CONFIGS.items() for arg in ("--config", f"{k}={v}")]
        return [
            "--remote-log-storage-endpoint", self.proxy.endpoint_url,
            "--remote-log-storage-bucket", BUCKET,
            "--remote-log-storage-access-key-id", ACCESS_KEY_ID,
            *configs,
        ]  # fmt: skip

    @staticmethod
    def node_env() -> dict[str, str]:
        """The secret in the environment, never on a command line."""
        return {"SEGLOG_REMOTE_LOG_STORAGE_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY}

    def metadata(self) -> RemoteLogMetadata:
        """The store's segment metadata, read straight from SeaweedFS (not through the
        proxy's faults), uncached."""
        return RemoteLogMetadata(RemoteStore(self.weed.storage_config()), cache_ms=0)

    def close(self) -> None:
        try:
            if self.proxy is not None:
                self.proxy.close()
        finally:
            self.weed.stop()


@dataclass(frozen=True)
class TieredState:
    """A tiered partition as the cluster and the store see it."""

    partition: int
    local_log_start: int  # -1: not known
    remote_end_offset: int  # -1: nothing copied


class TieredWorkload:
    """The tiered topic's clients: producers (one per transport) and a group consumer, and
    every REREAD_EVERY_CYCLES cycles a consumer of a fresh group reading from offset 0."""

    def __init__(
        self, root: Path, cluster: Any, store: TieredStore, history_dir: Path, producer_mode: str
    ) -> None:
        self.root = root
        self.cluster = cluster
        self.store = store
        self.history_dir = history_dir / HISTORY_SUBDIR
        self.history_dir.mkdir(parents=True, exist_ok=True)
        self.common = ["--topic", TIERED_TOPIC, "--history-dir", str(self.history_dir)]
        self.clients = Clients(
            root,
            producer_args=[
                *self.common,
                "--bootstrap", cluster.client_address,
                "--mode", producer_mode,
                "--interval-ms", str(PRODUCER_INTERVAL_MS),
            ],
            consumer_args=[
                *self.common, "--bootstrap", cluster.client_address, "--group", TIERED_GROUP
            ],
        )  # fmt: skip
        self.rereads = 0
        self.topic_id = ""
        self.final_states = ""  # the partitions' local starts and remote ends at the end

    def create_topic(self) -> None:
        self.cluster.admin.create_topic(TIERED_TOPIC, TIERED_PARTITIONS, 3, TOPIC_CONFIGS)
        (described,) = self.cluster.admin.describe_topics([TIERED_TOPIC])
        self.topic_id = described.topic_id

    def start(self) -> None:
        for _ in range(2):
            self.clients.start("producer")
        self.clients.start("consumer")

    def after_cycle(self, cycle: int, schedule: list[str], log: Callable[[str], None]) -> None:
        """Every few cycles a consumer of a new group, reading the topic from offset 0 (the
        store's segments first) while the next faults run; written in the schedule."""
        if cycle % REREAD_EVERY_CYCLES:
            return
        self.rereads += 1
        name = f"tiered-reread-{self.rereads}"
        args = [*self.clients.consumer_args, "--group", f"{TIERED_GROUP}-reread-{self.rereads}"]
        self.clients.consumers.append(ClientProcess(self.root, "consumer", name, args))
        schedule.append(f"cycle {cycle}: {name} reads {TIERED_TOPIC} from offset 0")
        log(schedule[-1])

    def states(self) -> list[TieredState]:
        metadata = self.store.metadata()
        local = self.local_log_starts()
        states = []
        for partition in range(TIERED_PARTITIONS):
            try:
                end = metadata.remote_end_offset(self.topic_id, partition)
            except Exception:  # the store away: nothing known copied
                end = None
            states.append(
                TieredState(partition, local.get(partition, -1), -1 if end is None else end)
            )
        return states

    def local_log_starts(self) -> dict[int, int]:
        """Each partition's local log start, as a Kafka client asks it (ListOffsets
        earliest-local, v9), from the first gateway; partitions answering an error left out."""
        topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest[9](
            replica_id=-1,
            isolation_level=0,
            topics=[
                topic(
                    name=TIERED_TOPIC,
                    partitions=[
                        topic.ListOffsetsPartition(
                            partition_index=p,
                            current_leader_epoch=-1,
                            timestamp=EARLIEST_LOCAL_TIMESTAMP,
                        )
                        for p in range(TIERED_PARTITIONS)
                    ],
                )
            ],
        )
        try:
            with KafkaWire(self.cluster.kafka_addresses[0]) as wire:
                answer = wire.request(request, 9, ListOffsetsResponse)
        except Exception:
            return {}
        return {
            p.partition_index: p.offset
            for topic in answer.topics
            for p in topic.partitions
            if p.error_code == 0
        }

    def stop_writing(self) -> list[str]:
        """Once the last fault healed: wait (producers still sending) until every partition
        copied past where it stood and has data only the store holds, then stop the
        producers; the problems found."""
        problem = self._wait_for_copies(self.states())
        self.clients.stop_producers()
        return [problem] if problem else []

    def _wait_for_copies(self, before: list[TieredState]) -> str | None:
        ends = {s.partition: s.remote_end_offset for s in before}

        def copied() -> bool:
            return all(
                s.remote_end_offset > ends[s.partition] and s.local_log_start > 0
                for s in self.states()
            )

        if wait_until(copied, COPIES_TIMEOUT_S, interval_s=1.0):
            return None
        return (
            f"tiered copies did not go on after the faults: before "
            f"{describe_states(before)}; now {describe_states(self.states())}"
        )

    def final_read(self, timeout_s: float) -> list[str]:
        """Every client stopped, the topic's partitions read from offset 0 (through the
        store's segments) to their ends; the problems found."""
        self.clients.stop_all()
        proxy = self.store.proxy
        faulted = f"; store requests failed or delayed {proxy.injected}" if proxy else ""
        self.final_states = describe_states(self.states()) + faulted
        reader = ClientProcess(
            self.root,
            "final-read",
            "tiered-final-read",
            [*self.common, "--bootstrap", self.cluster.address, "--max-seconds", str(timeout_s)],
        )
        if reader.wait(timeout_s + 30) != 0:
            return ["the tiered topic's final read did not reach every partition's end"]
        return []

    def stop_all(self) -> None:
        self.clients.stop_all()


def describe_states(states: list[TieredState]) -> str:
    return ", ".join(
        f"p{s.partition} local start {s.local_log_start} remote end {s.remote_end_offset}"
        for s in states
    )
