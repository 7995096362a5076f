"""Drift statistics for the weekly report: pure functions, no I/O, no project imports.

What each function answers, in the report's words:

- `psi`: how much a binned distribution moved (Population Stability Index on the fixed histogram
  bins: < 0.1 stable, 0.1-0.25 moderate, > 0.25 major; Siddiqi, *Credit Risk Scorecards*, 2006).
  `psi_noise` is what PSI reads when nothing changed at this volume, so small samples are not
  mistaken for a shift.
- `ks_2samp`: whether two samples of per-event values come from one distribution (two-sample
  Kolmogorov-Smirnov; exact lattice-path p-value for small samples (Hodges 1957), the
  Kolmogorov limit with Stephens' correction for large ones).
- `mean_ci_bootstrap`, `mean_ci_normal`, `mean_ci_binned`, `proportion_ci`: a mean and its 95%
  confidence interval, from per-event values (percentile bootstrap, or the normal/CLT interval),
  from binned counts (normal, variance from bin mid-points), or exactly for a 0/1 measure (Wilson).
- `diff_means`: week-over-week difference with a Welch (normal) interval and p-value.
- `holm`, `how_sure`: many series and measures are tested at once; Holm's step-down adjustment
  keeps the chance of any false alarm in a report near 5%, and `how_sure` says it in words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "PSI_MAJOR",
    "PSI_MODERATE",
    "Diff",
    "Interval",
    "KSResult",
    "bin_midpoints",
    "diff_means",
    "holm",
    "how_sure",
    "kolmogorov_sf",
    "ks_2samp",
    "ks_statistic",
    "mean_ci_binned",
    "mean_ci_bootstrap",
    "mean_ci_normal",
    "mean_var",
    "proportion_ci",
    "psi",
    "psi_level",
    "psi_noise",
]

PSI_MODERATE = 0.1
PSI_MAJOR = 0.25
PSI_FLOOR = 1e-4  # share given to an empty bin so PSI stays finite
KS_EXACT_LIMIT = 100_000  # m * n up to which the exact lattice-path p-value is computed
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Interval:
    """An estimate with a confidence interval and how it was computed."""

    estimate: float
    low: float
    high: float
    n: int
    method: str  # "bootstrap", "normal", "normal-binned", "wilson"


@dataclass(frozen=True)
class Diff:
    """Current minus baseline, its interval, the two-sided p-value and the effect size."""

    estimate: float
    low: float
    high: float
    pvalue: float
    effect: float  # difference in units of the pooled standard deviation (Cohen's d)
    method: str


@dataclass(frozen=True)
class KSResult:
    statistic: float
    pvalue: float
    method: str  # "exact" or "asymptotic"


# ---- PSI ---------------------------------------------------------------------------------


def _shares(counts: Sequence[float], floor: float) -> list[float]:
    total = float(sum(counts))
    if total <= 0:
        raise ValueError("counts must have a positive total")
    return [max(c / total, floor) for c in counts]


def psi(baseline: Sequence[float], current: Sequence[float], floor: float = PSI_FLOOR) -> float:
    """Population Stability Index of two count vectors on the same bins.

    PSI = sum_i (c_i - b_i) * ln(c_i / b_i) over bin shares; an empty bin counts as `floor`.
    """
    if len(baseline) != len(current):
        raise ValueError("baseline and current must have the same bins")
    b = _shares(baseline, floor)
    c = _shares(current, floor)
    return sum((ci - bi) * math.log(ci / bi) for bi, ci in zip(b, c, strict=True))


def psi_level(value: float) -> str:
    """The conventional reading: stable (< 0.1), moderate (0.1-0.25), major (> 0.25)."""
    if value < PSI_MODERATE:
        return "stable"
    return "moderate" if value <= PSI_MAJOR else "major"


def psi_noise(baseline: Sequence[float], current: Sequence[float]) -> float:
    """Expected PSI when nothing changed: (occupied bins - 1) * (1/n_b + 1/n_c).

    Under no change PSI is approximately chi-square with (bins - 1) degrees of freedom scaled by
    1/n_b + 1/n_c, so with a few hundred events a handful of occupied bins already reads ~0.05.
    """
    nb, nc = float(sum(baseline)), float(sum(current))
    if nb <= 0 or nc <= 0:
        return math.inf
    occupied = sum(1 for b, c in zip(baseline, current, strict=True) if b > 0 or c > 0)
    return max(occupied - 1, 0) * (1 / nb + 1 / nc)


# ---- Kolmogorov-Smirnov ------------------------------------------------------------------


def ks_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """sup_x |F_a(x) - F_b(x)| of the two empirical distribution functions."""
    xa, xb = sorted(a), sorted(b)
    m, n = len(xa), len(xb)
    if not m or not n:
        raise ValueError("both samples must be non-empty")
    i = j = 0
    d = 0.0
    while i < m and j < n:
        x = min(xa[i], xb[j])
        while i < m and xa[i] == x:
            i += 1
        while j < n and xb[j] == x:
            j += 1
        d = max(d, abs(i / m - j / n))
    return d


def kolmogorov_sf(x: float) -> float:
    """P(K > x) for the Kolmogorov distribution: 2 * sum_k (-1)^(k-1) exp(-2 k^2 x^2)."""
    if x <= 0:
        return 1.0
    if x < 0.2:
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = math.exp(-2.0 * k * k * x * x)
        total += term if k % 2 else -term
        if term < 1e-16:
            break
    return min(1.0, max(0.0, 2.0 * total))


def _ks_exact_sf(m: int, n: int, d: float) -> float:
    """P(D >= d) for samples of sizes m, n without ties: paths through the m x n lattice."""
    # D * m * n is an integer |i*n - j*m| at the point where the sup is reached.
    h = round(d * m * n)
    if h <= 0:
        return 1.0
    prev = [0.0] * (n + 1)
    for i in range(m + 1):
        cur = [0.0] * (n + 1)
        for j in range(n + 1):
            if abs(i * n - j * m) >= h:
                continue
            if i == 0 and j == 0:
                cur[0] = 1.0
                continue
            left = m + n - i - j + 1  # steps remaining before this one
            v = 0.0
            if i > 0:
                v += prev[j] * (m - i + 1) / left
            if j > 0:
                v += cur[j - 1] * (n - j + 1) / left
            cur[j] = v
        prev = cur
    return min(1.0, max(0.0, 1.0 - prev[n]))


def ks_2samp(a: Sequence[float], b: Sequence[float], exact_limit: int = KS_EXACT_LIMIT) -> KSResult:
    """Two-sided two-sample KS test.

    Exact p-value (lattice paths) when len(a) * len(b) <= `exact_limit`, else the Kolmogorov
    limit at sqrt(en) * D with Stephens' small-sample correction, en = mn / (m + n). With ties
    (discrete measures such as Hit) the p-value is conservative.
    """
    d = ks_statistic(a, b)
    m, n = len(a), len(b)
    if m * n <= exact_limit:
        return KSResult(d, _ks_exact_sf(m, n, d), "exact")
    en = math.sqrt(m * n / (m + n))
    return KSResult(d, kolmogorov_sf((en + 0.12 + 0.11 / en) * d), "asymptotic")


# ---- means and intervals ------------------------------------------------------------------


def _z(conf: float) -> float:
    return _NORMAL.inv_cdf(0.5 + conf / 2)


def mean_var(values: Sequence[float]) -> tuple[float, float]:
    """Mean and unbiased sample variance (0 for a single value)."""
    n = len(values)
    if not n:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.fsum((v - mean) ** 2 for v in values) / (n - 1)


def mean_ci_normal(values: Sequence[float], conf: float = 0.95) -> Interval:
    """Mean with the normal (CLT) interval mean +- z * s / sqrt(n)."""
    mean, var = mean_var(values)
    half = _z(conf) * math.sqrt(var / len(values))
    return Interval(mean, mean - half, mean + half, len(values), "normal")


def mean_ci_bootstrap(
    values: Sequence[float], conf: float = 0.95, n_boot: int = 1000, seed: int = 0
) -> Interval:
    """Mean with a percentile bootstrap interval over events (seeded: reports are repeatable).

    Resampling runs on numpy (a pure computation, imported here so the rest of the module
    needs nothing beyond the standard library).
    """
    import numpy as np

    n = len(values)
    if not n:
        raise ValueError("no values")
    vals = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)  # resamples per block: bounded memory for large n
    means = np.concatenate(
        [
            vals[rng.integers(0, n, size=(min(chunk, n_boot - i), n))].mean(axis=1)
            for i in range(0, n_boot, chunk)
        ]
    )
    lo, hi = np.quantile(means, [(1 - conf) / 2, (1 + conf) / 2])
    return Interval(math.fsum(values) / n, float(lo), float(hi), n, "bootstrap")


def bin_midpoints(bounds: Sequence[float]) -> list[float]:
    """A representative value per bucket (first: its bound, +Inf: the last bound)."""
    mids = [bounds[0]]
    mids += [(lo + hi) / 2 for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return [*mids, bounds[-1]]


def binned_mean_var(
    counts: Sequence[int], bounds: Sequence[float], total: float | None = None
) -> tuple[float, float, int]:
    """Mean (exact when `total`, the histogram's sum, is given), variance from mid-points, n."""
    n = int(sum(counts))
    if n <= 0:
        raise ValueError("empty histogram")
    mids = bin_midpoints(bounds)
    approx_mean = math.fsum(c * x for c, x in zip(counts, mids, strict=True)) / n
    mean = total / n if total is not None else approx_mean
    ss = math.fsum(c * (x - approx_mean) ** 2 for c, x in zip(counts, mids, strict=True))
    return mean, ss / (n - 1) if n > 1 else 0.0, n


def mean_ci_binned(
    counts: Sequence[int], bounds: Sequence[float], total: float | None = None, conf: float = 0.95
) -> Interval:
    """Mean from a histogram with a normal interval; the spread is estimated from bin mid-points."""
    mean, var, n = binned_mean_var(counts, bounds, total)
    half = _z(conf) * math.sqrt(var / n)
    return Interval(mean, mean - half, mean + half, n, "normal-binned")


def proportion_ci(successes: int, n: int, conf: float = 0.95) -> Interval:
    """A share with Wilson's score interval (exact counts; good even near 0 or 1)."""
    if n <= 0:
        raise ValueError("n must be positive")
    z = _z(conf)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n, "wilson")


