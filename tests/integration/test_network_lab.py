"""The network lab on its own: hosts reach each other and the root namespace through the
bridge; a cut drops packets silently both ways (a connect times out, no error comes back)
and only between the groups; heal restores what was cut and slowed; a run killed before
`close()` leaves nothing the next lab does not remove. Needs root."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.faults.netns import NetworkLab, NetworkLabError, leftovers, run_command

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PREFIX = "sglab"
SUBNET_OCTET = 233
PORT = 9000
CONNECT_TIMEOUT_S = 1.0
# A server that answers every connection with one line, then closes it.
ECHO_SERVER = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(b"hello")
    connection.close()
"""
CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as s:
        print(s.recv(5).decode())
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.fixture
def lab() -> Iterator[NetworkLab]:
    with NetworkLab(PREFIX, SUBNET_OCTET) as made:
        yield made
    assert leftovers(PREFIX) == []


@pytest.fixture
def hosts(lab: NetworkLab) -> Iterator[dict[str, str]]:
    """Hosts a, b and c; b runs the echo server."""
    ips = {name: lab.add_host(name) for name in ("a", "b", "c")}
    server = subprocess.Popen(
        [*lab.command_prefix("b"), sys.executable, "-c", ECHO_SERVER, ips["b"], str(PORT)],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        yield ips
    finally:
        server.kill()
        server.wait()


def connect_from(lab: NetworkLab, host: str, ip: str) -> str:
    """What a client in `host` gets from the echo server at `ip`: its greeting, or the name
    of the error."""
    done = subprocess.run(
        [*lab.command_prefix(host), sys.executable, "-c", CLIENT, ip, str(PORT)]
        + [str(CONNECT_TIMEOUT_S)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.strip()


def connect_from_root(ip: str) -> str:
    with socket.create_connection((ip, PORT), timeout=CONNECT_TIMEOUT_S) as s:
        return s.recv(5).decode()


def test_hosts_reach_each_other_and_the_root_namespace(lab, hosts):
    assert hosts == {"a": "10.233.0.2", "b": "10.233.0.3", "c": "10.233.0.4"}
    assert connect_from(lab, "a", hosts["b"]) == "hello"
    assert connect_from(lab, "c", hosts["b"]) == "hello"
    assert connect_from_root(hosts["b"]) == "hello"
    # Each host is a namespace of its own: b's server is not on a's loopback.
    assert connect_from(lab, "a", "127.0.0.1") == "ConnectionRefusedError"


def test_a_cut_drops_silently_both_ways_between_the_groups_only_until_healed(lab, hosts):
    lab.cut(["a"], ["b"])
    # Silently: the connection attempt times out, as behind a firewall dropping packets.
    assert connect_from(lab, "a", hosts["b"]) == "TimeoutError"
    # The other way round too (b's server answers nothing to a, and b cannot reach a).
    assert "hello" not in connect_from(lab, "b", hosts["a"])
    assert connect_from(lab, "c", hosts["b"]) == "hello"
    assert connect_from_root(hosts["b"]) == "hello"
    lab.cut(["a"], ["b"])  # cut twice: still one thing to undo
    lab.heal()
    assert connect_from(lab, "a", hosts["b"]) == "hello"
    lab.heal()  # nothing left to heal: nothing happens


def test_slow_adds_a_qdisc_on_both_sides_and_heal_removes_it(lab, hosts):
    def qdiscs() -> str:
        inside = run_command([*lab.command_prefix("b"), "tc", "qdisc", "show"])
        outside = run_command(["tc", "qdisc", "show", "dev", f"{PREFIX}-v2"])
        return inside + outside

    lab.slow("b", rate_kbit=256, delay_ms=50)
    shown = qdiscs()
    assert shown.count("tbf") + shown.count("netem") == 2, shown
    assert connect_from(lab, "a", hosts["b"]) == "hello"  # slower, not cut
    lab.heal()
    shown = qdiscs()
    assert "tbf" not in shown and "netem" not in shown, shown


def test_errors_name_the_command_and_unknown_hosts_are_refused(lab):
    lab.add_host("a")
    with pytest.raises(ValueError, match="already exists"):
        lab.add_host("a")
    with pytest.raises(ValueError, match="unknown host 'z'"):
        lab.cut(["a"], ["z"])
    with pytest.raises(NetworkLabError, match="`ip link del sglab-nothing` failed"):
        run_command(["ip", "link", "del", f"{PREFIX}-nothing"])


def test_a_killed_runs_leftovers_are_removed_by_the_next_lab():
    prefix = "sgkill"
    make_and_wait = (
        "import sys, time\n"
        "from tests.faults.netns import NetworkLab\n"
        f"lab = NetworkLab({prefix!r}, 234)\n"
        "lab.add_host('a'); lab.add_host('b'); lab.cut(['a'], ['b'])\n"
        "print('made', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", make_and_wait], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"made\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    found = leftovers(prefix)
    assert f"{prefix}-a" in found and f"{prefix}-br" in found, found
    with NetworkLab(prefix, 234) as lab:
        assert leftovers(prefix) == [f"{prefix}-br"]
        lab.add_host("a")
    assert leftovers(prefix) == []


def test_a_prefix_in_use_is_refused_and_its_lab_left_alone(lab, hosts):
    with pytest.raises(NetworkLabError, match="is open already"):
        NetworkLab(PREFIX, SUBNET_OCTET + 10)
    assert connect_from(lab, "a", hosts["b"]) == "hello"
