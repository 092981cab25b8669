"""How a registry gets its cluster id, once (as a KRaft cluster's id is made when its storage
is formatted), and how a registry moves between backends without stranding any node's data.

A registry without a cluster id when its gateway starts is bootstrapped (`plan`):

- On etcd, empty, with a file registry in the gateway's data dir (`make run`, then
  `make run ETCD=1` on the same data): the file registry's whole image is copied in as the
  first batch — topics, partitions with their replicas, leaders, epochs and ISRs, configs,
  ACLs, client quotas, producer ids, node records and the cluster id (made now if the file
  registry predates ids) — its cluster record saying `adopted_from` {backend: "file",
  offset}. Then the file registry is moved aside (`metadata.moved-to-etcd`), so the copy is
  made once and the stale file registry is never served again. Consumer groups' offsets
  live in `__consumer_offsets` on the nodes, not in the registry: they come with the data.
- Otherwise a new random id: a fresh cluster, or a registry from before cluster ids (its
  nodes, which it registered before, adopt the id).

Topics made before topic ids (KIP-516) get theirs the same way, once: the first gateway to
start on such a registry stores a topic record with a new id for each (another gateway doing
the same meanwhile finds its write stale, reloads, and sees the ids), and nodes are sent the
ids with their partitions' states.

Refused, the gateway not starting (RegistryConflictError, naming the way out):
- on etcd, a file registry in the data dir beside an etcd registry that was not copied from
  it: two registries, and which one holds the cluster is the operator's call;
- on the file backend, no registry but one moved into etcd: starting a fresh one would be a
  new cluster beside the nodes' data (they would refuse it anyway).

The way back (`adopt_into_file`, run by `make run` when the data dir's registry was moved
into etcd, or as `python -m services.gateway.cluster.registry_bootstrap`): etcd's image is
copied into the data dir's file registry the same way, and the old aside copy removed; the
caller then moves etcd's own data aside so that stale registry is never served either.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seglog.storage.log_files import fsync_directory
from seglog.storage.meta_properties import random_uuid

from .metadata_file_store import LOG_FILE, SNAPSHOT_FILE, FileMetadataStore
from .metadata_image import MetadataImage, new_topic_id
from .metadata_records import CLUSTER, Record, cluster_record, topic_record
from .registry_store import MetadataStore

METADATA_DIR = "metadata"
REGISTRY_FILE = "registry.json"  # the former whole document
MOVED_TO_ETCD = ".moved-to-etcd"  # suffix of a file registry copied into etcd
FILE = "file"
ETCD = "etcd"


class RegistryConflictError(ValueError):
    """Two registries where one is expected, or one moved away: the gateway does not start."""


@dataclass(frozen=True)
class Bootstrap:
    records: list[Record]  # to store first ([]: nothing)
    move_file_registry_aside: bool = False  # once they are stored


def plan(image: MetadataImage, data_dir: Path, *, file_backend: bool) -> Bootstrap:
    """What a registry whose stored image is `image` needs before it serves: a cluster id
    (`_plan`), and an id for each topic made before topic ids (KIP-516), given once and
    stored like any change, so every gateway and node sees the same one from then on."""
    step = _plan(image, data_dir, file_backend=file_backend)
    ids = topic_id_records(image)
    if not ids:
        return step
    return Bootstrap([*step.records, *ids], step.move_file_registry_aside)


def topic_id_records(image: MetadataImage) -> list[Record]:
    """A topic record with a new id for each topic of the image that has none."""
    records = []
    taken = set(image.topic_names)
    for name, topic in sorted(image.topics.items()):
        if not topic.topic_id:
            topic_id = new_topic_id(image)
            while topic_id in taken:
                topic_id = new_topic_id(image)
            taken.add(topic_id)
            count = len(topic.partitions)
            records.append(
                topic_record(name, topic.replication_factor, topic.configs, count, topic_id)
            )
    return records


def _plan(image: MetadataImage, data_dir: Path, *, file_backend: bool) -> Bootstrap:
    if file_backend:
        if image.cluster_id:
            return Bootstrap([])
        if image.offset == 0 and moved_into_etcd(data_dir):
            raise RegistryConflictError(_moved_message(data_dir))
        return Bootstrap([cluster_record(random_uuid())])
    if not file_registry_exists(data_dir):
        return Bootstrap([] if image.cluster_id else [cluster_record(random_uuid())])
    source = load_file_image(data_dir)
    if image.offset == 0:
        return Bootstrap(adopted_records(source, FILE), move_file_registry_aside=True)
    if image.adopted_from == {"backend": FILE, "offset": source.offset} and (
        not source.cluster_id or source.cluster_id == image.cluster_id
    ):
        # The copy was stored; moving the file registry aside was cut short.
        return Bootstrap([], move_file_registry_aside=True)
    raise RegistryConflictError(
        f"two registries: etcd holds one (cluster {image.cluster_id or 'without an id'}, "
        f"{len(image.topics)} topics) and {data_dir / METADATA_DIR} another (cluster "
        f"{source.cluster_id or 'without an id'}, {len(source.topics)} topics) that etcd's "
        f"was not copied from. To serve the file registry's cluster from etcd, start with an "
        f"empty etcd (its data moved aside) and it is copied in; to keep etcd's, move "
        f"{data_dir / METADATA_DIR} aside"
    )


def adopted_records(source: MetadataImage, backend: str) -> list[Record]:
    """`source`'s whole image as one batch, its cluster record saying where it came from."""
    adopted: dict[str, Any] = {"backend": backend, "offset": source.offset}
    records = [r for r in source.records() if r["type"] != CLUSTER]
    return [
        cluster_record(source.cluster_id or random_uuid(), adopted),
        *records,
        *topic_id_records(source),  # ids for the source's topics from before ids
    ]


