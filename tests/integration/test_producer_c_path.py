"""send()'s C path (records/_encode.c, client/fast_entries.py) on a real cluster: it
appends to open batches without the accumulator's lock, relying on a batch's build sealing
it. A record sent after its batch was sealed goes to a new batch; threads racing the sender
lose and misplace nothing."""

import threading

from seglog.client.producer import Producer
from tests.integration.test_producer import read_all


def test_sends_from_threads_racing_the_sender_lose_and_misplace_nothing(cluster):
    """send's C path appends to open batches without the accumulator's lock, relying on
    the build sealing a batch: with tiny batches and no linger the sender seals batches
    while four threads send into them (unkeyed, keyed, with callbacks, and a send_many in
    between). Every record must land once, at the partition and offset its future and its
    callback report."""
    cluster.admin.create_topic("racing", 3)
    producer = Producer(cluster.address, linger_ms=0, batch_size=512, acks="all")
    per_thread = 1500
    sent: dict[bytes, object] = {}
    called: dict[bytes, list] = {}
    lock = threading.Lock()

    def run(thread: int) -> None:
        for i in range(per_thread):
            value = b"%d-%d" % (thread, i)
            key = None if thread % 2 == 0 else b"key-%d" % (i % 7)

            def callback(md, exc, value=value):
                with lock:
                    called.setdefault(value, []).append((md, exc))

            future = producer.send("racing", value, key=key, callback=callback)
            with lock:
                sent[value] = future
            if thread == 3 and i % 500 == 0:
                producer.send_many("racing", [b"bulk-%d-%d" % (i, n) for n in range(50)])

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.flush(timeout=60)
    producer.close(timeout=30)
    where = {value: future.get(timeout=0) for value, future in sent.items()}
    assert all(len(calls) == 1 and calls[0][1] is None for calls in called.values())
    assert len(called) == len(sent) == 4 * per_thread
    assert {v: (md.partition, md.offset) for v, ((md, _),) in called.items()} == {
        v: (md.partition, md.offset) for v, md in where.items()
    }
    expected = 4 * per_thread + 3 * 50
    landed = read_all(cluster.address, "racing", 3, expected)
    found = {r.value: (p, r.offset) for p, records in landed.items() for r in records}
    assert sum(len(records) for records in landed.values()) == expected  # none twice
    assert {v: found[v] for v in where} == {v: (md.partition, md.offset) for v, md in where.items()}
    for thread in range(4):  # each thread's records in its order within their partitions
        mine = [where[b"%d-%d" % (thread, i)] for i in range(per_thread)]
        for partition in range(3):
            offsets = [md.offset for md in mine if md.partition == partition]
            assert offsets == sorted(offsets)


def test_a_send_after_its_batch_was_sealed_goes_to_a_new_batch(cluster):
    """The C path's entry of a batch stays published after the batch is closed for
    sending; the close seals it, so the next record (unkeyed or keyed) opens a new batch
    instead of vanishing into the sent one."""
    cluster.admin.create_topic("sealed", 1)
    producer = Producer(cluster.address, linger_ms=60_000)
    futures = [producer.send("sealed", b"first"), producer.send("sealed", b"second")]
    futures.append(producer.send("sealed", b"keyed", key=b"k"))
    producer.flush(timeout=30)  # closes the open batch though it has not lingered
    futures.append(producer.send("sealed", b"after"))
    futures.append(producer.send("sealed", b"keyed-after", key=b"k"))
    producer.flush(timeout=30)
    producer.close(timeout=10)
    assert [f.get(timeout=0).offset for f in futures] == [0, 1, 2, 3, 4]
    landed = read_all(cluster.address, "sealed", 1, 5)
    assert [r.value for r in landed[0]] == [b"first", b"second", b"keyed", b"after", b"keyed-after"]