def diff_means(
    base: tuple[float, float, int], cur: tuple[float, float, int], conf: float = 0.95
) -> Diff:
    """Current minus baseline from (mean, variance, n) of each: Welch normal interval, p-value."""
    (mb, vb, nb), (mc, vc, nc) = base, cur
    if nb <= 0 or nc <= 0:
        raise ValueError("both windows need observations")
    d = mc - mb
    se = math.sqrt(vb / nb + vc / nc)
    pooled = math.sqrt(((nb - 1) * vb + (nc - 1) * vc) / max(nb + nc - 2, 1))
    effect = d / pooled if pooled > 0 else (0.0 if d == 0 else math.copysign(math.inf, d))
    if se == 0:
        p = 1.0 if d == 0 else 0.0
        return Diff(d, d, d, p, effect, "welch")
    half = _z(conf) * se
    p = 2 * (1 - _NORMAL.cdf(abs(d) / se))
    return Diff(d, d - half, d + half, p, effect, "welch")


# ---- many tests at once ----------------------------------------------------------------------


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given); controls family-wise error."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def how_sure(p_adjusted: float) -> str:
    """Plain words for an adjusted p-value: how likely the change is real, not noise."""
    if p_adjusted < 0.001:
        return "almost certainly real"
    if p_adjusted < 0.01:
        return "very likely real"
    if p_adjusted < 0.05:
        return "likely real"
    if p_adjusted < 0.2:
        return "possibly real, could be noise"
    return "indistinguishable from noise"
