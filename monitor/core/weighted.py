"""Means of sampled events that stand for all the traffic: each judged event weighs 1 / the
probability with which it was chosen for judging (its inclusion probability). Pure functions.

- Horvitz & Thompson (1952), "A generalization of sampling without replacement from a finite
  universe", JASA 47: sum(y / pi) / N is unbiased for the mean of all N events whatever the
  probabilities, as long as none is 0.
- Hajek (1971): sum(y / pi) / sum(1 / pi), the ratio form, does not need N, is unbiased to
  first order and has a smaller variance when the weights vary; it is the one ragmon reports,
  and what a weighted Prometheus `_sum` / `_count` gives (docs/sampling.md).
- Variance under Poisson sampling (each event chosen independently, which is what a hash of
  the event id against its probability does): Saerndal, Swensson & Wretman, *Model Assisted
  Survey Sampling* (1992), eq. 5.7.6 for the ratio mean: sum (1 - pi) / pi^2 (y - mean)^2 /
  Nhat^2 (`finite=True`: the mean of these very events; a series judged whole is known
  exactly). Without the finite-population correction `1 - pi`, sum (y - mean)^2 / pi^2 /
  Nhat^2 adds the variance of the week's events around the process that drew them: the
  default, as a weekly mean is compared with other weeks, and the safer one (with few events
  not judged the corrected sum is unstable: tests/stats/sampling_sim.py).
- Repeated questions: with `clusters`, the CR1 sandwich over clusters of the influence values
  w (y - mean) / Nhat (no finite-population correction), as `ragmon.core.drift` does.
Degrees of freedom: Kish's effective number of events (sum w)^2 / sum w^2 minus 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ragmon.core.drift import Interval, cluster_variance, t_ppf


def _arrays(values: Sequence[float], probs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(values, dtype=float)
    p = np.asarray(probs, dtype=float)
    if y.shape != p.shape:
        raise ValueError(f"{len(y)} values for {len(p)} inclusion probabilities")
    if len(p) and not (np.all(p > 0) and np.all(p <= 1)):
        raise ValueError("inclusion probabilities must be in (0, 1]")
    return y, p


def horvitz_thompson(values: Sequence[float], probs: Sequence[float], population: float) -> float:
    """The Horvitz-Thompson mean: sum(y / pi) / N, N the number of events the sample is from."""
    y, p = _arrays(values, probs)
    if population <= 0:
        raise ValueError("population must be positive")
    return float(np.sum(y / p) / population)


def effective_n(probs: Sequence[float] | np.ndarray) -> float:
    """Kish's effective number of events of weights 1 / pi: (sum w)^2 / sum w^2."""
    w = 1.0 / np.asarray(probs, dtype=float)
    return float(w.sum() ** 2 / (w @ w)) if len(w) else 0.0


def hajek(
    values: Sequence[float],
    probs: Sequence[float],
    clusters: Sequence[int] | np.ndarray | None = None,
    conf: float = 0.95,
    finite: bool = False,
) -> Interval:
    """The Hajek (weighted) mean sum(y / pi) / sum(1 / pi) with its t interval.

    By default the interval is for the process behind the events (what comparing two weeks
    needs; it holds the mean of the events themselves too, a little wide when many of them
    were judged); `finite`: for the mean of the events the sample was drawn from only (a
    series judged whole has width 0). `Interval.n` is the number
    of judged events, `clusters` the clusters (events when none are given)."""
    y, p = _arrays(values, probs)
    n = len(y)
    if not n:
        raise ValueError("no values")
    w = 1.0 / p
    total = float(w.sum())
    mean = float(w @ y / total)
    df = max(1.0, effective_n(p) - 1.0)
    if clusters is not None:
        codes = np.asarray(clusters, dtype=np.int64)
        var, g, cdf = cluster_variance(w * (y - mean) / total, codes)
        df = min(df, cdf)
    else:
        g = n
        shrink = (1.0 - p) if finite else np.ones(n)
        var = float(np.sum(shrink * (w * (y - mean)) ** 2)) / total**2
        if n > 1 and not finite:
            var *= n / (n - 1)
    half = t_ppf(0.5 + conf / 2, df) * math.sqrt(var) if var > 0 else 0.0
    return Interval(mean, mean - half, mean + half, n, g, df)


def half_width(sd: float, events: float, rate: float, conf: float = 0.95) -> float:
    """The expected half-width of the weekly mean of a series of `events` events a week judged
    each with probability `rate`, values of standard deviation `sd`: z sd / sqrt(events rate)
    (the interval `hajek` states by default, for the process behind the week)."""
    if rate <= 0 or events <= 0:
        return math.inf
    return _z(conf) * sd / math.sqrt(events * rate)


def rate_for(sd: float, events: float, target: float, conf: float = 0.95) -> float:
    """The smallest rate whose `half_width` over `events` events is `target`, (z sd / h)^2 / N,
    at most 1 (a series too small to reach the target is judged whole)."""
    if target <= 0 or events <= 0:
        return 1.0
    return min(1.0, (_z(conf) * sd / target) ** 2 / events)


@lru_cache(maxsize=16)
def _z(conf: float) -> float:
    return t_ppf(0.5 + conf / 2, 1e6)
