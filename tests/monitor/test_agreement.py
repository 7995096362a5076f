"""The agreement statistics: kappa, Kendall's tau-b and its interval (`ragmon calibrate`), and a
judge against people with intervals (`paired_agreement`)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.core import drift
from ragmon.core.agreement import (
    binary_kappa,
    clustered_share,
    confusion,
    kendall_tau,
    landis_koch,
    paired_agreement,
    quadratic_kappa,
    tau_with_interval,
    unweighted_kappa,
    weighted_kappa,
)
from tests.support.lazy import Lazy

stats = Lazy("scipy.stats")  # the reference implementations, imported when first used


def test_cohen_kappa_textbook_example():
    # 50 items: both say yes 20, both no 15, disagree 15 -> p_o 0.7, p_e 0.5, kappa 0.4
    assert weighted_kappa([[20, 5], [10, 15]]) == pytest.approx(0.4)


def test_kappa_extremes_and_quadratic_weights():
    grades = [0, 1, 2, 3, 3, 2, 1, 0]
    assert weighted_kappa(confusion(grades, grades), "quadratic") == pytest.approx(1.0)
    assert binary_kappa(grades, grades, 2) == pytest.approx(1.0)
    # off by one everywhere is penalised far less by quadratic weights than unweighted kappa
    off = [min(3, g + 1) for g in grades]
    m = confusion(grades, off)
    assert weighted_kappa(m, "quadratic") > 0.5 > weighted_kappa(m)
    # quadratic kappa from its definition, computed by hand on a 2-category case:
    # rows (10, 0 / 5, 5): p_o disagreement 5/20, expected (10*5 + 10*15)/400 = 0.5 -> 0.5
    assert weighted_kappa([[10, 0], [5, 5]], "quadratic") == pytest.approx(0.5)
    assert math.isnan(weighted_kappa(confusion([1, 1], [1, 1])))


@pytest.mark.parametrize(
    "xs, ys",
    [
        ([0.5, 0.6, 0.7, 0.8, 0.9], [0.5, 0.6, 0.7, 0.8, 0.9]),
        ([0.5, 0.6, 0.7, 0.8, 0.9], [0.9, 0.8, 0.7, 0.6, 0.5]),
        ([0.63, 0.60, 0.74, 0.72, 0.75], [0.79, 0.77, 0.70, 0.72, 0.73]),
        ([1, 2, 2, 3, 4, 4], [2, 1, 3, 3, 5, 4]),
    ],
)
def test_kendall_tau_b_matches_scipy(xs, ys):
    assert kendall_tau(xs, ys) == pytest.approx(stats.kendalltau(xs, ys).statistic)


def test_landis_koch_words():
    assert [landis_koch(k) for k in (-0.1, 0.1, 0.3, 0.5, 0.7, 0.9)] == [
        "poor", "slight", "fair", "moderate", "substantial", "almost perfect"
    ]  # fmt: skip


def test_tau_interval_resamples_queries() -> None:
    rng = random.Random(2)
    per_query = {
        f"q{i}": {r: [(base + rng.gauss(0, 0.4), base + rng.gauss(0, 0.4))]
                  for r, base in (("a", 0.3), ("b", 0.5), ("c", 0.7))}
        for i in range(30)
    }  # fmt: skip
    tau, lo, hi = tau_with_interval(per_query, seed=1)
    assert -1.0 <= lo <= tau <= hi <= 1.0 and lo < hi  # some resamples reorder the retrievers
    assert tau_with_interval(per_query, seed=1) == (tau, lo, hi)  # seeded: repeatable
    assert all(math.isnan(x) for x in tau_with_interval({"q": {"a": [(0.1, 0.2)]}}))


# ---- a judge against people, with intervals ---------------------------------------------------


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval, textbook form."""
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return center - half, center + half


def test_share_of_independent_pairs_is_wilson_at_n_minus_1() -> None:
    # 35 of 50: the CR1 variance p(1-p)/(n-1) gives n_eff = 49; df = (sum u^2)^2 / sum u^4
    hits = np.array([1.0] * 35 + [0.0] * 15)
    u = (hits - 0.7) / 50
    df = (u @ u) ** 2 / np.sum(u**4)
    assert df == pytest.approx(28.378, abs=1e-3)
    got = clustered_share(hits, np.arange(50))
    lo, hi = _wilson(0.7, 49, stats.t.ppf(0.975, df))
    assert (got.estimate, got.n, got.clusters) == (0.7, 50, 50)
    assert got.low == pytest.approx(lo, abs=1e-4) and got.high == pytest.approx(hi, abs=1e-4)


def test_a_pair_repeated_within_its_event_adds_no_information() -> None:
    hits = np.array([1.0] * 35 + [0.0] * 15)
    single = clustered_share(hits, np.arange(50))
    double = clustered_share(np.repeat(hits, 2), np.repeat(np.arange(50), 2))
    assert (double.n, double.clusters) == (100, 50)
    assert (double.low, double.high) == pytest.approx((single.low, single.high))


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_a_share_at_0_or_1_still_has_an_interval(value: float) -> None:
    got = clustered_share(np.full(40, value), np.arange(40))
    assert got.estimate == value
    assert got.high - got.low > 0.05 and 0.0 <= got.low <= value <= got.high <= 1.0


