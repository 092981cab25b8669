"""Security benchmarks, each beside a baseline measured in the same run:

- produce and fetch through the gateway with mutual TLS on every hop (client, gateway,
  node), against the same with TLS off: 1 MiB produce requests of 64 x 16 KiB batches
  (SEGLOG_BENCH_SERVICE_MIB per side, as the service bench) and the partition read back;
- the authorizer's cost per 1 MiB produce with 10,000 ACLs (5,000 literal, 5,000 prefixed):
  the gateway's check of one request (its routing scan and the decision) against the time
  of one 1 MiB produce through the plaintext gateway;
- metadata operations with the registry in etcd locked down (TLS, client certificates,
  role-based auth) against an open etcd (bench/security_metadata.py).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.rpc.channels import open_channel
from seglog.security.acls import AclBinding
from seglog.security.certs import (
    GATEWAY_IDENTITY,
    CertificateAuthority,
    node_identity,
    write_issued,
)
from seglog.security.tls import TlsFiles, channel_credentials
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from services import serving
from services.gateway.authorization import Authorization

from . import security_metadata
from .services import (
    MIB,
    ROUNDS,
    SERVICE_MIB,
    _baseline_stream,
    _fetch,
    _produce,
    _request_of_batches,
)
from .timing import best_in_turns


class _Context:
    """What the authorization guard reads of a call: a certificate and a peer address."""

    def auth_context(self) -> dict[str, Any]:
        return {"x509_common_name": [b"alice"]}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"


def _cluster(root: Path, tls: bool) -> tuple[list[ServerProcess], grpc.Channel]:
    flags: dict[str, list[str]] = {}
    credentials = None
    if tls:
        ca = CertificateAuthority.create()
        ca.write(root / "tls")
        for identity in (GATEWAY_IDENTITY, node_identity(1), "bench"):
            write_issued(ca.issue(identity), root / "tls", identity)
        for identity in (GATEWAY_IDENTITY, node_identity(1)):
            flags[identity] = [
                "--tls-cert", str(root / "tls" / f"{identity}.pem"),
                "--tls-key", str(root / "tls" / f"{identity}.key"),
                "--tls-ca", str(root / "tls" / "ca.pem"),
            ]  # fmt: skip
        credentials = channel_credentials(
            TlsFiles(
                root / "tls" / "bench.pem", root / "tls" / "bench.key", root / "tls" / "ca.pem"
            )
        )
    gateway = gateway_process(
        "127.0.0.1:0", root / "gateway", extra_args=flags.get(GATEWAY_IDENTITY, [])
    )
    processes = [gateway]
    gateway.start()
    node = node_process(
        1,
        "127.0.0.1:0",
        root / "node-1",
        gateway.internal_address,
        extra_args=flags.get(node_identity(1), []),
    )
    processes.append(node)
    node.start()
    channel = open_channel(gateway.address, credentials=credentials)
    stub = gateway_pb2_grpc.GatewayStub(channel)  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + 30
    while not [
        n for n in stub.DescribeCluster(gateway_pb2.DescribeClusterRequest()).nodes if n.live
    ]:
        if time.monotonic() > deadline:
            raise RuntimeError("the storage node never registered")
        time.sleep(0.05)
    request = gateway_pb2.CreateTopicsRequest()
    request.topics.add(name="sec", num_partitions=1, replication_factor=1)
    stub.CreateTopics(request)
    return processes, channel


def _bare_relay(root: Path, tls: bool) -> tuple[list[ServerProcess], grpc.Channel]:
    """An echo server and a relay in front of it (bench/echo_server.py), with mutual TLS on
    both hops or none; the channel dials the relay."""
    args: list[str] = []
    credentials = None
    if tls:
        ca = CertificateAuthority.create()
        ca.write(root)
        write_issued(ca.issue("bench"), root, "bench")
        files = TlsFiles(root / "bench.pem", root / "bench.key", root / "ca.pem")
        args = ["--tls", str(files.cert), str(files.key), str(files.ca)]
        credentials = channel_credentials(files)
    echo = ServerProcess("echo", "bench.echo_server", args)
    echo.start()
    relay = ServerProcess("relay", "bench.echo_server", [*args, "--relay-to", echo.address])
    relay.start()
    return [echo, relay], open_channel(relay.address, credentials=credentials)


def run(report) -> None:  # type: ignore[no-untyped-def]
    serving.keep_freed_buffers_for_reuse()
    with tempfile.TemporaryDirectory(prefix="seglog-bench-security-") as tmp:
        root = Path(tmp)
        processes: list[ServerProcess] = []
        try:
            plain_processes, plain = _cluster(root / "plain", tls=False)
            processes += plain_processes
            tls_processes, secure = _cluster(root / "tls", tls=True)
            processes += tls_processes
            payload = _request_of_batches("sec", 16 * 1024, 64)
            calls = max(1, SERVICE_MIB // ROUNDS)
            mb = calls * len(payload) / MIB
            produce_s = best_in_turns(
                {
                    "plain": lambda: _produce(plain, "/seglog.v1.Gateway/Produce", payload, calls),
                    "tls": lambda: _produce(secure, "/seglog.v1.Gateway/Produce", payload, calls),
                },
                ROUNDS,
            )
            report(
                "produce via gateway, mutual TLS vs plaintext (MB/s)",
                mb / produce_s["tls"],
                mb / produce_s["plain"],
                "MB/s",
                0.7,
            )
            end = ROUNDS * (calls + 1) * 64
            fetch_s = best_in_turns(
                {
                    "plain": lambda: _fetch(plain, "/seglog.v1.Gateway/Fetch", "sec", end)[0],
                    "tls": lambda: _fetch(secure, "/seglog.v1.Gateway/Fetch", "sec", end)[0],
                },
                ROUNDS,
            )
            _, moved = _fetch(plain, "/seglog.v1.Gateway/Fetch", "sec", end)
            fetched = moved / MIB
            report(
                "fetch via gateway, mutual TLS vs plaintext (MB/s)",
                fetched / fetch_s["tls"],
                fetched / fetch_s["plain"],
                "MB/s",
                0.7,
            )
            # The same stream through bare two-hop relays (no work), TLS on both hops
            # against none: the ceiling of the ratio above on this machine.
            relays = {
                name: _bare_relay(root / f"relay-{name}", name == "tls")
                for name in ("plain", "tls")
            }
            for relay_processes, _ in relays.values():
                processes += relay_processes
            relayed_s = best_in_turns(
                {
                    name: lambda channel=channel: _baseline_stream(channel, moved)
                    for name, (_, channel) in relays.items()
                },
                ROUNDS,
            )
            report(
                "  bare two-hop stream relay, TLS vs plaintext (MB/s)",
                fetched / relayed_s["tls"],
                fetched / relayed_s["plain"],
                "MB/s",
                None,
            )
            # The authorizer: 10,000 ACLs, one produce's check against one produce's time.
            acls = [
                AclBinding(f"User:u{i}", "*", "topic", "literal", f"t-{i}", "Write", "allow")
                for i in range(5000)
            ] + [
                AclBinding(f"User:p{i}", "*", "topic", "prefixed", f"p-{i}-", "Write", "allow")
                for i in range(5000)
            ]
            acls.append(AclBinding("User:alice", "*", "topic", "literal", "sec", "Write", "allow"))
            guard = Authorization(acls, enabled=True).guard("Produce", lambda r, c: None)
            context = _Context()
            checks = 2000
            start = time.perf_counter()
            for _ in range(checks):
                guard(payload, context)
            check_s = (time.perf_counter() - start) / checks
            produce_one_s = produce_s["plain"] / calls
            ratio = check_s / produce_one_s
            label = "authorization per 1 MiB produce, 10k ACLs (us)"
            print(
                f"{label:48s} {check_s * 1e6:10.1f} us       "
                f"produce {produce_one_s * 1e6:10.1f} us       share {ratio * 100:5.2f}%"
                f"{'  ok' if ratio < 0.05 else '  ABOVE 5%'}"
            )
            for channel in (plain, secure):
                channel.close()
        finally:
            for process in reversed(processes):
                process.stop()
        security_metadata.run(root / "metadata", report)
