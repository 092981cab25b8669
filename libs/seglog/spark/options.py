"""The Spark source's and sink's options, as Spark's Kafka source names them, parsed and
checked whole when a DataFrame is defined (`load()`, `save()`, `start()`), so a typo fails
there with the option's name rather than in a task.

Spark hands every option over as a lower-cased string (`.option("n", 5)` arrives as "5"),
so each is parsed here; names are matched without regard to case, as Spark matches them.

Offsets in JSON are Kafka's: `{"topic": {"0": 23, "1": -2}}`, with -2 for earliest and -1
for latest; `assign` is `{"topic": [0, 1]}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..client.gateway import default_bootstrap
from ..storage.remote_store import RemoteStorageConfig

EARLIEST = -2
LATEST = -1

# A task reads at most about this many bytes of one partition unless minPartitions asks for
# smaller pieces (Spark's own file sources cut at 128 MiB: spark.sql.files.maxPartitionBytes).
DEFAULT_MAX_BYTES_PER_TASK = 128 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 30_000

# Options Spark itself adds or passes through to every source or sink.
_SPARK_OWN = {"path", "checkpointlocation", "queryname"}

_READ_OPTIONS = {
    "bootstrap",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "maxbytespertask",
    "requesttimeoutms",
    "fetchtransport",
    *(f"remotestorage.{name}" for name in ("endpoint", "bucket", "prefix", "region")),
    "remotestorage.accesskeyid",
    "remotestorage.secretaccesskey",
}

_WRITE_OPTIONS = {"bootstrap", "topic", "includeheaders", "requesttimeoutms"}
PRODUCER_PREFIX = "producer."


class OptionError(ValueError):
    """An option that is unknown, malformed, or not allowed with the others."""


# An offsets spec: "earliest", "latest", or per partition (topic, partition) -> offset
# (-2 earliest, -1 latest) or timestamp.
OffsetSpec = str | dict[tuple[str, int], int]


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    # Exactly one of the three says which partitions are read.
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    # A timestamp for every partition (startingTimestamp) or per partition; they win over
    # the offsets above, as in Spark.
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[tuple[str, int], int] | None = None
    ending_by_timestamp: dict[tuple[str, int], int] | None = None
    # "error": no record that late fails the query; "latest": start at the latest offset.
    by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_bytes_per_task: int = DEFAULT_MAX_BYTES_PER_TASK
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    fetch_transport: str = "auto"
    # The object store a tiered topic's older segments are in (remoteStorage.* options):
    # given, tasks read those segments straight from it; None, everything through the cluster.
    remote_storage: RemoteStorageConfig | None = None


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    include_headers: bool
    request_timeout_ms: int
    # Producer settings (`producer.acks`, `producer.linger_ms`, ...), as the Producer takes
    # them: Spark's Kafka sink passes `kafka.*` through the same way.
    producer: dict[str, object]


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """The source's options; `streaming` None checks only what holds for both kinds of read
    (the schema is asked for before Spark says which kind it is)."""
    given = {k.lower(): v for k, v in options.items()}
    unknown = sorted(set(given) - _READ_OPTIONS - _SPARK_OWN)
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for the seglog source; it takes "
            f"{', '.join(sorted(_READ_OPTIONS))}"
        )
    if given.get("path"):
        raise OptionError(
            "the seglog source reads topics named by subscribe, subscribePattern or assign, "
            f"not a path ({given['path']!r})"
        )
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if name in given]
    if len(chosen) != 1:
        raise OptionError(
            "exactly one of the options subscribe, subscribePattern and assign must be given"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: tuple[tuple[str, int], ...] = ()
    if "subscribe" in given:
        subscribe = tuple(t.strip() for t in given["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe names no topic")
    elif "subscribepattern" in given:
        pattern = given["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"option subscribePattern is not a regular expression: {exc}"
            ) from None
    else:
        assign = _parse_assign(given["assign"])

    starting = _parse_offsets("startingOffsets", given.get("startingoffsets"))
    ending = _parse_offsets("endingOffsets", given.get("endingoffsets"))
    if streaming is None:
        pass
    elif streaming:
        if "endingoffsets" in given or "endingoffsetsbytimestamp" in given:
            raise OptionError("endingOffsets and endingOffsetsByTimestamp are for batch reads")
        if "endingtimestamp" in given:
            raise OptionError("endingTimestamp is for batch reads")
        if starting is None:
            starting = "latest"
    else:
        if "maxoffsetspertrigger" in given:
            raise OptionError("maxOffsetsPerTrigger is for streaming reads")
        if starting is None:
            starting = "earliest"
        if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
            raise OptionError("startingOffsets cannot be latest (-1) for a batch read")
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise OptionError("endingOffsets cannot be earliest (-2) for a batch read")
    strategy = given.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}"
        )
    transport = given.get("fetchtransport", "auto").lower()
    if transport not in ("auto", "bulk", "grpc"):
        raise OptionError(f"option fetchTransport must be auto, bulk or grpc, not {transport!r}")
    return ReadOptions(
        bootstrap=given.get("bootstrap") or default_bootstrap(),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting if starting is not None else "earliest",
        ending=ending if ending is not None else "latest",
        starting_timestamp=_parse_int(given, "startingtimestamp", "startingTimestamp", 0),
        ending_timestamp=_parse_int(given, "endingtimestamp", "endingTimestamp", 0),
        starting_by_timestamp=_parse_timestamps(
            "startingOffsetsByTimestamp", given.get("startingoffsetsbytimestamp")
        ),
        ending_by_timestamp=_parse_timestamps(
            "endingOffsetsByTimestamp", given.get("endingoffsetsbytimestamp")
        ),
        by_timestamp_strategy=strategy,
        max_offsets_per_trigger=_parse_int(
            given, "maxoffsetspertrigger", "maxOffsetsPerTrigger", 1
        ),
        min_partitions=_parse_int(given, "minpartitions", "minPartitions", 1),
        fail_on_data_loss=_parse_bool(given, "failondataloss", "failOnDataLoss", True),
        include_headers=_parse_bool(given, "includeheaders", "includeHeaders", False),
        max_bytes_per_task=_parse_int(given, "maxbytespertask", "maxBytesPerTask", 1)
        or DEFAULT_MAX_BYTES_PER_TASK,
        request_timeout_ms=_parse_int(given, "requesttimeoutms", "requestTimeoutMs", 1)
        or DEFAULT_REQUEST_TIMEOUT_MS,
        fetch_transport=transport,
        remote_storage=_parse_remote_storage(given),
    )


def _parse_remote_storage(given: Mapping[str, str]) -> RemoteStorageConfig | None:
    """remoteStorage.endpoint, .bucket, .accessKeyId, .secretAccessKey (all four, or none),
    .prefix and .region: the store and credentials the cluster's nodes were given."""
    names = {
        "endpoint": "remotestorage.endpoint",
        "bucket": "remotestorage.bucket",
        "access_key_id": "remotestorage.accesskeyid",
        "secret_access_key": "remotestorage.secretaccesskey",
    }
    present = {field: given[key] for field, key in names.items() if given.get(key)}
    extras = [k for k in ("remotestorage.prefix", "remotestorage.region") if k in given]
    if not present and not extras:
        return None
    missing = [key for field, key in names.items() if field not in present]
    if missing:
        raise OptionError(
            "reading tiered segments straight from the object store needs the options "
            "remoteStorage.endpoint, remoteStorage.bucket, remoteStorage.accessKeyId and "
            f"remoteStorage.secretAccessKey; missing: {', '.join(missing)}"
        )
    if not present["endpoint"].startswith(("http://", "https://")):
        raise OptionError(
            f"option remoteStorage.endpoint must be an http(s) URL, not {present['endpoint']!r}"
        )
    return RemoteStorageConfig(
        endpoint_url=present["endpoint"],
        bucket=present["bucket"],
        access_key_id=present["access_key_id"],
        secret_access_key=present["secret_access_key"],
        prefix=given.get("remotestorage.prefix", ""),
        region=given.get("remotestorage.region") or "us-east-1",
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    given = {k.lower(): v for k, v in options.items()}
    unknown = sorted(
        k for k in set(given) - _WRITE_OPTIONS - _SPARK_OWN if not k.startswith(PRODUCER_PREFIX)
    )
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for the seglog sink; it takes "
            f"{', '.join(sorted(_WRITE_OPTIONS))} and producer.<setting>"
        )
    if given.get("path"):
        raise OptionError(
            f"the seglog sink writes to the option topic, not a path ({given['path']!r})"
        )
    producer: dict[str, object] = {}
    for name, value in given.items():
        if name.startswith(PRODUCER_PREFIX):
            producer[name[len(PRODUCER_PREFIX) :]] = _producer_value(value)
    return WriteOptions(
        bootstrap=given.get("bootstrap") or default_bootstrap(),
        topic=given.get("topic") or None,
        include_headers=_parse_bool(given, "includeheaders", "includeHeaders", False),
        request_timeout_ms=_parse_int(given, "requesttimeoutms", "requestTimeoutMs", 1)
        or DEFAULT_REQUEST_TIMEOUT_MS,
        producer=producer,
    )


