"""A data directory's identity, as Kafka's `meta.properties` (Kafka's MetaProperties, version
1): which cluster the directory's partitions belong to, which node it is, and the directory's
own id. A node writes it when it first registers and checks it at every start, so a node can
never be taken over by the registry of another cluster (services/storage_node/
cluster_identity.py).

The file is a Java properties file, byte for byte what Kafka's broker writes (its
PropertiesUtils.writePropertiesFile: `Properties.store` with an empty comment):

    #
    #Tue Dec 01 21:25:42 UTC 2026
    cluster.id=Vw0MOr7cTMqUabAmiOSm4g
    directory.id=2RZ3JhbZQbmdU0GttBnN3Q
    node.id=1
    version=1

`cluster.id` and `directory.id` are Kafka Uuids: 16 random bytes in URL-safe base64 without
padding (22 characters), never one of the reserved ids (all zero; a directory id's first 8
bytes zero and last below 100) and never starting with '-' (it would read as a command-line
flag). Unknown keys are kept by Kafka and ignored here.

Written as Kafka writes it: a temporary file, fsync, rename over the old one, fsync of the
directory, so a crash leaves the old file or the new one. Anything else found there (a torn
write by other means, garbage, a missing key, an id that is not 16 bytes) is an error naming
the file and what is wrong with it, never read as "no identity".
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import javaproperties

from ..errors import StorageError
from .log_files import atomic_write

META_PROPERTIES = "meta.properties"
VERSION = 1
_UUID_BYTES = 16
_UUID_CHARS = 22  # 16 bytes in base64 without its two padding characters
# A file larger than this is not a meta.properties (Kafka's is about 100 bytes).
_MAX_FILE_BYTES = 64 * 1024


class MetaPropertiesError(StorageError):
    """A meta.properties that cannot be read as one: the node does not start on it."""

    retriable = False


def random_uuid() -> str:
    """A Kafka Uuid (Uuid.randomUuid, DirectoryId.random): 16 random bytes, URL-safe base64
    without padding, not reserved, not starting with '-'."""
    while True:
        raw = secrets.token_bytes(_UUID_BYTES)
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        high, low = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
        if not text.startswith("-") and not (high == 0 and low < 100):
            return text


def check_uuid(text: str, what: str) -> str:
    """`text` if it is a Kafka Uuid's string form, else ValueError naming `what`."""
    if len(text) != _UUID_CHARS:
        raise ValueError(f"{what} {text!r} is not a Kafka id ({_UUID_CHARS} characters)")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} {text!r} is not URL-safe base64") from None
    if len(raw) != _UUID_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        raise ValueError(f"{what} {text!r} does not encode {_UUID_BYTES} bytes")
    return text


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str

    def __post_init__(self) -> None:
        check_uuid(self.cluster_id, "cluster.id")
        check_uuid(self.directory_id, "directory.id")
        if self.node_id < 0:
            raise ValueError(f"node.id {self.node_id} is negative")

    def to_properties(self) -> dict[str, str]:
        return {
            "version": str(VERSION),
            "cluster.id": self.cluster_id,
            "node.id": str(self.node_id),
            "directory.id": self.directory_id,
        }


def path_of(data_dir: Path) -> Path:
    return data_dir / META_PROPERTIES


def read(data_dir: Path) -> MetaProperties | None:
    """The directory's identity; None when it has no meta.properties (a directory never
    registered). MetaPropertiesError for a file that is not a whole, valid one."""
    path = path_of(data_dir)
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc}") from exc
    if len(data) > _MAX_FILE_BYTES:
        raise MetaPropertiesError(
            f"{path} is over {_MAX_FILE_BYTES} bytes: not a meta.properties {_way_out(path)}"
        )
    try:
        # Java's properties files are ISO 8859-1 with \u escapes; ids and numbers are ASCII.
        props = javaproperties.loads(data.decode("latin-1"))
    except ValueError as exc:
        raise MetaPropertiesError(
            f"{path} is not a properties file ({exc}) {_way_out(path)}"
        ) from None
    missing = [k for k in ("version", "cluster.id", "node.id", "directory.id") if k not in props]
    if missing:
        raise MetaPropertiesError(
            f"{path} lacks {', '.join(missing)}: torn or not a meta.properties {_way_out(path)}"
        )
    if props["version"] != str(VERSION):
        raise MetaPropertiesError(
            f"{path} is version {props['version']!r}; this node reads version {VERSION}"
        )
    try:
        node_id = int(props["node.id"])
        return MetaProperties(props["cluster.id"], node_id, props["directory.id"])
    except ValueError as exc:
        raise MetaPropertiesError(f"{path}: {exc} {_way_out(path)}") from None


def write(data_dir: Path, meta: MetaProperties) -> None:
    """Replace the directory's meta.properties atomically and durably."""
    text = javaproperties.dumps(meta.to_properties(), comments="", sort_keys=True)
    atomic_write(path_of(data_dir), text.encode("latin-1"))


def new_identity(cluster_id: str, node_id: int) -> MetaProperties:
    return MetaProperties(cluster_id, node_id, random_uuid())


def _way_out(path: Path) -> str:
    return (
        f"(if the directory's partitions are this node's, write it again with this node's "
        f"cluster.id and node.id, or move {path.name} aside and let the node register)"
    )


def holds_partitions(data_dir: Path) -> bool:
    """Whether the directory holds any partition directory (`<topic>-<partition>`)."""
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return False
    for entry in entries:
        topic, sep, partition = entry.name.rpartition("-")
        if entry.is_dir() and sep and topic and partition.isdigit():
            return True
    return False
