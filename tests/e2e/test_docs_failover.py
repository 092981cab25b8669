"""docs/replication.md's "Watching a failover under `make run`" block, run line by line in order
against a whole `make run` (issue 57: every command of the guides is run by a test): only its
placeholders (the leader's node pid, make run's pid, both printed by make run's banner) and `$S`
are filled in, and what each line's comment promises is checked. It lives apart from
tests/integration/test_docs_commands.py because it needs make run (its pids, SIGHUP), which
makes it a `make test-long` test (tests/unit/test_test_targets.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from devtools.processes import children
from tests.cluster import local_cluster_command
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
HEADING = "Watching a failover under `make run`:"
# docs/quickstart.md's `S=` line: the CLI, run from the repository's root.
SEGLOG = ".venv/bin/seglog"
LEADER_PID = "<pid of the leader's node, printed by make run>"
RUN_PID = "<pid of make run>"
# A node's heartbeats stop for --session-timeout-ms (9 s) before it is fenced; each CLI
# process costs a second or two on a loaded machine.
FAILOVER_TIMEOUT_S = 90.0
REJOIN_TIMEOUT_S = 90.0
DESCRIBED = re.compile(
    r"\tPartition: 0\tLeader: (-?\d+)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)\tLeaderEpoch: (\d+)"
)


class Partition(NamedTuple):
    leader: int
    replicas: frozenset[int]
    isr: frozenset[int]
    leader_epoch: int


class Banner(NamedTuple):
    address: str
    node_pids: dict[int, int]  # node id -> pid
    run_pid: int


def _failover_block() -> list[str]:
    text = (ROOT / "docs" / "replication.md").read_text()
    block = text.split(HEADING, 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def _read_banner(runner: subprocess.Popen, errors: Path) -> Banner:
    """make run's banner, up to its last line (the one naming make run's pid for SIGHUP)."""
    address, node_pids = "", {}
    for line in iter(runner.stdout.readline, ""):
        if found := re.search(r"gateway on (\S+)", line):
            address = found[1]
        if found := re.search(r"storage node-(\d+) on \S+ \(pid (\d+)\)", line):
            node_pids[int(found[1])] = int(found[2])
        if found := re.search(r"kill -HUP (\d+) restarts dead nodes", line):
            return Banner(address, node_pids, int(found[1]))
    raise AssertionError(f"make run ended before its banner: {errors.read_text()[-3000:]}")


def _stop(runner: subprocess.Popen) -> None:
    """make run stopped as Ctrl-C would; its servers by their own pids if it will not stop."""
    runner.send_signal(signal.SIGTERM)
    try:
        runner.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for pid in children(runner.pid):
            os.kill(pid, signal.SIGKILL)
        runner.kill()
        runner.wait()
        raise


@pytest.mark.long  # a whole make run
@pytest.mark.slow
def test_the_replication_guides_failover_block_runs_in_order_under_make_run(tmp_path):
    errors = tmp_path / "cluster.err"
    with open(errors, "wb") as err:
        runner = subprocess.Popen(
            local_cluster_command(tmp_path / "data"), stdout=subprocess.PIPE, stderr=err, text=True
        )
    try:
        banner = _read_banner(runner, errors)
        assert len(banner.node_pids) == 3 and banner.run_pid == runner.pid, banner
        env = {**os.environ, "SEGLOG_BOOTSTRAP": banner.address}

        def run(line: str) -> str:
            """The line as a reader's shell runs it: its stdout (it must succeed)."""
            assert "<" not in line, f"a placeholder this test does not fill in: {line}"
            ran = subprocess.run(
                ["bash", "-c", "set -o pipefail\n" + line.replace("$S", SEGLOG)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-3000:])
            return ran.stdout

        def described(line: str) -> Partition:
            found = DESCRIBED.search(run(line))
            assert found, line
            replicas, isr = (frozenset(int(n) for n in found[i].split(",") if n) for i in (2, 3))
            return Partition(int(found[1]), replicas, isr, int(found[4]))

        lines = iter(_failover_block())
        create = next(lines)
        assert create.startswith("$S topics create payments"), create
        run(create)
        produce = next(lines)
        assert produce.startswith("seq 1 1000 | $S produce payments"), produce
        run(produce)
        describe = next(lines)
        assert describe.startswith("$S topics describe payments"), describe
        before = described(describe)
        # "3 replicas" (make run's default replication factor), led by one of make run's nodes.
        assert before.replicas == set(banner.node_pids) and before.leader in before.isr, before

        kill = next(lines)
        assert kill.startswith("kill -9 ") and LEADER_PID in kill, kill
        run(kill.replace(LEADER_PID, str(banner.node_pids[before.leader])))
        # "after ~9 s: a new leader from the ISR, a higher LeaderEpoch": the same line again
        # until the leader moved, then what the comment promises.
        describe = next(lines)
        assert describe.startswith("$S topics describe payments"), describe
        after = [before]

        def moved() -> bool:
            after.append(described(describe))
            return after[-1].leader not in (before.leader, -1)

        assert wait_until(moved, timeout_s=FAILOVER_TIMEOUT_S, interval_s=0.5), after[-1]
        assert after[-1].leader in before.isr, (before, after[-1])
        assert after[-1].leader_epoch > before.leader_epoch, (before, after[-1])
        # The dead node is out of the ISR, so its return below has something to show.
        assert before.leader not in after[-1].isr, (before, after[-1])

        produce = next(lines)
        assert produce.startswith("seq 1001 2000 | $S produce payments"), produce
        run(produce)  # acks=all (the default) with two of three replicas

        hup = next(lines)
        assert hup.startswith("kill -HUP ") and RUN_PID in hup, hup
        run(hup.replace(RUN_PID, str(banner.run_pid)))
        # "the node returns, catches up, rejoins the ISR".
        rejoined = [after[-1]]

        def back_in_the_isr() -> bool:
            rejoined.append(described(describe))
            return before.leader in rejoined[-1].isr

        assert wait_until(back_in_the_isr, timeout_s=REJOIN_TIMEOUT_S, interval_s=0.5), (
            rejoined[-1],
            errors.read_text()[-3000:],
        )

        consume = next(lines)
        assert consume.startswith("$S consume payments --from-beginning"), consume
        assert run(consume).strip() == "2000"
        assert next(lines, None) is None, "a line this test does not run"
    finally:
        _stop(runner)
