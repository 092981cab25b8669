"""The bench guard's judgement (bench/guard.py) on ratios as make bench writes them: a ratio
fails only when its best run fell past the threshold; lower-is-better figures fail by rising;
a baseline is each ratio's median run."""

from __future__ import annotations

from bench.guard import best, fallen, median


def _run(**ratios: float) -> dict[str, dict[str, float | str | bool]]:
    return {
        name.replace("_", " "): {"ratio": ratio, "load": 1.0, "higher_is_better": name != "cpu"}
        for name, ratio in ratios.items()
    }


def test_a_ratio_fails_only_when_every_run_fell_past_the_threshold():
    baseline = _run(append=0.8, read=0.5, cpu=0.3)
    noisy = best([_run(append=0.4, read=0.2, cpu=0.3), _run(append=0.7, read=0.25, cpu=0.3)])
    assert fallen(baseline, noisy, 0.40) == ["read"]  # 0.25 is 50% below 0.5
    assert fallen(baseline, noisy, 0.15) == ["read"]  # 0.7 is 12.5% below 0.8


def test_a_lower_is_better_ratio_fails_by_rising():
    assert fallen(_run(cpu=0.3), _run(cpu=0.5), 0.40) == ["cpu"]
    assert fallen(_run(cpu=0.3), _run(cpu=0.2), 0.40) == []


def test_the_baseline_is_the_median_run_not_the_luckiest():
    runs = [_run(append=0.5), _run(append=0.9), _run(append=0.7)]
    assert median(runs)["append"]["ratio"] == 0.7
    assert best(runs)["append"]["ratio"] == 0.9
