"""A node restarted against a registry of another cluster (a fresh gateway): it must refuse
and exit with its data untouched (fault_kinds.py says what a fault is)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from devtools.processes import ServerProcess
from tests.faults.cluster import NOTICE_TIMEOUT_S, Cluster
from tests.faults.fault_kinds import OnANode, pick_node
from tests.waiting import wait_until


@dataclass
class NodeForeignRegistry(OnANode):
    """A node restarted against a registry it was never registered with (a fresh gateway:
    another cluster): it must refuse and exit, nothing of its data set aside; restarted
    against its own registry when healed, it serves what it held."""

    name: str = "node-foreign-registry"

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        own = cluster.nodes[self.node_id]
        data_dir = cluster.root / f"node-{self.node_id}"
        own.kill()
        held = _partition_dirs(data_dir)
        identity = (data_dir / "meta.properties").read_bytes()
        foreign = cluster.start_foreign_gateway(self.node_id)
        try:
            misled = ServerProcess(
                own.name,
                own.module,
                _with_gateway(own.args, foreign.internal_address),
                env=own.env,
                stderr_path=own.stderr_path,
                command_prefix=own.command_prefix,
            )
            misled.start()
            exited = wait_until(lambda: not misled.alive(), NOTICE_TIMEOUT_S)
            misled.kill()
            code = misled.process.returncode if misled.process is not None else None
        finally:
            foreign.stop()
        if not exited or code != 1:
            raise AssertionError(f"node {self.node_id} served a foreign registry (exit {code})")
        if _partition_dirs(data_dir) != held:
            raise AssertionError(
                f"node {self.node_id}'s partitions changed under a foreign registry: "
                f"{sorted(held)} -> {sorted(_partition_dirs(data_dir))}"
            )
        if (data_dir / "meta.properties").read_bytes() != identity:
            raise AssertionError(f"node {self.node_id}'s meta.properties was rewritten")
        own.start()
        return f"SIGKILL {which}, restarted against a foreign registry: refused, then its own"


def _with_gateway(args: list[str], address: str) -> list[str]:
    at = args.index("--gateway")
    return [*args[: at + 1], address, *args[at + 2 :]]


def _partition_dirs(data_dir: Path) -> set[str]:
    """Every directory in a node's data dir: partitions and any set aside as strays."""
    return {p.name for p in data_dir.iterdir() if p.is_dir()}
