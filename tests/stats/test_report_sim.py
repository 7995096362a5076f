"""A small fixed-seed run of the report simulation (the full run, 200+ reports per scenario, is
`nice python -m tests.stats.report_sim`; docs/report.md has its figures)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy import stats

from ragmon.core.measure_table import MEASURES
from ragmon.report.family import ALPHA
from tests.stats.report_sim import Scenario, one_report, run, scenarios, tiny_scenario

REPORTS = 12


@functools.cache
def _scenarios() -> dict[str, Scenario]:
    """Built when a test first needs them (seconds of work: not at collection)."""
    return {sc.name: sc for sc in scenarios(np.random.default_rng(13))}


def most_under_null(n: int, rate: float = ALPHA, chance: float = 0.001) -> int:
    """The most of `n` reports a procedure whose false-alarm rate is at most `rate` names a
    regression in, but for a `chance` this small: more means its rate is above `rate`."""
    return int(stats.binom.isf(chance, n, rate))


def _pick(word: str) -> Scenario:
    if word == "tiny series":  # the same streams, without building every other scenario
        return tiny_scenario(np.random.default_rng(13))
    (sc,) = [sc for name, sc in _scenarios().items() if name.startswith(word) and "own" not in name]
    return sc


def test_most_under_null_is_the_binomial_tail() -> None:
    assert most_under_null(12) == 4  # P(X >= 4) = 0.0022, P(X >= 5) = 0.0002 at 5 %
    assert most_under_null(100) == 13
    assert most_under_null(12, rate=0.0) == 0


@pytest.mark.parametrize(
    "word",
    [
        "tiny series",
        "clustered: 700",
        "clustered: 4,900",
        "segment mix only",
        "paraphrased: 700/week, 20%",
        "paraphrased: 700/week, 40%",
        "planned: 700/week, rates",
    ],  # fmt: skip
)
def test_nothing_changes_and_regressions_stay_within_the_level(word: str) -> None:
    sc = _pick(word)
    # 30 retrievers a report, each scanned over 16 weeks: a quarter of the reports, 90 verdicts
    out = run(sc, REPORTS // 4 if word == "tiny series" else REPORTS, seed=1)
    most = most_under_null(out.reports)
    assert out.flagged <= most, f"{sc.name}: {out.flagged} of {out.reports} reports"
    if word == "tiny series":  # every small series gets a verdict over up to 4 weeks
        assert out.decided == out.retrievers > 0
    if word == "segment mix only":
        assert out.mix_named == out.reports  # and each report names the mix shift
    else:
        assert out.mix_named == 0


@pytest.mark.parametrize(
    ("word", "least"),
    [
        ("power: nDCG -0.05", 11),
        ("power: nDCG -0.10", 9),
    ],
)
def test_a_true_drop_is_reported(word: str, least: int) -> None:
    sc = _pick(word)
    out = run(sc, REPORTS, seed=2)
    assert out.flagged >= least, f"{sc.name}: {out.flagged} of {out.reports} reports"


def test_a_small_knowledge_base_keeps_the_power_of_distinct_passages() -> None:
    # Overlapping top-K lists of a 200-document knowledge base: single linkage joined them all
    # into one question, and the report found the drop in none of the reports.
    kb = run(_pick("power: nDCG -0.07 for 1 of 3 at 300/week, 200-document"), 8, seed=2)
    distinct = run(_pick("power: nDCG -0.07 for 1 of 3 at 300/week, distinct"), 8, seed=2)
    assert distinct.flagged >= 5
    assert kb.flagged >= distinct.flagged - 2, (kb.flagged, distinct.flagged)
    assert kb.decided == kb.retrievers


TRENDING, NULL = "power at SD 0.2: nDCG -0.05, 500/week", "trending week: SD 0.2, 500/week"


def least_under_power(n: int, power: float, chance: float = 0.001) -> int:
    """The fewest of `n` reports a procedure with at least this `power` finds a drop in but for
    a `chance` this small: fewer means its power is below `power`."""
    return int(stats.binom.ppf(chance, n, power))


@pytest.mark.parametrize("share", ["20%", "40%"])
def test_a_trending_week_keeps_the_power_and_the_null(share: str) -> None:
    # One topic new this week, 20 % or 40 % of it in 50 wordings: one cluster that took the
    # effective degrees of freedom to about 1 (the drop found in 3 of 24 reports at 20 %); now
    # the 80 % goal holds (21 of these 24 in each), and the null (no regression in 8 reports).
    found = run(_scenarios()[f"{TRENDING}, {share} of this week 1 topic"], 2 * REPORTS, seed=2)
    assert found.flagged >= least_under_power(found.reports, 0.8), found.flagged
    null = run(_scenarios()[f"{NULL}, {share} of this week 1 topic"], 8, seed=1)
    assert null.flagged <= most_under_null(8), f"{null.flagged} of {null.reports} reports"


def test_power_and_null_bounds_are_the_binomial_tails() -> None:
    assert least_under_power(24, 0.8) == 13  # P(X <= 12) = 0.00098, P(X <= 13) = 0.0038 at 80 %
    assert least_under_power(24, 1.0) == 24


def test_intervals_stay_inside_each_measures_range() -> None:
    sc = _scenarios()["trending week: SD 0.2, 500/week, 40% of this week 1 topic"]
    rep = one_report(sc, np.random.default_rng(3), salt=0)
    cut = 0
    for r in rep.rows:
        ((lo, hi),) = [(m.lo, m.hi) for m in MEASURES if m.key == r.measure]
        for iv in (r.base, r.cur):
            if iv is not None:
                assert lo <= iv.low <= iv.estimate <= iv.high <= hi, (r.group, r.measure, iv)
                cut += iv.low == lo or iv.high == hi
        if r.change is not None:
            assert lo - hi <= r.change.low <= r.change.high <= hi - lo
    assert cut  # a topic of 40 % of the week: one cluster, a t interval on about 1 degree
