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
import time
from dataclasses import dataclass
from pathlib import Path

from tests.faults.history import read_history
from tests.faults.share_checker import ShareVerdict, check_share

SHARE_GROUP = "campaign-queue"
GATEWAY_ARGS = ("--share-auto-offset-reset", "earliest")
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit's default
# How long the members may go without finishing one more record once the producers stopped:
# a queue that drains slowly is not a finding, one that stops draining (locks never
# released, records never delivered) is. A 100-cycle campaign on a loaded 2-core machine
# left ~79,000 records still queued after a fixed 180 s, draining at ~300 a second.
STALL_TIMEOUT_S = 180.0
SETTLE_MAX_S = 3600.0
# Records a member takes per ShareFetch (Kafka's share consumer takes up to 500): at 20 the
# members fell ~170,000 records behind two producers over 100 cycles.
MAX_RECORDS = 100
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
            "--max-records", str(MAX_RECORDS),
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

    def verdict(self, expected: set[tuple[int, int]] | None = None) -> ShareVerdict:
        if expected is None:
            expected = self.expected()
        return check_share(read_history(self.history_dir), expected, DELIVERY_LIMIT)

    def settle(self, stall_timeout_s: float = STALL_TIMEOUT_S) -> bool:
        """Wait (the producers stopped) until every acknowledged send is done, as long as
        the members keep finishing records (at most SETTLE_MAX_S); whether they did."""
        from tests.waiting import wait_until

        deadline = time.monotonic() + SETTLE_MAX_S
        # the producers stopped: what is expected is read once (a long run's histories are
        # hundreds of MB)
        progress = _Progress(self, self.expected())
        while time.monotonic() < deadline:
            interval_s = min(5.0, stall_timeout_s / 4)  # each look reads the histories
            if not wait_until(progress.moved, stall_timeout_s, interval_s=interval_s):
                return False  # no record finished for stall_timeout_s
            if progress.finished:
                return True
        return False

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


@dataclass
class _Progress:
    """The share checker's count of acknowledged records, looked at again and again."""

    members: ShareMembers
    expected: set[tuple[int, int]]
    done: int = -1  # records acknowledged at the last look
    finished: bool = False  # every acknowledged send done

    def moved(self) -> bool:
        """Whether every send is done now, or more records are acknowledged than before."""
        verdict = self.members.verdict(self.expected)
        self.finished = verdict.ok
        moved = verdict.acknowledged > self.done
        self.done = max(self.done, verdict.acknowledged)
        return self.finished or moved
