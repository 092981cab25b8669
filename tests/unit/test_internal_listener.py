"""Where a gateway's internal listener (the nodes' door) is unless told."""

from __future__ import annotations

import pytest

from services.gateway.__main__ import parse_args
from services.gateway.internal_listener import default_internal_listen


@pytest.mark.parametrize(
    ("listen", "internal"),
    [
        ("127.0.0.1:7070", "127.0.0.1:7090"),
        ("0.0.0.0:8000", "0.0.0.0:7090"),
        ("[::1]:7070", "[::1]:7090"),
        ("127.0.0.1:0", "127.0.0.1:0"),  # tests: any free port, as the clients' listener
    ],
)
def test_the_internal_listener_is_the_listen_hosts_port_7090(listen, internal):
    assert default_internal_listen(listen) == internal


def test_the_internal_listener_is_a_setting_of_its_own():
    config = parse_args(["--internal-listen", "10.0.0.7:7191"])
    assert config.internal_listen == "10.0.0.7:7191"
    assert parse_args([]).internal_listen is None  # the default above
