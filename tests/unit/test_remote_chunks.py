"""remote_chunks.RemoteChunks: reads across aligned chunks answer the object's bytes, each chunk
fetched once (a read asking for a chunk on its way waits for it; one fetched ahead and then
abandoned releases it at once), fetches ahead claimed only within the room for chunks not read
yet, and chunks read going first when room is needed. The store here is bytes in memory that
can hold a GET until told to answer: the real store (SeaweedFS) cannot be paused mid-GET on
cue; tests/integration/test_remote_segment_reads.py reads through it."""

from __future__ import annotations

import threading

from seglog.storage.remote_chunks import ChunkedObject, RemoteChunks
from seglog.storage.remote_store import RemoteStorageError

OBJECT = bytes(range(256)) * 40  # 10240 bytes: chunks of 4096, 4096, 2048
OBJ = ChunkedObject("key", "segment", len(OBJECT))


class _HeldStore:
    """get_range over OBJECT; each GET waits for `release` when `hold` is set."""

    def __init__(self, *, hold: bool = False) -> None:
        self.gets: list[int] = []
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.failures = 0  # GETs still to fail

    def get_range(self, key: str, start: int, length: int) -> bytes:
        assert key == "key"
        self.gets.append(start)
        self.release.wait(30)
        if self.failures:
            self.failures -= 1
            raise RemoteStorageError("the store failed")
        return OBJECT[start : start + length]


def _chunks(store: _HeldStore, total_bytes: int = 1 << 20) -> RemoteChunks:
    return RemoteChunks(store, total_bytes, chunk_bytes=4096)  # type: ignore[arg-type]


def test_reads_across_chunks_answer_the_objects_bytes_each_chunk_fetched_once():
    store = _HeldStore()
    chunks = _chunks(store)
    for position, length in ((0, 10), (4000, 200), (100, 9000), (8190, 5000), (4096, 4096)):
        got = chunks.read(OBJ, position, length)
        assert bytes(got) == OBJECT[position : position + length], (position, length)
    assert sorted(store.gets) == [0, 4096, 8192]
    assert isinstance(chunks.read(OBJ, 10, 20), memoryview)  # inside one chunk: no copy


def test_a_read_waits_for_a_chunk_fetched_ahead_instead_of_fetching_it_again():
    store = _HeldStore(hold=True)
    chunks = _chunks(store)
    assert chunks.claim(OBJ, 1)
    assert not chunks.claim(OBJ, 1)  # on its way already
    filler = threading.Thread(target=chunks.fill, args=(OBJ, 1), daemon=True)
    filler.start()
    got: list = []
    reader = threading.Thread(target=lambda: got.append(chunks.read(OBJ, 5000, 10)), daemon=True)
    reader.start()
    reader.join(0.2)
    assert reader.is_alive()  # waiting for the GET under way, not a second one
    store.release.set()
    reader.join(5)
    filler.join(5)
    assert bytes(got[0]) == OBJECT[5000:5010]
    assert store.gets == [4096]


def test_a_failed_fetch_ahead_releases_the_waiting_read_to_ask_the_store_itself():
    store = _HeldStore(hold=True)
    store.failures = 1
    chunks = _chunks(store)
    assert chunks.claim(OBJ, 0)
    failing = threading.Thread(target=lambda: _swallow(chunks.fill, OBJ, 0), daemon=True)
    failing.start()
    got: list = []
    reader = threading.Thread(target=lambda: got.append(_swallow(chunks.read, OBJ, 0, 4)))
    reader.start()
    store.release.set()
    failing.join(5)
    reader.join(5)
    assert got and bytes(got[0]) == OBJECT[:4]  # its own GET after the failed one
    assert chunks.claim(OBJ, 1)  # the failure left nothing claimed behind


def _swallow(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def test_fetches_ahead_fit_the_room_and_chunks_read_go_first():
    store = _HeldStore()
    chunks = _chunks(store, total_bytes=8192)  # two chunks
    chunks.read(OBJ, 0, 10)  # chunk 0 held, read
    assert chunks.claim(OBJ, 1)
    chunks.fill(OBJ, 1)
    assert chunks.claim(OBJ, 2)  # chunk 0 (read) makes room for it
    chunks.fill(OBJ, 2)
    assert store.gets == [0, 4096, 8192]
    assert not chunks.claim(OBJ, 0)  # chunks 1 and 2 are unread: no room to fetch ahead
    chunks.read(OBJ, 4096, 10)
    chunks.read(OBJ, 8192, 10)
    assert store.gets == [0, 4096, 8192]  # the chunks fetched ahead were kept for the reads
    assert not chunks.claim(OBJ, 3)  # past the object's end
