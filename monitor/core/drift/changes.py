"""Means and changes of means that allow for repeated questions and for the segment mix."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ragmon.core.drift.distributions import t_ppf, t_sf

MIN_CELL = 10  # events a segment needs in each window to be compared on its own
# In a window's change, one question weighs at most this many times its window's average
# question (`segment_change`'s cap): a trending topic cannot become the whole comparison.
CAP = 2.0
_TINY = 1e-12  # differences of means below this are rounding, not change


@dataclass(frozen=True)
class Sample:
    """One window's per-event values with integer codes for their segment and query cluster.

    Codes are shared between the two windows compared: a query asked in both is one cluster.
    """

    values: np.ndarray
    segments: np.ndarray
    clusters: np.ndarray
    # 1 / each event's inclusion probability (Hajek's weights); None: every event weighs 1
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def w(self) -> np.ndarray:
        """Each event's weight, normalized to mean 1 (all ones without weights)."""
        if self.weights is None or not len(self.values):
            return np.ones(len(self.values))
        return self.weights * (len(self.weights) / self.weights.sum())


@dataclass(frozen=True)
class Interval:
    """A mean with its confidence interval, events, query clusters and degrees of freedom."""

    estimate: float
    low: float
    high: float
    n: int
    clusters: int
    df: float

    def within(self, lo: float, hi: float) -> Interval:
        """Cut to the range the values can take (the estimate lies inside already)."""
        return replace(self, low=max(lo, self.low), high=min(hi, self.high))

    @property
    def se(self) -> float:
        half = self.high - self.estimate
        return half / t_ppf(0.975, self.df) if self.df >= 1 and half > 0 else 0.0


@dataclass(frozen=True)
class Change:
    """Current minus baseline: in total, and within segments at the baseline's mix (tested)."""

    total: float  # difference of the two windows' means over all events
    estimate: float  # the change within segments, weighted by the baseline's segment shares
    low: float
    high: float
    pvalue: float  # two-sided, for the within-segment change
    df: float
    sd: float  # pooled within-segment standard deviation of one event
    segments: int  # segments compared on their own (1 when there are none)

    def within(self, lo: float, hi: float) -> Change:
        """Cut to the changes a measure of range [lo, hi] can make: plus or minus its width."""
        return replace(self, low=max(lo - hi, self.low), high=min(hi - lo, self.high))

    @property
    def mix(self) -> float:
        """The part of the total change explained by the segment mix (and by segments too small
        to compare on their own, and questions above the cap)."""
        return self.total - self.estimate

    def _in_sd(self, x: float) -> float:
        if self.sd > 0:
            return x / self.sd
        return 0.0 if abs(x) <= _TINY else math.copysign(math.inf, x)

    @property
    def effect(self) -> float:
        """The within-segment change in standard deviations of one event (Cohen's d)."""
        return self._in_sd(self.estimate)

    @property
    def effect_interval(self) -> tuple[float, float]:
        return self._in_sd(self.low), self._in_sd(self.high)


def capped(weights: np.ndarray, clusters: np.ndarray, cap: float) -> np.ndarray:
    """The events' weights with each cluster cut to `cap` times the window's average cluster
    in events (clusters present), its events' weights scaled alike; a single event is never
    cut, whatever its inclusion weight."""
    count = np.bincount(clusters)
    present = count > 0
    limit = max(1.0, cap * len(clusters) / max(1, int(present.sum())))
    scale = np.minimum(1.0, limit / np.maximum(count, 1))
    return weights * scale[clusters]


def cluster_variance(
    psi_values: np.ndarray, clusters: np.ndarray, groups: int | None = None
) -> tuple[float, int, float]:
    """CR1 variance of a sum of influence values, the clusters present, and the effective
    number of clusters (sum u^2)^2 / sum u^4 as degrees of freedom, capped at G - 1.

    `groups` sets G when only some clusters carry the sample (the human-graded events of a
    corrected estimate; the others add a term known far more precisely).
    """
    u = np.bincount(clusters, weights=psi_values)
    g = int(np.count_nonzero(np.bincount(clusters))) if groups is None else groups
    if g < 2:
        return 0.0, g, 1.0
    s2 = float(np.dot(u, u))
    s4 = float(np.sum(u**4))
    eff = s2 * s2 / s4 if s4 > 0 else g - 1.0
    return g / (g - 1) * s2, g, max(1.0, min(g - 1.0, eff))


