"""`send` in one C call (records/_encode.c send_value / send_keyed): records written into a
published open batch are the bytes the Python path writes, the future and callback are the
record's, and nothing gets into a batch once it is sealed for sending (section())."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.client.fast_entries import FAST_SEND
from seglog.client.futures import BatchResult, RecordFuture
from seglog.client.partitioner import partition_for_key
from seglog.records.records_writer import PyRecordsWriter

pytestmark = pytest.mark.skipif(not FAST_SEND, reason="needs the C module _encode")

if FAST_SEND:
    from seglog.records._encode import RecordsWriter, send_keyed, send_value

BASE_MS = 1_700_000_000_000


def entry(topic: str = "t", partition: int = 0, max_bytes: int = 1 << 20) -> tuple:
    return (RecordsWriter(max_bytes), BatchResult(), topic, partition, [])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.binary(max_size=300),
            st.integers(min_value=-5_000, max_value=5_000),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_the_c_path_writes_the_bytes_of_the_python_writer(records) -> None:
    sticky = {"t": entry()}
    keyed = {"t": [entry(partition=p) for p in range(4)]}
    reference: dict[tuple[str, int], PyRecordsWriter] = {}
    for key, value, delta_ms in records:
        if key is None:
            future = send_value(sticky, "t", value, BASE_MS + delta_ms, None)
            target = ("sticky", 0)
        else:
            future = send_keyed(keyed, "t", key, value, 4, BASE_MS + delta_ms, None)
            target = ("keyed", partition_for_key(key, 4))
        assert isinstance(future, RecordFuture)
        assert future.partition == target[1]
        writer = reference.setdefault(target, PyRecordsWriter(1 << 20))
        assert writer.append(key, value, BASE_MS + delta_ms) == future[3] + 1
    for (kind, partition), writer in reference.items():
        ours = sticky["t"][0] if kind == "sticky" else keyed["t"][partition][0]
        assert ours.record_count == writer.record_count
        assert (ours.base_timestamp, ours.max_timestamp) == (
            writer.base_timestamp,
            writer.max_timestamp,
        )
        assert ours.section() == writer.section()


def test_the_future_and_callback_are_the_records() -> None:
    sticky = {"t": entry(partition=3)}
    calls = []
    first = send_value(sticky, "t", b"a", BASE_MS, None)
    second = send_value(sticky, "t", b"b", None, lambda md, exc: calls.append((md, exc)))
    assert (first.topic, first.partition, first[3], first[4]) == ("t", 3, 0, BASE_MS)
    assert (second.partition, second[3]) == (3, 1)
    assert abs(second[4] - __import__("time").time() * 1000) < 60_000  # now, when not given
    # The record's index, timestamp and callback: not its future, which the caller may drop.
    callbacks = sticky["t"][4]
    assert callbacks == [1, second[4], callbacks[2]] and callable(callbacks[2])
    assert sys.getrefcount(second) == 2  # held by this test alone (and getrefcount's argument)
    assert first[0] is second[0] is sticky["t"][1]  # the batch's result resolves both


def test_nothing_goes_where_there_is_no_open_batch_or_no_room() -> None:
    assert send_value({}, "t", b"v", BASE_MS, None) is None
    assert send_keyed({}, "t", b"k", b"v", 4, BASE_MS, None) is None
    assert send_keyed({"t": [None, None]}, "t", b"k", b"v", 4, BASE_MS, None) is None
    small = {"t": entry(max_bytes=64)}
    assert send_value(small, "t", b"x" * 40, BASE_MS, None) is not None  # the first fits always
    assert send_value(small, "t", b"x" * 40, BASE_MS, None) is None
    assert small["t"][0].record_count == 1
    with pytest.raises(TypeError):
        send_value({"t": ("not", "an", "entry")}, "t", b"v", BASE_MS, None)


@pytest.mark.parametrize("writer_type", ["c", "python"])
def test_a_sealed_section_takes_no_record_and_is_taken_once(writer_type) -> None:
    writer = RecordsWriter(1 << 20) if writer_type == "c" else PyRecordsWriter(1 << 20)
    assert writer.append(None, b"a", BASE_MS) == 1
    section = writer.section()
    assert writer.append(None, b"b", BASE_MS) == 0
    assert writer.append_value(b"b", BASE_MS) == 0
    assert writer.append_many([b"b", b"c"], None, BASE_MS) == 0
    assert writer.record_count == 1
    with pytest.raises(RuntimeError, match="already taken"):
        writer.section()
    if writer_type == "c":
        sealed = {"t": (writer, BatchResult(), "t", 0, [])}
        assert send_value(sealed, "t", b"late", BASE_MS, None) is None
    assert section  # the one record's bytes
