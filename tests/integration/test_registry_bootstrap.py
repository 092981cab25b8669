"""A registry's cluster id and its moves between backends (registry_bootstrap.py), on real
files and a real etcd: made once; a file registry copied whole into an empty etcd and moved
aside; copied back; two registries, or one moved away, refused with the way out."""

from __future__ import annotations

import pytest

from seglog.security.acls import AclBinding
from services.gateway.cluster import registry_bootstrap
from services.gateway.cluster.metadata_etcd_store import EtcdMetadataStore
from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.registry import Registry
from services.gateway.cluster.registry_bootstrap import (
    RegistryConflictError,
    adopt_into_file,
    load_file_image,
)
from services.gateway.coordination.etcd_keyspace import EtcdKeyspace
from tests.etcd import Etcd


@pytest.fixture
def etcd(tmp_path):
    server = Etcd(tmp_path / "etcd")
    yield server
    server.stop()


def store_at(etcd, prefix="/seglog"):
    return EtcdMetadataStore(EtcdKeyspace(etcd.endpoint, prefix))


def a_file_registry(data_dir) -> Registry:
    registry = Registry(data_dir, session_timeout_ms=60_000)
    for node_id in (1, 2, 3):
        registry.register_node(node_id, f"127.0.0.1:{node_id}")
    registry.create_topic("orders", 3, 2, {"retention.ms": "60000"})
    registry.add_acls(
        [AclBinding("User:alice", "*", "topic", "literal", "orders", "Read", "allow")]
    )
    registry.alter_client_quotas({(("user", "alice"),): {"producer_byte_rate": 1024.0}})
    registry.allocate_producer_ids()
    registry.set_decommissioned(3, True)
    return registry


def test_the_cluster_id_is_made_once_and_kept(tmp_path):
    first = Registry(tmp_path, session_timeout_ms=60_000)
    assert len(first.cluster_id) == 22
    assert Registry(tmp_path, session_timeout_ms=60_000).cluster_id == first.cluster_id
    assert Registry(tmp_path / "other", session_timeout_ms=60_000).cluster_id != first.cluster_id


def test_a_file_registry_is_copied_whole_into_an_empty_etcd_once_and_back(tmp_path, etcd):
    data_dir = tmp_path / "gateway"
    source = a_file_registry(data_dir)
    before = source.image.records()
    cluster_id = source.cluster_id

    adopted = Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    assert adopted.cluster_id == cluster_id
    # every record of the image: topics, partitions (replicas, leaders, epochs, ISRs),
    # configs, ACLs, quotas, producer ids, nodes; only the cluster record says where from
    after = adopted.image.records()
    assert after[0]["adopted_from"] == {"backend": "file", "offset": source.metadata_offset}
    assert after[1:] == before[1:]
    assert adopted.decommissioned_nodes() == {3}
    assert not (data_dir / "metadata").exists()
    assert (data_dir / "metadata.moved-to-etcd").is_dir()

    # Not twice: another gateway (or this one restarted) finds etcd's registry as it is.
    adopted.create_topic("later", 1, 1, {})
    again = Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    assert sorted(again.topics) == ["later", "orders"]

    # A file gateway on this data dir refuses to start a new cluster beside it...
    with pytest.raises(RegistryConflictError, match="moved into etcd") as refused:
        Registry(data_dir, session_timeout_ms=60_000)
    assert cluster_id in str(refused.value)
    assert "registry_bootstrap --registry-etcd" in str(refused.value)
    # ... until etcd's registry is copied back: the topic made under etcd comes along.
    copied = adopt_into_file(store_at(etcd), data_dir)
    assert copied.cluster_id == cluster_id
    back = Registry(data_dir, session_timeout_ms=60_000)
    assert back.cluster_id == cluster_id
    assert sorted(back.topics) == ["later", "orders"]
    assert back.topic("orders").configs == {"retention.ms": "60000"}
    assert not (data_dir / "metadata.moved-to-etcd").exists()  # superseded
    with pytest.raises(RegistryConflictError, match="already holds a registry"):
        adopt_into_file(store_at(etcd), data_dir)


def test_an_adoption_cut_short_before_the_move_aside_is_finished_not_refused(tmp_path, etcd):
    data_dir = tmp_path / "gateway"
    a_file_registry(data_dir)
    Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    # As if the gateway died between storing the copy and moving the file registry aside.
    (data_dir / "metadata.moved-to-etcd").rename(data_dir / "metadata")
    restarted = Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    assert sorted(restarted.topics) == ["orders"]
    assert not (data_dir / "metadata").exists()


def test_a_gateway_on_etcd_beside_a_file_registry_etcd_was_not_copied_from_refuses(tmp_path, etcd):
    elsewhere = Registry(tmp_path / "elsewhere", store=store_at(etcd), session_timeout_ms=60_000)
    data_dir = tmp_path / "gateway"
    mine = a_file_registry(data_dir)
    with pytest.raises(RegistryConflictError, match="two registries") as refused:
        Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    assert elsewhere.cluster_id in str(refused.value) and mine.cluster_id in str(refused.value)
    assert load_file_image(data_dir).cluster_id == mine.cluster_id  # left as it was


def test_the_way_back_is_one_command(tmp_path, etcd, capsys):
    data_dir = tmp_path / "gateway"
    cluster_id = a_file_registry(data_dir).cluster_id
    Registry(data_dir, store=store_at(etcd), session_timeout_ms=60_000)
    command = ["--registry-etcd", etcd.endpoint, "--data-dir", str(data_dir)]
    assert registry_bootstrap.main(command) == 0
    assert cluster_id in capsys.readouterr().out
    assert sorted(Registry(data_dir, session_timeout_ms=60_000).topics) == ["orders"]
    assert registry_bootstrap.main(command) == 1  # not over a registry already there
    assert "already holds a registry" in capsys.readouterr().err


def _records_before_topic_ids() -> list[dict]:
    """A registry's first batch as one from before topic ids stored it: a topic and its
    partition, no `topic_id`."""
    registration = {
        "replicas": [1],
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1],
        "partition_epoch": 0,
    }
    return [
        {"type": "node", "node_id": 1, "address": "127.0.0.1:1"},
        {"type": "topic", "name": "old", "replication_factor": 1, "configs": {}, "partitions": 1},
        {"type": "partition", "topic": "old", "partition": 0, **registration},
    ]


@pytest.mark.parametrize("backend", ["file", "etcd"])
def test_topics_from_before_topic_ids_get_one_once_and_keep_it(tmp_path, backend, request):
    if backend == "etcd":
        etcd = request.getfixturevalue("etcd")

        def open_registry() -> Registry:
            return Registry(tmp_path, store=store_at(etcd), session_timeout_ms=60_000)

        store = store_at(etcd)
    else:

        def open_registry() -> Registry:
            return Registry(tmp_path, session_timeout_ms=60_000)

        store = FileMetadataStore(tmp_path / registry_bootstrap.METADATA_DIR)
    store.append(_records_before_topic_ids(), 0)
    first = open_registry()
    topic_id = first.topic("old").topic_id
    assert len(topic_id) == 22
    assert first.topic_name_of(topic_id) == "old"
    # Durable: a second gateway (or this one restarted) reads the same id, adds none.
    offset = first.image.offset
    again = open_registry()
    assert (again.topic("old").topic_id, again.image.offset) == (topic_id, offset)
    # A topic made from then on gets its own.
    again.create_topic("new", 1, 1, {})
    assert again.topic("new").topic_id not in ("", topic_id)
