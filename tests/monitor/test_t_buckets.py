"""T's histogram bounds follow RAGMON_T_ALPHA: no quantile Prometheus reads can fall below -a."""

from __future__ import annotations

import pytest

from ragmon.core.measures import MeasureParams, compute, histogram_bounds
from ragmon.store import bucket_index


def prometheus_quantile(q: float, bounds: tuple[float, ...], counts: list[int]) -> float:
    """Prometheus' histogram_quantile (promql/quantile.go): find the bucket holding rank q*n,
    interpolate linearly inside it; the lowest bucket's lower bound is 0 when its upper bound
    is positive, else the quantile is that upper bound."""
    n = sum(counts)
    rank = q * n
    running = 0
    for i, c in enumerate(counts):
        if running + c >= rank and c:
            upper = bounds[i] if i < len(bounds) else bounds[-1]
            if i == 0:
                if upper <= 0:
                    return upper
                lower = 0.0
            else:
                lower = bounds[i - 1]
            return lower + (upper - lower) * (rank - running) / c
        running += c
    return bounds[-1]


@pytest.mark.parametrize("alpha", [0.1, 0.25, 0.5, 0.75, 1.0])
def test_no_quantile_reads_below_minus_alpha(alpha: float) -> None:
    params = MeasureParams(t_alpha=alpha)
    bounds = histogram_bounds(params)["t"]
    assert list(bounds) == sorted(set(bounds))  # strictly increasing
    counts = [0] * (len(bounds) + 1)
    # half the events retrieve nothing relevant (T = -a exactly), the rest one relevant of 10
    for grades in [[0] * 10] * 50 + [[3] + [0] * 9] * 50 + [[]] * 10:
        t = compute(grades, 10, params)["t"]
        assert t is not None and t >= -alpha
        counts[bucket_index(bounds, t)] += 1
    for q in (0.01, 0.1, 0.25, 0.5):
        assert prometheus_quantile(q, bounds, counts) >= -alpha - 1e-12
    assert prometheus_quantile(0.1, bounds, counts) == pytest.approx(-alpha)


def test_the_bucket_count_never_changes() -> None:
    """Stored per-day counts are kept by bucket index: any a gives as many T buckets."""
    n = len(histogram_bounds()["t"])
    assert all(len(histogram_bounds(MeasureParams(t_alpha=a))["t"]) == n for a in (0, 0.3, 1))