def file_registry_exists(data_dir: Path) -> bool:
    metadata = data_dir / METADATA_DIR
    log = metadata / LOG_FILE
    return (
        (metadata / SNAPSHOT_FILE).exists()
        or (log.exists() and log.stat().st_size > 0)
        or (data_dir / REGISTRY_FILE).exists()
    )


def moved_into_etcd(data_dir: Path) -> bool:
    return (data_dir / (METADATA_DIR + MOVED_TO_ETCD)).exists()


def load_file_image(data_dir: Path) -> MetadataImage:
    store = FileMetadataStore(data_dir / METADATA_DIR, legacy_document=data_dir / REGISTRY_FILE)
    return MetadataImage.from_batches(store.load())


def move_file_registry_aside(data_dir: Path) -> None:
    """The file registry renamed `<name>.moved-to-etcd` (an older such copy replaced: the
    registry it came from was copied back and on since)."""
    for name in (METADATA_DIR, REGISTRY_FILE):
        source = data_dir / name
        if source.exists():
            _replace(source, data_dir / (name + MOVED_TO_ETCD))
    fsync_directory(data_dir)


def adopt_into_file(source: MetadataStore, data_dir: Path) -> MetadataImage:
    """Copy a registry (etcd's) into `data_dir`'s file registry, which must not exist;
    returns the image copied. The caller moves the source's own data aside."""
    image = MetadataImage.from_batches(source.load())
    if image.offset == 0:
        raise RegistryConflictError("the registry to copy is empty")
    if file_registry_exists(data_dir):
        raise RegistryConflictError(
            f"{data_dir / METADATA_DIR} already holds a registry: move it aside first"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    store = FileMetadataStore(data_dir / METADATA_DIR)
    store.snapshot(image.offset, adopted_records(image, ETCD))
    for name in (METADATA_DIR, REGISTRY_FILE):
        stale = data_dir / (name + MOVED_TO_ETCD)
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    fsync_directory(data_dir)
    return image


def _replace(source: Path, target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    source.rename(target)


def _moved_message(data_dir: Path) -> str:
    aside = data_dir / (METADATA_DIR + MOVED_TO_ETCD)
    try:
        cluster = load_file_image_at(aside).cluster_id or "without an id"
    except Exception:  # the message still says where it went
        cluster = "unknown"
    return (
        f"this data dir's registry (cluster {cluster}) was moved into etcd ({aside} is the "
        f"copy left behind): start the gateway with --registry-etcd pointing at that etcd, "
        f"or copy it back first: python -m services.gateway.cluster.registry_bootstrap "
        f"--registry-etcd HOST:PORT --data-dir {data_dir}"
    )


def load_file_image_at(metadata_dir: Path) -> MetadataImage:
    return MetadataImage.from_batches(FileMetadataStore(metadata_dir).load())


def main(argv: list[str] | None = None) -> int:
    """Copy an etcd registry back into a gateway's data dir (the way back from etcd)."""
    from ..coordination.etcd_keys import DEFAULT_PREFIX
    from ..coordination.etcd_keyspace import EtcdKeyspace
    from .metadata_etcd_store import EtcdMetadataStore

    parser = argparse.ArgumentParser(prog="python -m services.gateway.cluster.registry_bootstrap")
    parser.add_argument("--registry-etcd", required=True, help="etcd's HOST:PORT")
    parser.add_argument("--registry-etcd-prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--data-dir", required=True, type=Path, help="the gateway's data dir")
    args = parser.parse_args(argv)
    keyspace = EtcdKeyspace(args.registry_etcd, args.registry_etcd_prefix)
    try:
        image = adopt_into_file(EtcdMetadataStore(keyspace), args.data_dir)
    except RegistryConflictError as exc:
        print(f"not copied: {exc}", file=sys.stderr)
        return 1
    finally:
        keyspace.close()
    print(
        f"copied cluster {image.cluster_id} ({len(image.topics)} topics, offset {image.offset}) "
        f"into {args.data_dir / METADATA_DIR}; that etcd's registry is now stale: do not serve "
        f"it again (move its data aside)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
