"""`make bench-compare` and CI's coarse bench guard: each ratio of the quick groups against
the one committed in bench/baseline.json.

A ratio (seglog's figure over a baseline measured in the same run, bench/__main__.py) moves
with the machine far less than either figure does, but a shared 2-core machine still moves
it: 10-20% between runs under load. So the guard takes the best of `--runs` runs of each
ratio (a slowdown shows in every run; noise in some) and names every ratio whose best fell
by more than `--threshold` from its baseline (for a figure where lower is better, rose):
`make bench-compare` at 15% (one run: a report for whoever changed the code),
`make bench-guard` (CI) at 40% with two runs, so only a real slowdown fails it.

The quick groups run at sizes that take about a minute (QUICK_ENV); the baseline is
measured at the same sizes (`--write-baseline`), and updated in the commit that changes a
figure on purpose, with the reason in the message. It holds each ratio's median of the runs
that measured it (`--runs 3` or more), so that a lucky run does not set the bar.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BASELINE = Path(__file__).with_name("baseline.json")
QUICK_GROUPS = ("engine",)
MIB = 1024 * 1024
# The engine group's logs at a quarter of make bench's sizes: ~40 s on two idle cores.
QUICK_ENV = {
    "SEGLOG_BENCH_LOG_BYTES": str(256 * MIB),
    "SEGLOG_BENCH_APPEND_MIB": "256",
}

Ratios = dict[str, dict[str, float | str | bool]]


def measure(groups: list[str]) -> Ratios:
    """One run of `python -m bench GROUPS` at the quick sizes; its ratios."""
    with tempfile.TemporaryDirectory(prefix="seglog-bench-guard-") as tmp:
        results = Path(tmp) / "ratios.json"
        env = {**os.environ, **QUICK_ENV, "SEGLOG_BENCH_RESULTS": str(results)}
        subprocess.run([sys.executable, "-m", "bench", *groups], env=env, check=True)
        ratios: Ratios = json.loads(results.read_text())
        return ratios


def best(runs: list[Ratios]) -> Ratios:
    """Each figure's best ratio over the runs (the highest, or the lowest where lower is
    better), with the load average of the run it came from."""
    merged: Ratios = {}
    for run in runs:
        for name, entry in run.items():
            kept = merged.get(name)
            higher = bool(entry.get("higher_is_better", True))
            if kept is None or (
                float(entry["ratio"]) > float(kept["ratio"])
                if higher
                else float(entry["ratio"]) < float(kept["ratio"])
            ):
                merged[name] = entry
    return merged


def median(runs: list[Ratios]) -> Ratios:
    """Each figure's median ratio over the runs: what a baseline holds, so that the guard's
    best-of-runs is compared with a typical run, not with the luckiest one."""
    merged: Ratios = {}
    for name in runs[0]:
        entries = sorted(
            (run[name] for run in runs if name in run), key=lambda entry: float(entry["ratio"])
        )
        merged[name] = entries[len(entries) // 2]
    return merged


def fallen(baseline: Ratios, measured: Ratios, threshold: float) -> list[str]:
    """A line for every figure of the baseline, and the names of those that fell by more
    than `threshold` (printed as they are compared)."""
    names = []
    for name, base in sorted(baseline.items()):
        entry = measured.get(name)
        if entry is None:
            print(f"{name:60s} not measured")
            continue
        was, now = float(base["ratio"]), float(entry["ratio"])
        higher = bool(base.get("higher_is_better", True))
        change = (now - was) / was if higher else (was - now) / was
        fell = change < -threshold
        print(
            f"{name:60s} ratio {now:6.2f}x baseline {was:6.2f}x {change:+7.1%}"
            f"  (load {entry.get('load', '?')}, baseline's {base.get('load', '?')})"
            f"{'  FELL' if fell else ''}"
        )
        if fell:
            names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard", description=__doc__)
    parser.add_argument("--groups", nargs="*", default=list(QUICK_GROUPS))
    parser.add_argument("--threshold", type=float, default=0.15)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument(
        "--write-baseline", action="store_true", help="measure and write the baseline instead"
    )
    args = parser.parse_args(argv)
    runs = [measure(args.groups) for _ in range(max(1, args.runs))]
    if args.write_baseline:
        written = median(runs)
        args.baseline.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
        print(f"baseline written to {args.baseline}")
        return 0
    measured = best(runs)
    baseline: Ratios = json.loads(args.baseline.read_text())
    print(f"\nagainst {args.baseline} (best of {args.runs} run(s), {args.threshold:.0%} allowed):")
    names = fallen(baseline, measured, args.threshold)
    if names:
        print(f"{len(names)} figure(s) fell by more than {args.threshold:.0%}:")
        for name in names:
            print(f"  {name}")
        return 1
    print("no figure fell by more than the threshold")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
