"""A network lab for fault tests: each host a Linux network namespace joined by a veth pair to
one bridge in the root namespace (which holds 10.<octet>.0.1, so the test driver and client
processes reach every host), with links cut and slowed for real, and every change undone.

Needs root and iproute2 only. Links are cut by pointing each side's neighbour entry for the
other at a MAC address nobody owns: frames leave, the bridge floods them, no host takes them,
so both directions are dropped silently (as a firewall DROP would, with no error to the
sender), which needs neither iptables nor tc actions. A link is slowed with netem (delay and
rate) when the kernel has it, else with tbf (a rate limit whose queue holds `delay_ms`).

Every name carries the lab's prefix: namespaces `<prefix>-<host>`, links `<prefix>-...`, so
a run killed before `close()` leaves nothing the next lab with that prefix does not remove."""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import re
import subprocess
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)

# A locally administered unicast address no interface in the lab has: frames sent to it are
# flooded by the bridge and dropped by every receiver.
UNOWNED_MAC = "02:00:5e:00:de:ad"
_PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9]{0,9}")
# Interface names are limited to 15 characters: "<prefix>-v<n>" with a 10-character prefix
# leaves room for 999 hosts.
_MAX_HOSTS = 250
COMMAND_TIMEOUT_S = 30.0
# One lock file per prefix, held while a lab lives: the kernel releases it when its process
# dies, so a lab finding it free knows that namespaces with its prefix are leftovers.
LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")


class NetworkLabError(RuntimeError):
    """A command of the lab failed; the message names the command and what it printed."""


