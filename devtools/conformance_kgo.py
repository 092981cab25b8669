"""franz-go's kgo integration tests as a test binary, for `make conformance` and the suite's
fast subset: the module at the version devtools/conformance_go/go.mod pins, fetched from the Go
module proxy into .cache/go (nothing of it committed), `go test -c` of its pkg/kgo built once
into .cache/conformance, the tests that dial a cluster found in its sources, and one test run
against a cluster's Kafka listener with its results read from test2json's events.

The kgo tests dial `KGO_SEEDS`; `KGO_TEST_RF` is the replication factor of the topics they
create (3 unless set), `KGO_TEST_RECORDS` how many records the ETL tests push (500,000 unless
set: far more than a conformance check needs on two cores).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GO_MODULE = Path(__file__).resolve().parent / "conformance_go"
CACHE = ROOT / ".cache"
BINARY_DIR = CACHE / "conformance"
FRANZ_GO = "github.com/twmb/franz-go"
KGO_PACKAGE = f"{FRANZ_GO}/pkg/kgo"
INSTALL_HINT = "make kgo builds franz-go's kgo tests (Go and the Go module proxy)"
# The helper every kgo test that talks to a cluster reaches (helpers_test.go: it reads
# KGO_SEEDS); a test that never reaches it runs on in-memory fakes only.
SEED_HELPER = "getSeedBrokers"
# A test's output lines kept for its failure's reason (the ETL tests log thousands).
KEPT_LINES = 400


def pinned_version() -> str:
    """The franz-go version go.mod requires."""
    match = re.search(
        rf"^require {re.escape(FRANZ_GO)} (v\S+)", (GO_MODULE / "go.mod").read_text(), re.M
    )
    if match is None:
        raise RuntimeError(f"{GO_MODULE / 'go.mod'} requires no {FRANZ_GO}")
    return match.group(1)


def go_env() -> dict[str, str]:
    """Go's caches inside .cache (a fresh machine needs nothing but Go and the proxy); the
    local toolchain only (no toolchain download); go.sum completed by Go where it lacks a line."""
    go = CACHE / "go"
    return {
        **os.environ,
        "GOPATH": str(go),
        "GOMODCACHE": str(go / "mod"),
        "GOCACHE": str(go / "build"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
    }


def binary_path() -> Path:
    return BINARY_DIR / f"kgo-{pinned_version()}.test"


def built() -> bool:
    return binary_path().exists() and source_dir().is_dir()


def source_dir() -> Path:
    """pkg/kgo in the module cache (where its *_test.go files are read from)."""
    return CACHE / "go" / "mod" / f"{FRANZ_GO.lower()}@{pinned_version()}" / "pkg" / "kgo"


def build(timeout_s: float = 1800.0) -> Path:
    """Download the module and compile kgo's tests once into .cache/conformance (a few minutes
    the first time on two cores; nothing when the binary is there)."""
    binary = binary_path()
    if binary.exists() and source_dir().is_dir():
        return binary
    BINARY_DIR.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    env = go_env()
    subprocess.run(
        ["go", "mod", "download", f"{FRANZ_GO}@{pinned_version()}"],
        cwd=GO_MODULE, env=env, check=True, timeout=timeout_s,
    )  # fmt: skip
    subprocess.run(
        ["go", "test", "-c", "-o", str(partial), KGO_PACKAGE],
        cwd=GO_MODULE, env=env, check=True, timeout=timeout_s,
    )  # fmt: skip
    partial.replace(binary)  # a build cut short never passes for a whole one
    return binary


def integration_tests(directory: Path | None = None) -> list[str]:
    """The Test functions of pkg/kgo that reach SEED_HELPER through the test files' own
    functions: their call graph by name (methods and functions of one name merged, so it
    errs towards including a test; one that does not dial passes on both sides anyway)."""
    directory = directory or source_dir()
    bodies: dict[str, str] = {}
    declaration = re.compile(r"^func (?:\([^)]*\) )?(\w+)", re.M)
    for path in sorted(directory.glob("*_test.go")):
        text = path.read_text()
        starts = list(declaration.finditer(text))
        for index, start in enumerate(starts):
            end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
            name = start.group(1)
            bodies[name] = bodies.get(name, "") + text[start.end() : end]
    calls = {
        name: set(re.findall(r"\b(\w+)\s*\(", body)) & bodies.keys()
        for name, body in bodies.items()
    }
    reaching = {SEED_HELPER}
    changed = True
    while changed:  # a fixed point over at most len(bodies) rounds
        changed = False
        for name, callees in calls.items():
            if name not in reaching and callees & reaching:
                reaching.add(name)
                changed = True
    return sorted(name for name in reaching if re.fullmatch(r"Test\w*", name))


# Tests whose parallel subtests are run one at a time, on both sides. TestGroupSimple's 848
# subtest checks franz-go's allow848 (set by the first ApiVersions of its shared admin client,
# adm()) without calling adm() first, while its classic sibling makes that call at the same
# moment: run in parallel, the 848 subtest reads the flag before it is set and skips itself
# ("broker does not support KIP-848") on any broker; one at a time, the classic subtest has
# set it and the 848 one runs.
SERIAL_SUBTESTS = frozenset({"TestGroupSimple"})


@dataclass
class KgoResult:
    """One test's (or subtest's) outcome on one cluster: pass, fail or skip."""

    name: str
    action: str = "fail"
    elapsed_s: float = 0.0
    output: list[str] = field(default_factory=list)

    def reason(self) -> str:
        """Why it failed or skipped, in one line: a timeout's panic, else the test's own error
        lines (file:line: ...), else the last line it printed that is not go test's own."""
        lines = [line.strip() for line in self.output if line.strip()]
        timeout = [line for line in lines if line.startswith("panic: test timed out")]
        located = [
            line for line in lines if re.match(r"\w+_test\.go:\d+:", line) and "[INFO]" not in line
        ]
        # t.Logf and t.Errorf print alike: the lines that read as errors first (not the
        # helpers' "FAILED TESTING -- NOT DELETING ..." that every failure prints).
        errors = [
            line
            for line in located
            if re.search(r"err|unexpected|unable|fail|timed out|expected", line, re.I)
            and "NOT DELETING" not in line
        ]
        own = [line for line in lines if not line.startswith(("=== ", "--- "))]
        picked = timeout[:1] or errors[:2] or located[:2] or own[-1:]
        return " | ".join(picked)[:300] or self.action


