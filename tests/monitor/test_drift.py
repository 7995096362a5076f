"""The drift statistics against scipy and direct computation on test vectors."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from monitor import drift


def _sample(seed: int, n: int, shift: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(shift, 1.0) for _ in range(n)]


# ---- PSI ---------------------------------------------------------------------------------


def test_psi_direct_computation() -> None:
    base, cur = [50, 30, 20], [30, 30, 40]
    b = [0.5, 0.3, 0.2]
    c = [0.3, 0.3, 0.4]
    expected = sum((ci - bi) * math.log(ci / bi) for bi, ci in zip(b, c, strict=True))
    assert drift.psi(base, cur) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.2 * math.log(5 / 3) + 0.2 * math.log(2), rel=1e-12)
    # PSI is the symmetric KL divergence: KL(c||b) + KL(b||c), scipy's entropy
    sym = stats.entropy(c, b) + stats.entropy(b, c)
    assert drift.psi(base, cur) == pytest.approx(sym, rel=1e-12)


def test_psi_identical_and_empty_bins() -> None:
    assert drift.psi([10, 20, 0], [20, 40, 0]) == pytest.approx(0.0, abs=1e-15)
    v = drift.psi([10, 0], [9, 1])  # an empty bin counts as a 1e-4 share: finite
    expected = (0.9 - 1.0) * math.log(0.9 / 1.0) + (0.1 - 1e-4) * math.log(0.1 / 1e-4)
    assert math.isfinite(v) and v == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError):
        drift.psi([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        drift.psi([0, 0], [1, 2])


@pytest.mark.parametrize(
    ("value", "level"),
    [(0.0, "stable"), (0.099, "stable"), (0.1, "moderate"), (0.25, "moderate"), (0.26, "major")],
)
def test_psi_levels(value: float, level: str) -> None:
    assert drift.psi_level(value) == level


def test_psi_noise_matches_simulation() -> None:
    """With no change, PSI averages about (occupied bins - 1)(1/n_b + 1/n_c)."""
    rng = np.random.default_rng(1)
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    vals = [drift.psi(rng.multinomial(400, p), rng.multinomial(300, p)) for _ in range(400)]
    predicted = drift.psi_noise([80, 80, 120, 100, 20], [60, 60, 90, 75, 15])
    assert predicted == pytest.approx(4 * (1 / 400 + 1 / 300))
    assert np.mean(vals) == pytest.approx(predicted, rel=0.15)


# ---- KS ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "n", "shift"), [(7, 13, 0.0), (30, 40, 0.3), (50, 50, 0.7), (120, 90, 0.2)]
)
def test_ks_exact_matches_scipy(m: int, n: int, shift: float) -> None:
    a, b = _sample(m, m), _sample(n + 1000, n, shift)
    ours = drift.ks_2samp(a, b)
    ref = stats.ks_2samp(a, b, method="exact")
    assert ours.method == "exact"
    assert ours.statistic == pytest.approx(ref.statistic, abs=1e-12)
    assert ours.pvalue == pytest.approx(ref.pvalue, abs=1e-9)


def test_ks_statistic_with_ties_matches_scipy() -> None:
    rng = random.Random(4)
    a = [rng.choice([0.0, 0.2, 0.5, 1.0]) for _ in range(300)]
    b = [rng.choice([0.0, 0.5, 0.5, 1.0]) for _ in range(200)]
    assert drift.ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)


def test_ks_asymptotic_close_to_scipy() -> None:
    a, b = _sample(1, 3000), _sample(2, 4000, 0.05)
    ours = drift.ks_2samp(a, b)
    ref = stats.ks_2samp(a, b, method="asymp")
    assert ours.method == "asymptotic"
    assert ours.statistic == pytest.approx(ref.statistic, abs=1e-12)
    assert ours.pvalue == pytest.approx(ref.pvalue, abs=0.01)


@pytest.mark.parametrize("x", [0.3, 0.5, 0.8, 1.0, 1.36, 2.0])
def test_kolmogorov_sf_matches_scipy(x: float) -> None:
    assert drift.kolmogorov_sf(x) == pytest.approx(special.kolmogorov(x), abs=1e-12)


# ---- intervals -----------------------------------------------------------------------------


def test_mean_ci_normal_direct() -> None:
    v = [0.2, 0.4, 0.4, 0.9, 1.0, 0.0, 0.5]
    ci = drift.mean_ci_normal(v)
    half = stats.norm.ppf(0.975) * np.std(v, ddof=1) / math.sqrt(len(v))
    assert ci.estimate == pytest.approx(np.mean(v))
    assert (ci.low, ci.high) == (pytest.approx(np.mean(v) - half), pytest.approx(np.mean(v) + half))


def test_mean_ci_bootstrap_agrees_with_scipy_percentile() -> None:
    v = [x * x for x in _sample(9, 400)]  # skewed
    ours = drift.mean_ci_bootstrap(v, n_boot=4000, seed=3)
    ref = stats.bootstrap(
        (np.array(v),), np.mean, n_resamples=4000, method="percentile", random_state=5
    ).confidence_interval
    width = ref.high - ref.low
    assert ours.method == "bootstrap" and ours.estimate == pytest.approx(np.mean(v))
    assert ours.low == pytest.approx(ref.low, abs=0.05 * width)
    assert ours.high == pytest.approx(ref.high, abs=0.05 * width)
    assert drift.mean_ci_bootstrap(v, seed=1) == drift.mean_ci_bootstrap(v, seed=1)


def test_bootstrap_coverage() -> None:
    """About 95% of intervals cover the true mean (0.5 for uniform values)."""
    rng = random.Random(0)
    covered = 0
    for i in range(300):
        ci = drift.mean_ci_bootstrap([rng.random() for _ in range(80)], n_boot=400, seed=i)
        covered += ci.low <= 0.5 <= ci.high
    assert 0.90 <= covered / 300 <= 0.99


def test_proportion_ci_matches_scipy_wilson() -> None:
    ci = drift.proportion_ci(12, 40)
    ref = stats.binomtest(12, 40).proportion_ci(confidence_level=0.95, method="wilson")
    assert (ci.low, ci.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    full = drift.proportion_ci(40, 40)
    assert full.high == pytest.approx(1.0) and full.low < 1.0


def test_binned_mean_and_interval() -> None:
    bounds = (0.0, 0.5, 1.0)
    counts = [2, 4, 4, 0]  # 0 twice, (0, 0.5] four times, (0.5, 1] four times
    mean, var, n = drift.binned_mean_var(counts, bounds, total=5.2)
    assert (mean, n) == (pytest.approx(0.52), 10)
    mids = [0.0] * 2 + [0.25] * 4 + [0.75] * 4
    assert var == pytest.approx(np.var(mids, ddof=1))
    ci = drift.mean_ci_binned(counts, bounds, total=5.2)
    assert ci.method == "normal-binned" and ci.low < 0.52 < ci.high


def test_diff_means_matches_welch() -> None:
    a, b = _sample(1, 500), _sample(2, 400, 0.2)
    d = drift.diff_means(
        (np.mean(a), np.var(a, ddof=1), len(a)), (np.mean(b), np.var(b, ddof=1), len(b))
    )
    ref = stats.ttest_ind(b, a, equal_var=False)
    assert d.estimate == pytest.approx(np.mean(b) - np.mean(a))
    assert d.pvalue == pytest.approx(ref.pvalue, rel=0.05)  # normal vs t with ~850 df
    assert d.low < d.estimate < d.high and d.effect > 0
    assert drift.diff_means((1.0, 0.0, 10), (1.0, 0.0, 10)).pvalue == 1.0


def test_holm_matches_direct() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert drift.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert drift.holm([]) == []


def test_how_sure_words() -> None:
    assert drift.how_sure(1e-5) == "almost certainly real"
    assert drift.how_sure(0.03) == "likely real"
    assert drift.how_sure(0.5) == "indistinguishable from noise"


def test_drift_is_pure() -> None:
    """No project imports and no I/O library: like monitor.measures."""
    tree = ast.parse(Path(drift.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert names <= {"__future__", "math", "collections", "dataclasses", "statistics", "numpy"}