def run_command(args: Sequence[str]) -> str:
    """Run one command, raising NetworkLabError (naming the command) when it fails."""
    try:
        done = subprocess.run(
            list(args), check=True, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
    except subprocess.CalledProcessError as exc:
        raise NetworkLabError(
            f"`{' '.join(args)}` failed with exit code {exc.returncode}: "
            f"{(exc.stderr or exc.stdout or '').strip()}"
        ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkLabError(f"`{' '.join(args)}` failed: {exc}") from exc
    return done.stdout


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links in the root namespace carrying `prefix`."""
    namespaces = [
        line.split()[0]
        for line in run_command(["ip", "netns", "list"]).splitlines()
        if line.split() and line.split()[0].startswith(f"{prefix}-")
    ]
    links = [
        name
        for name in _link_names(run_command(["ip", "-o", "link", "show"]))
        if name.startswith(f"{prefix}-")
    ]
    return namespaces + links


def _link_names(listing: str) -> list[str]:
    # `ip -o link` lines read "7: name@peer: <FLAGS> ..."
    names = []
    for line in listing.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


class NetworkLab:
    """Hosts in namespaces on one bridge; `cut`, `slow` and `heal` change their links."""

    def __init__(self, prefix: str, subnet_octet: int = 231) -> None:
        if not _PREFIX_PATTERN.fullmatch(prefix):
            raise ValueError(
                f"prefix {prefix!r}: 1-10 lower-case letters and digits, starting with a letter "
                "(it goes into interface names, which are limited to 15 characters)"
            )
        if not 0 < subnet_octet < 256:
            raise ValueError(f"subnet_octet {subnet_octet}: expected 1-255")
        self.prefix = prefix
        self.subnet = ipaddress.ip_network(f"10.{subnet_octet}.0.0/24")
        self.bridge = f"{prefix}-br"
        self.bridge_ip = f"10.{subnet_octet}.0.1"
        self.hosts: dict[str, str] = {}  # host name -> its IP
        self._namespaces: dict[str, str] = {}  # host name -> namespace
        self._inner_links: dict[str, str] = {}  # host name -> its interface in the namespace
        self._outer_links: dict[str, str] = {}  # host name -> the bridge port in the root
        # Commands that undo each cut and slow, in the order they were applied.
        self._undo: list[list[str]] = []
        self._blinded: set[tuple[str, str]] = set()  # (source, destination) pairs cut
        self._netem: bool | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._lock_fd = _hold_prefix_lock(prefix)
        try:
            self._remove_leftovers()
            self._check_subnet_free()
            run_command(["ip", "link", "add", self.bridge, "type", "bridge"])
            run_command(["ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge])
            run_command(["ip", "link", "set", self.bridge, "up"])
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NetworkLab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _remove_leftovers(self) -> None:
        """A previous lab with this prefix that was killed before `close()`."""
        found = leftovers(self.prefix)
        if found:
            logger.warning("removing a previous network lab's leftovers: %s", found)
        for name in found:
            if name in _namespace_names():
                _remove_namespace(name)
        for name in leftovers(self.prefix):
            # Deleting one end of a veth pair deletes the other; tolerate a name that went
            # with its peer.
            if name in _link_names(run_command(["ip", "-o", "link", "show"])):
                run_command(["ip", "link", "del", name])

    def _check_subnet_free(self) -> None:
        routes = run_command(["ip", "-o", "route", "show", str(self.subnet)]).strip()
        if routes:
            raise NetworkLabError(
                f"{self.subnet} is already routed in the root namespace ({routes}); "
                "choose another subnet_octet"
            )

    def add_host(self, name: str) -> str:
        """A namespace with one interface on the bridge; returns its IP."""
        with self._lock:
            if name in self.hosts:
                raise ValueError(f"host {name!r} already exists")
            index = len(self.hosts) + 1
            if index > _MAX_HOSTS:
                raise ValueError(f"at most {_MAX_HOSTS} hosts")
            ip = str(self.subnet.network_address + index + 1)
            namespace = f"{self.prefix}-{name}"
            outer, inner = f"{self.prefix}-v{index}", f"{self.prefix}-p{index}"
            run_command(["ip", "netns", "add", namespace])
            self._namespaces[name] = namespace
            run_command(
                ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner]
                + ["netns", namespace]
            )
            self._outer_links[name] = outer
            self._inner_links[name] = inner
            run_command(["ip", "link", "set", outer, "master", self.bridge])
            run_command(["ip", "link", "set", outer, "up"])
            inside = self.command_prefix(name)
            run_command([*inside, "ip", "link", "set", "lo", "up"])
            run_command([*inside, "ip", "addr", "add", f"{ip}/24", "dev", inner])
            run_command([*inside, "ip", "link", "set", inner, "up"])
            self.hosts[name] = ip
            return ip

    def command_prefix(self, host: str) -> list[str]:
        """Words that run a command inside the host's namespace (`ip netns exec` execs the
        command, so the process started keeps the pid its launcher sees)."""
        return ["ip", "netns", "exec", self._namespace(host)]

    def _namespace(self, host: str) -> str:
        try:
            return self._namespaces[host]
        except KeyError:
            raise ValueError(f"unknown host {host!r}; hosts: {sorted(self.hosts)}") from None

    def cut(self, group_a: Iterable[str], group_b: Iterable[str]) -> None:
        """Every packet between a host of `group_a` and a host of `group_b` is dropped, both
        ways; each group still reaches its own members and the root namespace."""
        a, b = list(group_a), list(group_b)
        for host in (*a, *b):
            self._namespace(host)
        if set(a) & set(b):
            raise ValueError(f"a host cannot be cut from itself: {sorted(set(a) & set(b))}")
        with self._lock:
            for source, destination in [(x, y) for x in a for y in b] + [
                (y, x) for x in a for y in b
            ]:
                self._blind(source, destination)

    def _blind(self, source: str, destination: str) -> None:
        """`source` sends what it addresses to `destination` to a MAC nobody has."""
        if (source, destination) in self._blinded:
            return
        inside = self.command_prefix(source)
        link = self._inner_links[source]
        ip = self.hosts[destination]
        entry = [ip, "dev", link]
        run_command(
            [*inside, "ip", "neigh", "replace", *entry, "lladdr", UNOWNED_MAC, "nud", "permanent"]
        )
        # Deleting the entry lets ARP learn the real address again.
        self._undo.append([*inside, "ip", "neigh", "del", *entry])
        self._blinded.add((source, destination))

    def slow(self, host: str, rate_kbit: int, delay_ms: int = 0) -> None:
        """The host's link limited to `rate_kbit` each way, plus `delay_ms` of delay with netem;
        without netem a tbf rate limit whose queue holds up to `delay_ms` (at least 200 ms) of
        traffic, so latency grows under load but an idle link is not delayed."""
        if rate_kbit <= 0 or delay_ms < 0:
            raise ValueError(f"rate_kbit {rate_kbit} must be > 0 and delay_ms {delay_ms} >= 0")
        self._namespace(host)
        with self._lock:
            # Both directions: the host's own interface (what it sends) and its bridge port
            # (what it receives).
            for device, inside in (
                (self._inner_links[host], self.command_prefix(host)),
                (self._outer_links[host], []),
            ):
                qdisc = self._slow_qdisc(inside, device, rate_kbit, delay_ms)
                run_command([*inside, "tc", "qdisc", "add", "dev", device, "root", *qdisc])
                self._undo.append([*inside, "tc", "qdisc", "del", "dev", device, "root"])

    def _slow_qdisc(
        self, inside: list[str], device: str, rate_kbit: int, delay_ms: int
    ) -> list[str]:
        if self._has_netem(inside, device):
            return ["netem", "delay", f"{delay_ms}ms", "rate", f"{rate_kbit}kbit"]
        # The burst must hold at least one full frame; a small one keeps the limit tight.
        burst_bytes = max(4096, rate_kbit * 1000 // 8 // 100)
        latency_ms = max(delay_ms, 200)
        return ["tbf", "rate", f"{rate_kbit}kbit", "burst", str(burst_bytes)] + [
            "latency",
            f"{latency_ms}ms",
        ]

    def _has_netem(self, inside: list[str], device: str) -> bool:
        """Asked of the kernel once, by adding and removing a netem qdisc."""
        if self._netem is None:
            try:
                run_command([*inside, "tc", "qdisc", "add", "dev", device, "root", "netem"])
            except NetworkLabError as exc:
                if "unknown" not in str(exc).lower():
                    raise
                logger.info("no netem in this kernel: links are slowed with tbf")
                self._netem = False
            else:
                run_command([*inside, "tc", "qdisc", "del", "dev", device, "root"])
                self._netem = True
        return self._netem

    def heal(self) -> None:
        """Every cut and slow undone, latest first."""
        with self._lock:
            while self._undo:
                run_command(self._undo.pop())
            self._blinded.clear()

    def close(self) -> None:
        """Every namespace, link and the bridge removed (stop the processes inside first: a
        namespace lives on while a process is in it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._undo.clear()  # the links they changed go now
            self._blinded.clear()
        try:
            present = set(_link_names(run_command(["ip", "-o", "link", "show"])))
            for outer in self._outer_links.values():
                if outer in present:
                    run_command(["ip", "link", "del", outer])
            namespaces = _namespace_names()
            for namespace in self._namespaces.values():
                if namespace in namespaces:
                    _remove_namespace(namespace)
            if self.bridge in present:
                run_command(["ip", "link", "del", self.bridge])
        finally:
            os.close(self._lock_fd)  # unlocks


def _hold_prefix_lock(prefix: str) -> int:
    path = LOCK_DIR / f"seglog-network-lab-{prefix}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise NetworkLabError(
            f"a network lab with prefix {prefix!r} is open already ({path} is locked); "
            "use another prefix"
        ) from None
    return fd


def _namespace_names() -> set[str]:
    return {line.split()[0] for line in run_command(["ip", "netns", "list"]).splitlines() if line}


def _remove_namespace(namespace: str) -> None:
    run_command(["ip", "netns", "del", namespace])