@dataclass
class Run:
    """One top-level test's process: its results (the test and its subtests) and wall time."""

    test: str
    results: dict[str, KgoResult]
    wall_s: float
    timed_out: bool = False
    attempts: int = 1
    earlier_failure: str = ""  # the first attempt's reason, when it took a second


def run_test(
    test: str,
    seeds: str,
    *,
    timeout_s: float,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
) -> Run:
    """`test` alone in its own process against `seeds` (so a hang or a crash costs only that
    test), bounded by `timeout_s`; all it printed (test2json's events, kgo's logs) into
    `log_path`."""
    env = {**go_env(), "KGO_SEEDS": seeds, **(extra_env or {})}
    command = [
        "go", "tool", "test2json", "-t", "-p", "kgo", str(binary_path()),
        "-test.v=test2json", "-test.run", f"^{test}$", "-test.count=1",
        f"-test.timeout={int(timeout_s)}s",
    ]  # fmt: skip
    if test in SERIAL_SUBTESTS:
        command.append("-test.parallel=1")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, KgoResult] = {}
    timed_out = False
    # Events straight into the log (readable while the test runs), read back at its end.
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=source_dir(),  # tests that read testdata/ find it
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # Past its own -test.timeout, test2json and the binary are ended here (a test
            # stuck in a syscall would not panic): a minute's grace for the panic's report.
            process.wait(timeout=timeout_s + 60)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    wall = time.monotonic() - started
    output = log_path.read_bytes()
    for line in output.decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("Action") == "output" and "panic: test timed out" in event.get("Output", ""):
            timed_out = True  # said in the running test's output, or the package's
        name = event.get("Test")
        if not name:
            continue
        result = results.setdefault(name, KgoResult(name))
        action = event.get("Action")
        if action == "output":
            result.output.append(event.get("Output", "").rstrip("\n"))
            del result.output[:-KEPT_LINES]
        elif action in ("pass", "fail", "skip"):
            result.action = action
            result.elapsed_s = float(event.get("Elapsed", 0.0))
    if test not in results:
        results[test] = KgoResult(test, "fail", wall, [f"no result (exit {process.returncode})"])
    if timed_out:
        for result in results.values():
            if result.action == "fail" and not result.elapsed_s:
                last = result.reason()
                last = "no output of its own" if last == result.action else last
                result.output.append(f"timed out after {timeout_s:.0f} s; its last word: {last}")
    return Run(test, results, wall, timed_out)
