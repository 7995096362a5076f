"""The statistics the SDK benchmarks report: quantiles, and a median over rounds with its
interval."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile as an order statistic (no interpolation); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """The median of `values` with a distribution-free interval (binomial order statistics).

    With n rounds, the interval is [x(j), x(n+1-j)] for the largest j such that the chance of
    fewer than j rounds below the true median is <= (1 - confidence) / 2; its actual coverage is
    reported: at least `confidence` when n allows (n >= 6 for 95%), else that of the full range.
    """
    xs = sorted(v for v in values if not math.isnan(v))
    n = len(xs)
    if not n:
        return {"median": math.nan, "low": math.nan, "high": math.nan, "confidence": 0.0, "n": 0}
    j, tail = 1, 1 / 2**n  # [x(1), x(n)] misses the median only if all rounds fall on one side
    while j + 1 <= n - j and tail + math.comb(n, j) / 2**n <= (1 - confidence) / 2:
        tail += math.comb(n, j) / 2**n
        j += 1
    low, high = xs[j - 1], xs[n - j]
    return {
        "median": statistics.median(xs),
        "low": low,
        "high": high,
        "confidence": 1 - 2 * tail,
        "n": n,
    }


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two intervals from `median_interval` share a point."""
    return a["low"] <= b["high"] and b["low"] <= a["high"]
