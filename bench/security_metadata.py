"""Metadata operations with the registry in a locked-down etcd against an open one, in the
same run: each side a gateway (registry in etcd) and one storage node; the locked side's
etcd speaks HTTPS only, wants a client certificate from the cluster CA
(`--client-cert-auth`) and has role-based auth on (the gateway's etcd user alone may touch
the registry's prefix: services/gateway/coordination/etcd_auth.py), as `make run ETCD=1
TLS=1` and the production overlay run it. The open side: plain HTTP, no auth. Clients reach
both gateways over plaintext gRPC, so the ratio is etcd's lock-down alone.

The operations, in rounds that take turns between the sides (each figure the best round):
create a topic, describe it, alter a config of it, describe its configs, delete it. Creating,
altering and deleting write the registry's metadata log in etcd; the two describes are
answered from the gateway's image, so their ratio shows only the machine's noise."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from devtools.embedded_etcd import EtcdProcess
from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.rpc.channels import open_channel
from seglog.security.certs import GATEWAY_IDENTITY, CertificateAuthority, write_issued
from seglog.security.tls import TlsFiles
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.coordination.etcd_auth import lock_down
from services.gateway.coordination.etcd_keys import DEFAULT_PREFIX

TOPICS_PER_ROUND = 20
ROUNDS = 3
OPERATIONS = ("create", "describe", "alter config", "describe configs", "delete")
READY_TIMEOUT_S = 60.0


class Side:
    """One gateway + node on its own etcd, and what the bench calls through."""

    def __init__(self, root: Path, locked: bool) -> None:
        self.root = root
        self.etcd: EtcdProcess | None = None
        self.processes: list[ServerProcess] = []
        self.channel: grpc.Channel | None = None
        self.locked = locked

    def start(self) -> gateway_pb2_grpc.GatewayStub:
        etcd_tls = client = None
        if self.locked:
            ca = CertificateAuthority.create()
            ca.write(self.root / "tls")
            for identity, name in (("etcd", "etcd"), ("", "etcd-client")):
                write_issued(ca.issue(identity), self.root / "tls", name)
            etcd_tls, client = (
                TlsFiles(
                    self.root / "tls" / f"{name}.pem",
                    self.root / "tls" / f"{name}.key",
                    self.root / "tls" / "ca.pem",
                )
                for name in ("etcd", "etcd-client")
            )
        self.etcd = EtcdProcess(self.root / "etcd", tls=etcd_tls)
        endpoint = self.etcd.start()
        args = ["--registry-etcd", endpoint]
        env: dict[str, str] = {}
        if client is not None:
            password = secrets.token_hex(16)
            lock_down(
                endpoint,
                DEFAULT_PREFIX + "/",
                {GATEWAY_IDENTITY: password},
                secrets.token_hex(16),
                client,
            )
            args += [
                "--registry-etcd-user", GATEWAY_IDENTITY,
                "--registry-etcd-cert", str(client.cert),
                "--registry-etcd-key", str(client.key),
                "--registry-etcd-ca", str(client.ca),
            ]  # fmt: skip
            env["SEGLOG_REGISTRY_ETCD_PASSWORD"] = password
        gateway = gateway_process("127.0.0.1:0", self.root / "gateway", extra_args=args, env=env)
        self.processes.append(gateway)
        gateway.start()
        node = node_process(1, "127.0.0.1:0", self.root / "node-1", gateway.internal_address)
        self.processes.append(node)
        node.start()
        self.channel = open_channel(gateway.address)
        stub = gateway_pb2_grpc.GatewayStub(self.channel)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + READY_TIMEOUT_S
        request = gateway_pb2.DescribeClusterRequest()
        while not [n for n in stub.DescribeCluster(request).nodes if n.live]:
            if time.monotonic() > deadline:
                raise RuntimeError("the storage node never registered")
            time.sleep(0.05)
        return stub

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        for process in reversed(self.processes):
            process.stop()
        if self.etcd is not None:
            self.etcd.stop()


def _round(stub: gateway_pb2_grpc.GatewayStub, tag: str) -> dict[str, float]:
    """Seconds per operation over TOPICS_PER_ROUND topics, each operation's calls in a row."""
    names = [f"meta-{tag}-{i}" for i in range(TOPICS_PER_ROUND)]

    def create(name: str) -> None:
        request = gateway_pb2.CreateTopicsRequest()
        request.topics.add(name=name, num_partitions=1, replication_factor=1)
        _no_topic_error(stub.CreateTopics(request).topics)

    def alter(name: str) -> None:
        stub.AlterConfigs(gateway_pb2.AlterConfigsRequest(topic=name, set={"retention.ms": "1"}))

    calls: dict[str, Callable[[str], object]] = {
        "create": create,
        "describe": lambda n: stub.DescribeTopics(gateway_pb2.DescribeTopicsRequest(names=[n])),
        "alter config": alter,
        "describe configs": lambda n: stub.DescribeConfigs(
            gateway_pb2.DescribeConfigsRequest(topics=[n])
        ),
        "delete": lambda n: _no_topic_error(
            stub.DeleteTopics(gateway_pb2.DeleteTopicsRequest(names=[n])).topics
        ),
    }
    elapsed = {}
    for operation in OPERATIONS:
        start = time.perf_counter()
        for name in names:
            calls[operation](name)
        elapsed[operation] = time.perf_counter() - start
    return elapsed


def _no_topic_error(results) -> None:  # type: ignore[no-untyped-def]
    for result in results:
        if result.error:
            raise RuntimeError(f"{result.name}: {result.error} {result.error_message}")


def run(root: Path, report: Callable[..., None]) -> None:
    sides = {"open": Side(root / "etcd-open", False), "locked": Side(root / "etcd-locked", True)}
    try:
        stubs = {name: side.start() for name, side in sides.items()}
        best: dict[str, dict[str, float]] = {name: {} for name in sides}
        for round_number in range(ROUNDS):
            for name, stub in stubs.items():
                for operation, seconds in _round(stub, f"{name}-{round_number}").items():
                    best[name][operation] = min(best[name].get(operation, seconds), seconds)
        for operation in OPERATIONS:
            report(
                f"{operation}, etcd TLS+certs+auth vs open (ops/s)",
                TOPICS_PER_ROUND / best["locked"][operation],
                TOPICS_PER_ROUND / best["open"][operation],
                "ops/s",
                0.5,
            )
        total = {name: sum(best[name].values()) for name in sides}
        report(
            "metadata mix, etcd TLS+certs+auth vs open (ops/s)",
            len(OPERATIONS) * TOPICS_PER_ROUND / total["locked"],
            len(OPERATIONS) * TOPICS_PER_ROUND / total["open"],
            "ops/s",
            0.5,
        )
    finally:
        for side in sides.values():
            side.stop()
