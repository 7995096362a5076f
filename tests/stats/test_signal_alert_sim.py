"""The judge-free alerts' null simulation and outage delay (`tests.stats.signal_alert_sim`),
small and seeded; docs/signals.md has the full run's table."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.grafana.queries import RULE_FILES, promql_test
from tests.stats.signal_alert_sim import (
    DAY,
    DROP_MIN,
    DROP_Z,
    Case,
    drop_condition,
    empty_firing,
    null_week,
    outage_delay,
    simulate,
    stopped_condition,
)


def test_a_stationary_week_fires_none_of_the_judge_free_alerts() -> None:
    for case in (Case(60, 0.02), Case(30, 0.0), Case(5, 0.1)):
        assert null_week(case, series=5, seed=1) == dict.fromkeys(
            ("RagmonEmptyResultsHigh", "RagmonSeriesStopped", "RagmonTopScoreDrop"), 0
        )


def test_an_outage_of_a_busy_series_fires_within_two_minutes() -> None:
    delays = outage_delay(Case(60, 0.02), trials=30, seed=2)
    assert max(delays) <= 2 and np.median(delays) <= 2


LABELS = 'app="shop",index="docs",retriever="bm25",segment="default"'


def _alert_exprs() -> dict[str, str]:
    return {
        r["alert"]: r["expr"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") in ("RagmonEmptyResultsHigh", "RagmonSeriesStopped", "RagmonTopScoreDrop")
    }


@pytest.mark.slow
def test_the_simulation_computes_what_the_rules_compute(tmp_path: Path) -> None:
    """A day of 60 events a minute, then at DAY + 30 an outage (20 % more empty results, top
    scores 10 -> 8), and no event from DAY + 60: each alert's condition at every minute from
    DAY + 20 to DAY + 85, by the simulation and by promtool on the same counters."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found: install Debian's `prometheus` package")
    end = DAY + 86
    c = simulate(Case(60, 0.02), end, np.random.default_rng(9), outage_at=DAY + 30,
                 score_after=8.0, stop_at=DAY + 60)  # fmt: skip
    series = {
        f"ragmon_signal_results_count{{{LABELS}}}": c.events,
        f'ragmon_signal_results_bucket{{{LABELS},le="0.0"}}': c.empty,
        f"ragmon_signal_top_score_count{{{LABELS}}}": c.scored,
        f"ragmon_signal_top_score_sum{{{LABELS}}}": c.score_sum,
        f"ragmon_signal_top_score_sum_squares_total{{{LABELS}}}": c.score_sumsq,
        "ragmon_alert_drop_z": np.full(end + 1, DROP_Z),
        "ragmon_alert_min_events": np.full(end + 1, float(DROP_MIN)),
    }
    inputs = [{"series": name, "values": " ".join(repr(float(x)) for x in xs)}
              for name, xs in series.items()]  # fmt: skip
    expected = {"RagmonEmptyResultsHigh": empty_firing(c), "RagmonSeriesStopped":
                stopped_condition(c), "RagmonTopScoreDrop": drop_condition(c)}  # fmt: skip
    tests = []
    for name, expr in _alert_exprs().items():
        for minute in range(DAY + 20, end):
            samples = [{"labels": "{}", "value": 1}] if expected[name][minute] else []
            tests.append({"expr": f"count({expr.strip()})", "eval_time": f"{minute}m",
                          "exp_samples": samples})  # fmt: skip
    fired = {name: int(expected[name][DAY + 20 : end].sum()) for name in expected}
    assert all(fired.values()) and not all(expected["RagmonEmptyResultsHigh"][DAY + 20 : end])
    r = promql_test(promtool, tmp_path / "cross-check.yml", inputs, tests)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
