"""The judge-free alerts' null simulation and outage delay (`tests.stats.signal_alert_sim`),
small and seeded; tests/stats/README.md has the full run's table."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.grafana.queries import RULE_FILES, promql_test
from tests.stats.signal_alert_sim import (
    ALERTS,
    BEFORE,
    DAY,
    NOW,
    Case,
    Counters,
    empty_firing,
    empty_slow_firing,
    null_week,
    outage_delay,
    rise_z,
    shift_condition,
    shift_delay,
    simulate,
    stopped_condition,
)


def test_a_week_of_repeats_retries_and_a_daily_cycle_stays_under_the_false_alarm_limit() -> None:
    """No empty-result or stopped alert; the top-score alert within 0.5 a series-week."""
    shifts = 0
    for case in (Case(60, 0.02), Case(30, 0.0), Case(5, 0.1), Case(1, 0.02)):
        fired = null_week(case, series=3, seed=1)
        shifts += fired.pop("RagmonTopScoreShift")
        assert fired == dict.fromkeys(ALERTS[:3], 0)
    assert shifts <= 0.5 * 12


def test_before_issue_46_retries_and_the_daily_cycle_paged() -> None:
    """The same traffic under the earlier rules: empty results counted per event, the top score
    one-sided with a 5 % margin."""
    fired = null_week(Case(5, 0.02), series=2, seed=1, rules=BEFORE)
    assert fired["RagmonEmptyResultsHighSlow"] >= 2 and fired["RagmonTopScoreShift"] >= 2


def test_a_change_of_score_scale_fires_either_way_and_before_only_downward() -> None:
    for scale in (0.8, 1.5):
        assert max(shift_delay(Case(5, 0.02), trials=5, seed=4, scale=scale)) <= 90
    assert all(np.isinf(shift_delay(Case(5, 0.02), trials=5, seed=4, scale=1.5, rules=BEFORE)))


def test_an_outage_of_a_busy_series_fires_within_two_minutes() -> None:
    fast, _ = outage_delay(Case(60, 0.02), trials=30, seed=2)
    assert np.median(fast) <= 2 and sum(d > 2 for d in fast) <= 1 and max(fast) <= 3


def test_an_outage_of_a_small_series_fires_the_slow_companion() -> None:
    fast, either = outage_delay(Case(5, 0.02), trials=30, seed=3)
    assert all(np.isinf(fast)) and max(either) <= 45


def test_the_g_test_reads_the_poisson_tail_where_a_normal_test_does_not() -> None:
    """A window of 120 events at a 2 % share, a day of 86,400 behind it: 14 or more empty have
    a chance of 1.5e-7; the G-test's z gives it about that (9e-8), a normal test 2e-14."""
    from scipy import stats

    a, n, day_n = 14.0, 120.0, 86_400.0
    z = rise_z(np.array([a]), np.array([n]), np.array([0.02 * day_n + a - 2.4]), np.array([day_n]))
    exact = stats.binom.sf(a - 1, n, 0.02)
    assert 0.5 < stats.norm.sf(z[0]) / exact < 2
    assert stats.norm.sf((a / n - 0.02) / np.sqrt(0.02 * 0.98 / n)) < exact / 1000


LABELS = 'app="shop",index="docs",retriever="{}",segment="default"'


def _alert_exprs() -> dict[str, str]:
    return {
        r["alert"]: r["expr"]
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") in ALERTS
    }


def _series(retriever: str, c: Counters) -> dict[str, np.ndarray]:
    lb = LABELS.format(retriever)
    return {
        f"ragmon_signal_results_count{{{lb}}}": c.events,
        f'ragmon_signal_results_bucket{{{lb},le="0.0"}}': c.empty,
        f"ragmon_signal_empty_queries_total{{{lb}}}": c.empty_queries,
        f"ragmon_signal_top_score_count{{{lb}}}": c.scored,
        f"ragmon_signal_top_score_sum{{{lb}}}": c.score_sum,
        f"ragmon_signal_top_score_sum_squares_total{{{lb}}}": c.score_sumsq,
    }


@pytest.mark.slow
def test_the_simulation_computes_what_the_rules_compute(tmp_path: Path) -> None:
    """A day of 60 events a minute (`bm25`), then at DAY + 30 an outage (20 % more questions
    answered empty, top scores x0.8), and no event from DAY + 60; beside it a series of 5 a minute
    (`small`) with the same outage: each alert's condition for each series at every minute from
    DAY + 20 to DAY + 85, by the simulation and by promtool on the same counters."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found: install Debian's `prometheus` package")
    end = DAY + 86
    rng = np.random.default_rng(9)
    busy = simulate(Case(60, 0.02), end, rng, outage_at=DAY + 30, scale=0.8, stop_at=DAY + 60)
    small = simulate(Case(5, 0.02), end, rng, outage_at=DAY + 30)
    series = {**_series("bm25", busy), **_series("small", small),
              "ragmon_alert_min_events": np.full(end + 1, float(NOW.shift_min))}  # fmt: skip
    inputs = [{"series": name, "values": " ".join(repr(float(x)) for x in xs)}
              for name, xs in series.items()]  # fmt: skip
    conditions = {"RagmonEmptyResultsHigh": empty_firing, "RagmonEmptyResultsHighSlow":
                  empty_slow_firing, "RagmonSeriesStopped": stopped_condition,
                  "RagmonTopScoreShift": shift_condition}  # fmt: skip
    expected = {(name, r): f(c) for name, f in conditions.items()
                for r, c in (("bm25", busy), ("small", small))}  # fmt: skip
    tests = []
    for name, expr in _alert_exprs().items():
        for minute in range(DAY + 20, end):
            samples = [{"labels": f'{{retriever="{r}"}}', "value": 1}
                       for r in ("bm25", "small") if expected[name, r][minute]]  # fmt: skip
            tests.append({"expr": f"count by (retriever) ({expr.strip()})",
                          "eval_time": f"{minute}m", "exp_samples": samples})  # fmt: skip
    fired = {key: int(x[DAY + 20 : end].sum()) for key, x in expected.items()}
    assert fired["RagmonEmptyResultsHighSlow", "small"] and fired["RagmonEmptyResultsHigh", "bm25"]
    assert all(fired[name, "bm25"] for name in ("RagmonSeriesStopped", "RagmonTopScoreShift"))
    assert not all(expected["RagmonEmptyResultsHigh", "bm25"][DAY + 20 : end])
    assert not all(expected["RagmonEmptyResultsHighSlow", "small"][DAY + 20 : end])
    r = promql_test(promtool, tmp_path / "cross-check.yml", inputs, tests)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
