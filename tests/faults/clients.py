"""The campaign's client processes (tests/faults/workload.py): producers and a consumer
group while the faults run, the final reader after; each stopped by its own pid. A client
killed by a fault is replaced by a new one under a new name, so every history file belongs
to one process."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_STOP_TIMEOUT_S = 60.0


RECORDS_MODULE = "tests.faults.workload"


class ClientProcess:
    """One workload process (tests/faults/workload.py, or `module`), stopped by its own pid."""

    def __init__(
        self,
        root: Path,
        role: str,
        name: str,
        args: Sequence[str],
        module: str = RECORDS_MODULE,
    ) -> None:
        self.name = name
        log = open(root / "logs" / f"{name}.log", "ab")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, role, "--name", name, *args],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()

    def stop(self, timeout_s: float = CLIENT_STOP_TIMEOUT_S) -> int:
        """SIGTERM (the client finishes what it is doing), SIGKILL past `timeout_s`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return self.process.returncode


PRODUCE_TRANSPORTS = ("auto", "grpc")
# Every other producer sends straight to its leaders (under produce grants), the others
# through the gateway, behind its fault proxy when there is one: each path meets the
# campaign's faults.
RECORDS_PRODUCER_VARIANTS = tuple(("--produce-transport", t) for t in PRODUCE_TRANSPORTS)


class Clients:
    """The producers and consumers of a campaign: the n-th of a role started gets its role's
    arguments and the (n mod count)-th of its variants' (a producer's transport, a
    consumer's isolation level)."""

    def __init__(
        self,
        root: Path,
        producer_args: Sequence[str],
        consumer_args: Sequence[str],
        module: str = RECORDS_MODULE,
        producer_variants: Sequence[Sequence[str]] = RECORDS_PRODUCER_VARIANTS,
        consumer_variants: Sequence[Sequence[str]] = ((),),
    ) -> None:
        self.root = root
        self.producer_args = list(producer_args)
        self.consumer_args = list(consumer_args)
        self.module = module
        self.variants = {"producer": producer_variants, "consumer": consumer_variants}
        self.producers: list[ClientProcess] = []
        self.consumers: list[ClientProcess] = []
        self._started = {"producer": 0, "consumer": 0}

    def start(self, role: str) -> ClientProcess:
        index = self._started[role]
        name = f"{role}-{index}"
        self._started[role] += 1
        variants = self.variants[role]
        common = self.producer_args if role == "producer" else self.consumer_args
        args = [*common, *variants[index % len(variants)]]
        client = ClientProcess(self.root, role, name, args, self.module)
        (self.producers if role == "producer" else self.consumers).append(client)
        return client

    def kill_and_replace(self, rng: random.Random) -> str:
        """SIGKILL one running producer or consumer (its last sends stay unanswered, its
        group membership lapses) and start another in its place."""
        role = rng.choice(("producer", "consumer"))
        running = [c for c in getattr(self, f"{role}s") if c.process.poll() is None]
        if not running:
            return f"no {role} running to kill"
        victim = rng.choice(running)
        victim.process.kill()
        victim.process.wait()
        replacement = self.start(role)
        return f"SIGKILL {victim.name}, replaced by {replacement.name}"

    def stop_producers(self) -> None:
        for client in self.producers:
            client.stop()

    def stop_all(self) -> None:
        for client in (*self.producers, *self.consumers):
            client.stop()
