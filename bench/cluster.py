"""A gateway and one storage node as processes, for the benchmarks that go end to end."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin

# As make run and the Kubernetes manifests deploy seglog: with a cluster secret, followers
# and consumers fetch over the bulk path.
CLUSTER_SECRET = "bench-cluster-secret-0123456789abcdef"
CLUSTER_SECRET_ENV = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET}


@contextmanager
def one_node_cluster(
    prefix: str,
    topics: Iterable[str],
    partitions: int,
    *,
    cluster_secret: str | None = None,
    env: dict[str, str] | None = None,
    gateway_args: list[str] | None = None,
    node_args: list[str] | None = None,
) -> Iterator[str]:
    """Start both, wait for the node to register, create `topics`; yield the gateway's
    address; stop both (by their own pids) on the way out. A `cluster_secret` turns on the
    bulk fetch path (the gateway signs transfer grants with it); `env` is added to both
    processes' environment; `gateway_args` and `node_args` are added to their command lines."""
    env = dict(env or {})
    if cluster_secret is not None:
        env["SEGLOG_CLUSTER_SECRET"] = cluster_secret
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        gateway = gateway_process(
            "127.0.0.1:0", root / "gateway", env=env, extra_args=gateway_args or ()
        )
        processes: list[ServerProcess] = [gateway]
        try:
            gateway.start()
            node = node_process(
                1,
                "127.0.0.1:0",
                root / "node-1",
                gateway.internal_address,
                env=env,
                extra_args=node_args or (),
            )
            processes.append(node)
            node.start()
            with Admin(gateway.address) as admin:
                deadline = time.monotonic() + 30
                while not admin.describe_cluster().nodes:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the storage node never registered")
                    time.sleep(0.05)
                for name in topics:
                    admin.create_topic(name, partitions)
            yield gateway.address
        finally:
            for process in reversed(processes):
                process.stop()
