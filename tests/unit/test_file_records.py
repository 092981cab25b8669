"""FileRecords.write_to, the bulk path's transfer: the range asked for and nothing else, to a
plain socket (sendfile) and to a TLS one (pread+send), also with other transfers of the
same file running; a file cut under a transfer raises instead of sending short."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from seglog.errors import CorruptRecordError
from seglog.security.certs import CertificateAuthority, write_issued
from seglog.storage.file_records import TLS_CHUNK_BYTES, FileRecords

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def tls_contexts(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    authority = CertificateAuthority.create()
    ca_path, _ = authority.write(directory)
    cert, key = write_issued(authority.issue("node"), directory, "node")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    client.load_verify_locations(ca_path)
    return server, client


@pytest.fixture
def records(tmp_path):
    data = os.urandom(3 * TLS_CHUNK_BYTES + 12345)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    opened = FileRecords.open(path, create=False)
    yield opened, data
    opened.close()


def _plain_pair() -> tuple[socket.socket, socket.socket]:
    sender, receiver = socket.socketpair()
    receiver.settimeout(TIMEOUT_S)
    return sender, receiver


def _tls_pair(tls_contexts) -> tuple[socket.socket, socket.socket]:
    server_context, client_context = tls_contexts
    plain_sender, plain_receiver = socket.socketpair()
    for sock in (plain_sender, plain_receiver):
        sock.settimeout(TIMEOUT_S)
    with ThreadPoolExecutor(1) as pool:
        sender = pool.submit(server_context.wrap_socket, plain_sender, server_side=True)
        receiver = client_context.wrap_socket(plain_receiver, server_hostname="localhost")
        return sender.result(timeout=TIMEOUT_S), receiver


def _receive(receiver: socket.socket, size: int) -> bytes:
    """Everything the sender sends until it closes, at most `size` + 1 bytes."""
    received = bytearray()
    while len(received) <= size:
        chunk = receiver.recv(size + 1 - len(received))
        if not chunk:
            break
        received += chunk
    return bytes(received)


def _transfer(records: FileRecords, pair, position: int, size: int) -> tuple[int, bytes]:
    sender, receiver = pair
    with sender, receiver, ThreadPoolExecutor(1) as pool:
        received = pool.submit(_receive, receiver, size)
        try:
            sent = records.write_to(sender, position, size)
        finally:
            sender.close()  # the receiver's end of the bytes
        return sent, received.result(timeout=TIMEOUT_S)


def test_write_to_sends_exactly_the_range_of_a_slice_to_a_plain_socket(records):
    opened, data = records
    piece = opened.slice(1000, 200_000)
    sent, received = _transfer(piece, _plain_pair(), 500, 150_000)
    assert sent == 150_000
    assert received == data[1500 : 1500 + 150_000]


def test_write_to_a_tls_socket_sends_the_range_in_chunks(records, tls_contexts):
    opened, data = records
    size = len(data) - 7
    sent, received = _transfer(opened, _tls_pair(tls_contexts), 7, size)
    assert sent == size and received == data[7:]


def test_tls_transfers_of_one_file_at_once_each_send_their_own_bytes(records, tls_contexts):
    # Duplicated descriptors share one file position: a transfer that moved it (read
    # instead of pread) would send the other transfer's bytes.
    opened, data = records
    half = len(data) // 2
    ranges = [(0, half), (half, len(data) - half), (100, half), (half - 100, half)]
    pairs = [_tls_pair(tls_contexts) for _ in ranges]
    start = threading.Barrier(len(ranges))

    def transfer(pair, position, size):
        start.wait(timeout=TIMEOUT_S)
        return _transfer(opened, pair, position, size)

    with ThreadPoolExecutor(len(ranges)) as pool:
        results = [
            pool.submit(transfer, pair, position, size)
            for pair, (position, size) in zip(pairs, ranges, strict=True)
        ]
        for result, (position, size) in zip(results, ranges, strict=True):
            sent, received = result.result(timeout=TIMEOUT_S)
            assert sent == size and received == data[position : position + size]


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_file_cut_under_a_transfer_raises_instead_of_sending_short(records, tls_contexts, tls):
    opened, data = records
    os.truncate(opened.path, len(data) // 2)  # behind FileRecords' back: its size is stale
    pair = _tls_pair(tls_contexts) if tls else _plain_pair()
    with pytest.raises(CorruptRecordError, match="truncated underneath a transfer"):
        _transfer(opened, pair, 0, len(data))