def clustered_mean(
    values: np.ndarray,
    clusters: np.ndarray,
    conf: float = 0.95,
    weights: np.ndarray | None = None,
) -> Interval:
    """The mean with a cluster-robust t interval (equals the usual t interval for singletons).

    `weights` (1 / each event's inclusion probability): Hajek's mean sum(w y) / sum(w), its
    variance the same sandwich over the influence values w (y - mean) / sum(w)
    (`ragmon.core.weighted.hajek` with clusters), degrees of freedom at most Kish's effective
    number of events minus 1."""
    n = len(values)
    if not n:
        raise ValueError("no values")
    if weights is None:
        m = float(values.mean())
        var, g, df = cluster_variance((values - m) / n, clusters)
    else:
        total = float(weights.sum())
        m = float(weights @ values / total)
        var, g, df = cluster_variance(weights * (values - m) / total, clusters)
        df = max(1.0, min(df, total**2 / float(weights @ weights) - 1.0))
    half = t_ppf(0.5 + conf / 2, df) * math.sqrt(var) if var > 0 else 0.0
    return Interval(m, m - half, m + half, n, g, df)


def _permutation_bound(n_base: int, n_cur: int) -> float:
    """The smallest two-sided permutation p-value: two of C(n_b + n_c, n_b) arrangements."""
    log_comb = math.lgamma(n_base + n_cur + 1) - math.lgamma(n_base + 1) - math.lgamma(n_cur + 1)
    return min(1.0, 2.0 * math.exp(-log_comb))


