"""Issue 52's flood of the Kafka listener against a real gateway process: three connections
announcing 100 MiB each and then silent, and a thousand idle TCP connections, beside a
librdkafka producer and a gRPC producer; then ten thousand idle Kafka connections. What is
measured: produce p99 under the flood against the quiet run of the same test, the gateway's
resident set and its threads."""

from __future__ import annotations

import os

import pytest

from tests.batches import make_batch
from tests.e2e.test_processes import ProcessCluster
from tests.kafka_flood import (
    MIB,
    Flood,
    grpc_latencies,
    p99,
    process_status,
    raise_open_files_limit,
    rdkafka_latencies,
    reset_peak,
)
from tests.ports import free_ports
from tests.waiting import wait_until

SAMPLES = 300
# A produce round trip here is 1-5 ms, but this machine's two cores are shared with other
# runs (load averages in the hundreds were seen) and a single stall of 30-90 ms lands in the
# p99 of either phase. So the flood is measured between two quiet runs, against the worse of
# them, and against this floor: a sub-millisecond quiet p99 cannot make a few milliseconds
# of jitter a failure, while a flood that stalls produce (a pool filled: 30 s waits and
# refusals) is far past it. What the flood costs on main shows in the gateway's resident set
# (+217 MiB) and threads (+1,000), asserted below.
P99_FLOOR_S = 0.05
IDLE_HOST = "127.0.0.2"
MANY_HOST = "127.0.0.3"
MANY = 10_000
# The listener's own pools (num.io.threads 8; the waiting requests' pool 32), which start
# threads as work comes: what 10,000 connections may add at most.
POOL_THREADS = 8 + 32


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    raise_open_files_limit()
    root = tmp_path_factory.mktemp("kafka-flood")
    [kafka_port] = free_ports(1)
    cluster = ProcessCluster(
        root,
        nodes=1,
        gateway_args=[
            *("--kafka-listen", f"127.0.0.1:{kafka_port}"),
            *("--kafka-max-connections", str(MANY + 2000)),
            *("--max-connections-per-ip-overrides", f"{MANY_HOST}:{MANY}"),
        ],
    )
    cluster.kafka_address = f"127.0.0.1:{kafka_port}"
    cluster.admin.create_topic("steady", 1, 1)
    yield cluster
    cluster.close()


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.slow
def test_a_flood_of_large_announcements_and_idle_connections_leaves_produce_served(gateway):
    import confluent_kafka

    pid = gateway.gateway.pid
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": gateway.kafka_address, "linger.ms": 0, "acks": "all"}
    )
    batch = make_batch([b"grpc"])

    def grpc_produce() -> None:
        [answer] = gateway.client.produce("steady", {0: batch}, acks=-1)
        assert answer.error == 0, answer.error_message

    rdkafka_latencies(producer, "steady", 20)  # connected, metadata known
    quiet = rdkafka_latencies(producer, "steady", SAMPLES), grpc_latencies(grpc_produce, SAMPLES)
    reset_peak(pid)
    before = process_status(pid)
    before_files = open_files(pid)
    flood = Flood(gateway.kafka_address, idle_source=IDLE_HOST)
    try:
        flood.start()
        # Measured once the gateway holds the flood (each connection an open file).
        assert wait_until(lambda: open_files(pid) >= before_files + 1000 - 10, 10)
        flooded = (
            rdkafka_latencies(producer, "steady", SAMPLES),
            grpc_latencies(grpc_produce, SAMPLES),
        )
        after = process_status(pid)
        large_closed = wait_until(lambda: flood.large_closed() == 3, 5)
    finally:
        flood.close()
    quiet_after = (
        rdkafka_latencies(producer, "steady", SAMPLES),
        grpc_latencies(grpc_produce, SAMPLES),
    )
    producer.flush(10)
    growth = after["VmHWM"] - before["VmRSS"]
    ms = [
        [round(p99(samples) * 1000, 1) for samples in phase]
        for phase in (quiet, flooded, quiet_after)
    ]
    print(
        f"produce p99 ms (librdkafka, gRPC) quiet {ms[0]}, flooded {ms[1]}, quiet again "
        f"{ms[2]}; gateway RSS growth {growth / MIB:.1f} MiB, threads {before['Threads']} "
        f"-> {after['Threads']}"
    )
    assert growth < 64 * MIB
    for i, name in enumerate(("librdkafka", "gRPC")):
        calm = max(p99(quiet[i]), p99(quiet_after[i]), P99_FLOOR_S)
        assert p99(flooded[i]) <= 2 * calm, f"{name} produce p99 grew past 2x"
    assert large_closed, "the connections announcing 100 MiB were kept"
    assert after["Threads"] <= before["Threads"] + POOL_THREADS


@pytest.mark.slow
def test_ten_thousand_idle_connections_cost_megabytes_and_no_threads(gateway):
    pid = gateway.gateway.pid
    before = process_status(pid)
    flood = Flood(gateway.kafka_address, large=0, idle=MANY, idle_source=MANY_HOST, spoken=True)
    try:
        flood.start()
        refused = flood.refused
        answered = flood.answered()
        after = process_status(pid)
        print(
            f"{MANY} idle Kafka connections ({refused} refused, {answered} answered): gateway "
            f"RSS growth {(after['VmRSS'] - before['VmRSS']) / MIB:.1f} MiB, threads "
            f"{before['Threads']} -> {after['Threads']}"
        )
        assert refused == 0
        assert answered == MANY  # each one served its request, then left idle
        assert after["Threads"] <= before["Threads"] + POOL_THREADS
        # The override let this host hold MANY (the default per address is 1,000): the next
        # one from it is refused, one from elsewhere is served.
        extra = Flood(gateway.kafka_address, large=0, idle=1, idle_source=MANY_HOST, spoken=True)
        extra.start()
        assert extra.answered(5) == 0
        extra.close()
        other = Flood(gateway.kafka_address, large=0, idle=1, idle_source=IDLE_HOST, spoken=True)
        other.start()
        assert other.answered(10) == 1
        other.close()
    finally:
        flood.close()
    assert after["VmRSS"] - before["VmRSS"] < 200 * MIB
