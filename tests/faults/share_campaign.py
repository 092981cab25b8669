"""The share-group workload's part in a fault campaign (campaign.py calls it when
`--share-members N` is given): N share group members (share_workload.py) read the campaign's
topic as a queue through the gateways' Kafka listeners while the faults run, their histories
in a directory of their own (`history/share`, which the producers' checker does not read);
after the producers stop, the members are given time to finish every acknowledged send, then
stopped, and share_checker.py judges them: every acknowledged record done (acknowledged, or
archived at the delivery limit), none acknowledged twice or delivered after its confirmed
acknowledgement, no delivery count repeated.

The campaign's gateways start share groups at the log start (`share.auto.offset.reset`
earliest), so every acknowledged send is expected, whenever the members began.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.faults.history import read_history
from tests.faults.share_checker import ShareVerdict, check_share

SHARE_GROUP = "campaign-queue"
GATEWAY_ARGS = ("--share-auto-offset-reset", "earliest")
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit's default
SETTLE_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
REPO_ROOT = Path(__file__).resolve().parents[2]


class ShareMembers:
    def __init__(
        self, root: Path, history_dir: Path, bootstrap: str, topic: str, topic_id: str
    ) -> None:
        self.root = root
        self.sends_dir = history_dir
        self.history_dir = history_dir / "share"
        self.args = [
            "--bootstrap", bootstrap, "--topic", topic, "--topic-id", topic_id,
            "--group", SHARE_GROUP, "--history-dir", str(self.history_dir),
        ]  # fmt: skip
        self.processes: list[subprocess.Popen] = []

    def start(self, count: int) -> None:
        for _ in range(count):
            name = f"share-{len(self.processes)}"
            log = open(self.root / "logs" / f"{name}.log", "ab")  # noqa: SIM115
            try:
                self.processes.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "tests.faults.share_workload",
                            *self.args,
                            "--name",
                            name,
                        ],
                        cwd=REPO_ROOT,
                        stdout=log,
                        stderr=log,
                    )  # fmt: skip
                )
            finally:
                log.close()

    def expected(self) -> set[tuple[int, int]]:
        """Every send the cluster acknowledged, as (partition, offset)."""
        return {
            (e.value["partition"], e.value["offset"])
            for e in read_history(self.sends_dir)
            if e.f == "send" and e.type == "ok"
        }

    def verdict(self) -> ShareVerdict:
        return check_share(read_history(self.history_dir), self.expected(), DELIVERY_LIMIT)

    def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
        """Wait (the producers stopped) until every acknowledged send is done; whether it
        was in time."""
        from tests.waiting import wait_until

        return wait_until(lambda: self.verdict().ok, timeout_s)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
