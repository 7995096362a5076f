"""The agreement statistics of `ragmon calibrate`: kappa, Kendall's tau-b and its interval."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import kendalltau

from ragmon.core.agreement import (
    binary_kappa,
    confusion,
    kendall_tau,
    landis_koch,
    tau_with_interval,
    weighted_kappa,
)


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
    assert kendall_tau(xs, ys) == pytest.approx(kendalltau(xs, ys).statistic)


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