def _producer_value(text: str) -> object:
    """Producer settings arrive as strings: numbers and booleans are turned back."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(lowered)
    except ValueError:
        return text


def _parse_int(given: Mapping[str, str], key: str, name: str, minimum: int) -> int | None:
    if key not in given:
        return None
    try:
        value = int(given[key].strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {given[key]!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _parse_bool(given: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    if key not in given:
        return default
    value = given[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {given[key]!r}")
    return value == "true"


def _load_json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}): {text!r}") from None


def _parse_assign(text: str) -> tuple[tuple[str, int], ...]:
    loaded = _load_json("assign", text)
    if not isinstance(loaded, dict) or not loaded:
        raise OptionError(f'option assign must be a JSON object like {{"topic": [0, 1]}}: {text!r}')
    out = []
    for topic, partitions in loaded.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(f"option assign: topic {topic!r} needs a list of partition numbers")
        out += [(topic, p) for p in partitions]
    return tuple(sorted(set(out)))


def _parse_partition_map(name: str, text: str) -> dict[tuple[str, int], int]:
    loaded = _load_json(name, text)
    if not isinstance(loaded, dict):
        raise OptionError(f'option {name} must be a JSON object like {{"topic": {{"0": 5}}}}')
    out = {}
    for topic, per_partition in loaded.items():
        if not isinstance(per_partition, dict):
            raise OptionError(f"option {name}: topic {topic!r} needs an object of partitions")
        for partition, value in per_partition.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(f"option {name}: {partition!r} is not a partition") from None
            if not isinstance(value, int) or isinstance(value, bool) or number < 0:
                raise OptionError(f"option {name}: {topic}-{partition} needs an integer")
            out[(topic, number)] = value
    return out


def _parse_offsets(name: str, text: str | None) -> OffsetSpec | None:
    if text is None:
        return None
    if text.strip().lower() in ("earliest", "latest"):
        return text.strip().lower()
    offsets = _parse_partition_map(name, text)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"option {name}: {topic}-{partition} offset {offset} is neither >= 0, "
                "-1 (latest) nor -2 (earliest)"
            )
    return offsets


def _parse_timestamps(name: str, text: str | None) -> dict[tuple[str, int], int] | None:
    if text is None:
        return None
    timestamps = _parse_partition_map(name, text)
    for (topic, partition), timestamp in timestamps.items():
        if timestamp < 0:
            raise OptionError(f"option {name}: {topic}-{partition} timestamp {timestamp} < 0")
    return timestamps
