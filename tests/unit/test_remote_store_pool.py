"""The node's object store connection pool holds a connection for every remote reader thread
beside the remote log manager's: a GET never waits for a connection behind another GET."""

from __future__ import annotations

from seglog.storage.remote_store import RemoteStorageConfig
from services.storage_node.server import STORE_CONNECTIONS_BESIDE_READERS, _pool_for_readers

STORAGE = RemoteStorageConfig(
    endpoint_url="http://127.0.0.1:1", bucket="b", access_key_id="k", secret_access_key="s"
)


def test_the_store_pool_grows_with_the_reader_threads_and_never_shrinks():
    assert _pool_for_readers(STORAGE, 10) == STORAGE  # 16 >= 10 + 4: as configured
    wider = _pool_for_readers(STORAGE, 40)
    assert wider.max_pool_connections == 40 + STORE_CONNECTIONS_BESIDE_READERS
    assert (wider.endpoint_url, wider.bucket) == (STORAGE.endpoint_url, STORAGE.bucket)
