"""The level alerts' bound is computed right: the Neyman-Pearson power against scipy's binomial
and Poisson, and the vectorized CUSUM against its plain recursion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.stats.level_bound import (
    _most_powerful,
    cusum_alarms,
    cusum_delays,
    cusum_false_firings,
    cusum_threshold,
    hour_alpha,
    np_hour_power,
    np_power_fixed,
)

P0, P1 = 0.62, 0.50  # Hit@K 0.02 on the safe side of its line 0.6, and 0.1 across it


def _scipy_power(n: int, alpha: float) -> float:
    """The most powerful test for a fall of p rejects for few hits (the likelihood ratio falls
    with x): X <= c, and X = c + 1 with the probability that makes the size alpha."""
    cdf0 = stats.binom.cdf(np.arange(n + 1), n, P0)
    c = int(np.searchsorted(cdf0, alpha, side="right")) - 1
    taken = float(cdf0[c]) if c >= 0 else 0.0
    g = (alpha - taken) / float(stats.binom.pmf(c + 1, n, P0))
    return float((stats.binom.cdf(c, n, P1) if c >= 0 else 0.0) + g * stats.binom.pmf(c + 1, n, P1))


def test_half_a_firing_a_week_is_0_003_per_hour() -> None:
    assert hour_alpha() == pytest.approx(0.5 / 168)


@pytest.mark.parametrize("n", [10, 60, 300, 1200])
def test_the_fixed_count_power_is_scipys(n: int) -> None:
    assert np_power_fixed(P0, P1, n, hour_alpha()) == pytest.approx(
        _scipy_power(n, hour_alpha()), abs=1e-9
    )


def test_60_events_give_about_a_fifth() -> None:
    """The brief's figure: at 1 event a minute, no test of the hour reaches 0.25."""
    assert 0.15 < np_power_fixed(P0, P1, 60, hour_alpha()) < 0.25


def test_the_test_has_its_size() -> None:
    """Under H0 the most powerful test rejects with probability alpha, ties and all."""
    rng = np.random.default_rng(1)
    w0 = rng.random(50)
    w0 /= w0.sum()
    llr = np.round(rng.normal(size=50), 1)  # many ties
    assert _most_powerful(llr, w0, w0, 0.03) == pytest.approx(0.03)


@pytest.mark.parametrize("mean_events", [60, 300])
def test_the_hour_power_with_a_poisson_count(mean_events: int) -> None:
    """Against scipy's pmfs on the (count, hits) grid, and at least the power of the test that
    spends alpha at every count (one test of the same size)."""
    alpha = hour_alpha()
    top = int(mean_events + 12 * math.sqrt(mean_events) + 20)
    n, x = np.meshgrid(np.arange(top + 1), np.arange(top + 1), indexing="ij")
    ok = x <= n
    pn = stats.poisson.pmf(n, mean_events)
    llr = x * math.log(P1 / P0) + (n - x) * math.log((1 - P1) / (1 - P0))
    w0, w1 = pn * stats.binom.pmf(x, n, P0), pn * stats.binom.pmf(x, n, P1)
    want = _most_powerful(llr[ok], w0[ok], w1[ok], alpha)
    got = np_hour_power(P0, P1, mean_events, alpha)
    assert got == pytest.approx(want, abs=1e-9)
    counts = np.arange(1, top + 1)
    per_count = sum(
        stats.poisson.pmf(k, mean_events) * np_power_fixed(P0, P1, int(k), alpha) for k in counts
    )
    assert per_count <= got + 1e-12


def _plain_cusum(llr: np.ndarray, h: float) -> list[int]:
    s, out = 0.0, []
    for i, v in enumerate(llr):
        s = max(0.0, s + v)
        if s >= h:
            out.append(i)
            s = 0.0
    return out


@pytest.mark.parametrize(("h", "block"), [(1.5, 7), (3.0, 64), (6.0, 1 << 16)])
def test_the_vectorized_cusum_is_the_recursion(h: float, block: int) -> None:
    rng = np.random.default_rng(2)
    hits = rng.random(5000) < 0.56
    llr = np.where(hits, math.log(P1 / P0), math.log((1 - P1) / (1 - P0)))
    alarms, _ = cusum_alarms(llr, h, block)
    want = _plain_cusum(llr, h)
    assert alarms == want and len(want) > 3


def test_the_cusum_threshold_holds_its_rate_and_detects() -> None:
    """The threshold meets the false-firing limit on its own stream, an independent stream
    stays near it, and a crossing to 0.50 at 5 events a minute is mostly found within hours."""
    h, rate = cusum_threshold(P0, P1, 5, 20, seed=3)
    assert rate <= 0.5
    assert cusum_false_firings(P0, P1, 5, h, 20, seed=4) < 1.5
    delays = cusum_delays(P0, P1, 5, h, 40, seed=5, hours=6)
    assert np.isfinite(delays).mean() > 0.9
