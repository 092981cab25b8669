"""tests/ports.py: ports picked for servers started later lie outside the kernel's ephemeral
range, where a bind to port 0 or an outgoing connection could take them in the meantime."""

import itertools
import socket

from tests.ports import (
    DERIVED_PORTS,
    LOWEST_PICKED_PORT,
    PortSlice,
    _ephemeral_low,
    free_port_run,
    free_ports,
    worker_slice,
)


def test_picked_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(LOWEST_PICKED_PORT <= port < _ephemeral_low() for port in ports)
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))  # still free
    assert free_ports(0) == []


def test_a_picked_run_of_ports_is_consecutive_free_and_below_the_ephemeral_range():
    first = free_port_run(4)
    assert LOWEST_PICKED_PORT <= first <= _ephemeral_low() - 4
    servers = [socket.socket() for _ in range(4)]
    try:
        for offset, server in enumerate(servers):
            server.bind(("127.0.0.1", first + offset))  # still free
    finally:
        for server in servers:
            server.close()


def test_ports_are_not_handed_out_twice_before_the_slice_wraps():
    """A cluster picks its Kafka run, then its gateway's and nodes' ports, before binding any:
    none of those may be one of the run's."""
    run = free_port_run(8)
    singles = free_ports(50)
    assert not set(range(run, run + 8)) & set(singles)
    assert len(set(singles)) == 50


def test_each_xdist_worker_picks_from_its_own_slice():
    low = 32768
    slices = [worker_slice(low, f"gw{i}", "4") for i in range(4)]
    assert slices[0].first == LOWEST_PICKED_PORT and slices[-1].end <= low
    for before, after in itertools.pairwise(slices):
        assert before.end <= after.first  # disjoint
    assert worker_slice(low, None, None) == PortSlice(LOWEST_PICKED_PORT, low)
    assert worker_slice(low, "gw9", "4") == PortSlice(LOWEST_PICKED_PORT, low)


def test_the_ports_after_a_pick_are_left_for_what_derives_from_it():
    """A Kafka listener picked as one port binds its lanes at port + node id: the next pick
    (another system's brokers, started beside it) is none of them."""
    listener, other = free_ports(2)
    assert not listener < other <= listener + DERIVED_PORTS