@pytest.mark.parametrize(
    ("kappa", "weights"), [(quadratic_kappa, "quadratic"), (unweighted_kappa, "none")]
)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 9)), min_size=2, max_size=60
    )
)
def test_each_kappa_is_cohens_with_its_weights(
    kappa: Callable, weights: str, rows: list[tuple[int, int, int]]
) -> None:
    h, j, c = (np.array(col) for col in zip(*rows, strict=True))
    want = weighted_kappa(confusion(h.tolist(), j.tolist()), weights)
    got = kappa(h, j, c)
    if math.isnan(want):
        assert got is None
    else:
        assert got is not None and got.estimate == pytest.approx(want, abs=1e-12)
        assert -1.0 <= got.low <= got.estimate + 1e-12 and got.estimate <= got.high + 1e-12
        assert got.high <= 1.0


def test_kappa_variance_is_the_jackknife_variance() -> None:
    """The influence values' variance matches the leave-one-out jackknife on 300 pairs."""
    rng = np.random.default_rng(4)
    h = rng.integers(0, 4, 300)
    j = np.clip(h + rng.integers(-1, 2, 300) + (rng.random(300) < 0.2), 0, 3)
    got = quadratic_kappa(h, j, np.arange(300))
    assert got is not None
    half_z = (math.atanh(got.high) - math.atanh(got.low)) / 2
    se = half_z / stats.t.ppf(0.975, got.df) * (1 - got.estimate**2)
    loo = np.array([
        weighted_kappa(confusion(np.delete(h, i).tolist(), np.delete(j, i).tolist()), "quadratic")
        for i in range(300)
    ])  # fmt: skip
    jack = math.sqrt(299 / 300 * np.sum((loo - loo.mean()) ** 2))
    assert se == pytest.approx(jack, rel=0.03)


def test_unweighted_kappa_variance_is_the_jackknife_variance() -> None:
    rng = np.random.default_rng(5)
    h = rng.integers(0, 4, 300)
    j = np.clip(h + rng.integers(-1, 2, 300) + (rng.random(300) < 0.2), 0, 3)
    got = unweighted_kappa(h, j, np.arange(300))
    assert got is not None
    se = (got.high - got.low) / 2 / stats.t.ppf(0.975, got.df)
    loo = np.array([
        weighted_kappa(confusion(np.delete(h, i).tolist(), np.delete(j, i).tolist()))
        for i in range(300)
    ])  # fmt: skip
    jack = math.sqrt(299 / 300 * np.sum((loo - loo.mean()) ** 2))
    assert se == pytest.approx(jack, rel=0.03)
    # near misses: the quadratic-weighted kappa reads far higher than Cohen's
    quadratic = quadratic_kappa(h, j, np.arange(300))
    assert quadratic is not None and quadratic.estimate > got.estimate + 0.2


def test_paired_agreement_hand_case() -> None:
    # 40 pairs from 20 events, two per event; the judge over-grades 1 -> 2 ten times
    human = [0, 1, 2, 3] * 10
    judge = [0, 2, 2, 3] * 5 + [0, 1, 2, 3] * 5
    events = [i // 2 for i in range(40)]
    a = paired_agreement(human, judge, events)
    assert (a.pairs, a.events, a.reasons) == (40, 20, {})
    assert a.confusion == ((10, 0, 0, 0), (0, 5, 5, 0), (0, 0, 10, 0), (0, 0, 0, 10))
    assert a.exact is not None and a.exact.estimate == pytest.approx(35 / 40)
    assert a.difference is not None and a.difference.estimate == pytest.approx(5 / 40)
    assert a.difference == drift.clustered_mean(
        np.array(judge, float) - np.array(human, float), np.array(events)
    )
    assert a.kappa is not None
    assert a.kappa.estimate == pytest.approx(weighted_kappa(a.confusion, "quadratic"))
    assert a.kappa.low < a.kappa.estimate < a.kappa.high < 1.0
    share = a.shares[1][2]
    assert share is not None and share.estimate == 0.5 and share.n == 10
    for row in a.shares:
        assert sum(s.estimate for s in row if s is not None) == pytest.approx(1.0)


def test_too_few_pairs_or_events_give_counts_and_a_reason() -> None:
    a = paired_agreement([1, 2] * 10, [1, 2] * 10)
    assert a.exact is a.kappa is a.difference is None
    assert a.confusion[1][1] == a.confusion[2][2] == 10
    assert (
        a.reasons["kappa"]
        == "20 pairs from 20 events; intervals need at least 30 pairs from 10 events"
    )
    few_events = paired_agreement([1, 2] * 20, [1, 2] * 20, [i % 5 for i in range(40)])
    assert few_events.kappa is None and "from 5 events" in few_events.reasons["exact"]


def test_one_grade_throughout_has_no_kappa() -> None:
    a = paired_agreement([2] * 40, [2] * 40)
    assert a.kappa is None and a.reasons == {
        "kappa": "both raters gave the same single grade throughout"
    }
    assert a.exact is not None and a.exact.estimate == 1.0 and a.exact.low < 1.0


@pytest.mark.parametrize(
    ("human", "judge", "events", "message"),
    [
        ([1, 2], [1], None, "need one judge grade per human grade, got 1 for 2"),
        ([1, 4], [1, 2], None, "human[1] must be a grade 0-3, got 4"),
        ([1, 2], [1, None], None, "judge[1] must be a grade 0-3, got None"),
        ([1, 2], [1, 2], ["e"], "need one event per pair, got 1 for 2"),
    ],
)
def test_bad_input_is_named(human: list, judge: list, events: list | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        paired_agreement(human, judge, events)