def _cells(base: Sample, cur: Sample, min_cell: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Segment codes -> comparison cells: segments with `min_cell` events in both windows keep
    their own cell, the rest are pooled into one; a cell still too small is dropped (-1)."""
    size = int(max(base.segments.max(initial=0), cur.segments.max(initial=0))) + 1
    nb = np.bincount(base.segments, minlength=size)
    nc = np.bincount(cur.segments, minlength=size)
    own = (nb >= min_cell) & (nc >= min_cell)
    cell_of = np.where(own, np.cumsum(own) - 1, int(own.sum()))
    n_cells = int(own.sum()) + 1
    cb, cc = cell_of[base.segments], cell_of[cur.segments]
    nb_cell = np.bincount(cb, minlength=n_cells)
    nc_cell = np.bincount(cc, minlength=n_cells)
    keep = (nb_cell >= min_cell) & (nc_cell >= min_cell)
    if not keep.any():  # too few events per segment: compare the pooled windows
        return np.zeros(len(base), int), np.zeros(len(cur), int), 1
    renum = np.where(keep, np.cumsum(keep) - 1, -1)
    return renum[cb], renum[cc], int(keep.sum())


def segment_change(
    base: Sample,
    cur: Sample,
    min_cell: int = MIN_CELL,
    conf: float = 0.95,
    cap: float | None = None,
) -> Change:
    """The change of the mean within segments, at the baseline's segment mix.

    estimate = sum_s w_s (mean_cur,s - mean_base,s), w_s = the baseline's share of segment s.
    Its variance is the cluster-robust sandwich over query clusters of the influence values
    w_s (y - mean_s) / sqrt(n_s (n_s - 1)) (each window's, with opposite signs), which is
    Welch's variance when every query is asked once. Reference: t with the effective number of
    clusters. Needs at least two events per window.

    `cap`: in each window, a question cluster weighs at most `cap` times the window's average
    cluster (`capped`). One trending topic then counts as a few questions, not as a third of
    the week: the estimand is the change over questions, and the rest of the total change is
    the mix's. Without it a topic new this week is one cluster carrying most of the variance,
    and the effective degrees of freedom fall to about 1.
    """
    if len(base) < 2 or len(cur) < 2:
        raise ValueError("each window needs at least two events")
    ub, uc = base.w(), cur.w()  # Hajek's weights (ones when every event weighs the same)
    total = float(uc @ cur.values / uc.sum() - ub @ base.values / ub.sum())
    if cap is not None:
        ub, uc = capped(ub, base.clusters, cap), capped(uc, cur.clusters, cap)
    cb, cc, n_cells = _cells(base, cur, min_cell)
    kb, kc = cb >= 0, cc >= 0
    ub, uc = ub[kb], uc[kc]
    nb = np.bincount(cb[kb], minlength=n_cells).astype(float)  # events
    nc = np.bincount(cc[kc], minlength=n_cells).astype(float)
    sb = np.bincount(cb[kb], weights=ub, minlength=n_cells)  # weights: the events they stand for
    sc = np.bincount(cc[kc], weights=uc, minlength=n_cells)
    mb = np.bincount(cb[kb], weights=ub * base.values[kb], minlength=n_cells) / sb
    mc = np.bincount(cc[kc], weights=uc * cur.values[kc], minlength=n_cells) / sc
    w = sb / sb.sum()
    estimate = float(np.dot(w, mc - mb))
    rb = base.values[kb] - mb[cb[kb]]
    rc = cur.values[kc] - mc[cc[kc]]
    # w_s u (y - mean_s) / sum_s(u) * sqrt(n_s / (n_s - 1)): with u = 1, w_s (y - mean_s) /
    # sqrt(n_s (n_s - 1)), Welch's variance for singletons; unequal weights lower the
    # effective number of clusters (the degrees of freedom) through these values
    psi_b = -w[cb[kb]] * ub * rb / (sb * np.sqrt((nb - 1) / nb))[cb[kb]]
    psi_c = w[cc[kc]] * uc * rc / (sc * np.sqrt((nc - 1) / nc))[cc[kc]]
    var, _, df = cluster_variance(
        np.concatenate([psi_b, psi_c]), np.concatenate([base.clusters[kb], cur.clusters[kc]])
    )
    if cap is None:
        resid = float(ub @ (rb * rb) + uc @ (rc * rc))
    else:  # the SD of one event, whatever the cut
        resid = len(ub) * float(ub @ (rb * rb) / ub.sum()) + len(uc) * float(
            uc @ (rc * rc) / uc.sum()
        )
    sd = math.sqrt(resid / max(1.0, nb.sum() + nc.sum() - 2 * n_cells))
    floor = _permutation_bound(len(np.unique(base.clusters[kb])), len(np.unique(cur.clusters[kc])))
    return _tested(total, estimate, var, df, sd, n_cells, floor, conf)


def _tested(
    total: float,
    estimate: float,
    var: float,
    df: float,
    sd: float,
    cells: int,
    floor: float,
    conf: float,
) -> Change:
    """The t interval and p-value; p never below the permutation bound `floor` (no test on so
    few clusters could be surer), and a zero variance gives that bound, not p = 0."""
    if var <= 0:
        p = 1.0 if abs(estimate) <= _TINY else floor
        return Change(total, estimate, estimate, estimate, p, df, sd, cells)
    se = math.sqrt(var)
    half = t_ppf(0.5 + conf / 2, df) * se
    p = min(1.0, max(floor, 2.0 * t_sf(abs(estimate) / se, df)))
    return Change(total, estimate, estimate - half, estimate + half, p, df, sd, cells)


# ---- binned counts (when the per-event records are gone) ------------------------------------


def bin_midpoints(bounds: Sequence[float]) -> list[float]:
    """A representative value per bucket (first: its bound, +Inf: the last bound)."""
    mids = [bounds[0]]
    mids += [(lo + hi) / 2 for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return [*mids, bounds[-1]]


def binned_moments(
    counts: Sequence[int],
    bounds: Sequence[float],
    total: float,
    sum_squares: float | None = None,
) -> tuple[int, float, float]:
    """(n, mean, variance) of a histogram: the mean from its sum, the variance from its sum of
    squares when recorded, else from the bin mid-points."""
    n = int(sum(counts))
    if n <= 0:
        raise ValueError("empty histogram")
    mean = total / n
    if n == 1:
        return n, mean, 0.0
    if sum_squares is not None:
        return n, mean, max(0.0, (sum_squares - n * mean * mean) / (n - 1))
    mids = bin_midpoints(bounds)
    approx = math.fsum(c * x for c, x in zip(counts, mids, strict=True)) / n
    ss = math.fsum(c * (x - approx) ** 2 for c, x in zip(counts, mids, strict=True))
    return n, mean, ss / (n - 1)


Cell = tuple[int, float, float]  # (n, mean, variance)


def binned_change(
    base: Mapping[str, Cell], cur: Mapping[str, Cell], min_cell: int = MIN_CELL, conf: float = 0.95
) -> Change:
    """`segment_change` from per-segment (n, mean, variance) only: Welch's variance with the
    Welch-Satterthwaite degrees of freedom (every event counted as its own query)."""

    def total_mean(cells: Mapping[str, Cell]) -> float:
        return sum(n * m for n, m, _ in cells.values()) / sum(n for n, _, _ in cells.values())

    both = [s for s in base if s in cur and min(base[s][0], cur[s][0]) >= min_cell]
    if both:
        b = {s: base[s] for s in both}
        c = {s: cur[s] for s in both}
    else:
        b = {"all": _pool(base.values())}
        c = {"all": _pool(cur.values())}
    nb = sum(v[0] for v in b.values())
    w = {s: b[s][0] / nb for s in b}
    estimate = sum(w[s] * (c[s][1] - b[s][1]) for s in b)
    parts = [w[s] ** 2 * x[2] / x[0] for s in b for x in (b[s], c[s])]
    var = sum(parts)
    dfs = [x[0] - 1 for s in b for x in (b[s], c[s])]
    df = var**2 / sum(p * p / d for p, d in zip(parts, dfs, strict=True) if d > 0) if var else 1.0
    resid = sum((x[0] - 1) * x[2] for s in b for x in (b[s], c[s]))
    sd = math.sqrt(resid / max(1, sum(dfs)))
    total = total_mean(cur) - total_mean(base)
    floor = _permutation_bound(nb, sum(x[0] for x in c.values()))
    return _tested(total, estimate, var, df, sd, len(b), floor, conf)


def _pool(cells: Iterable[Cell]) -> Cell:
    items = list(cells)
    n = sum(x[0] for x in items)
    mean = sum(x[0] * x[1] for x in items) / n
    ss = sum((x[0] - 1) * x[2] + x[0] * (x[1] - mean) ** 2 for x in items)
    return n, mean, ss / (n - 1) if n > 1 else 0.0
