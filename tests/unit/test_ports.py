"""tests/ports.py: ports picked for servers started later lie outside the kernel's ephemeral
range, where a bind to port 0 or an outgoing connection could take them in the meantime."""

import socket

from tests.ports import LOWEST_PICKED_PORT, _ephemeral_low, free_port_run, free_ports


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
