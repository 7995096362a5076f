"""Corrected estimates of a mean measure from a few human grades and many judge grades:
prediction-powered inference, pure functions, no I/O.

The judge grades the sampled traffic; people grade a random few of the judged units. The
judge's mean alone carries its bias; the people's mean alone is unbiased but wide. Combined:

- PPI (Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, "Prediction-powered inference",
  Science 2023, arXiv 2301.09633): the judge's mean over the units people did not grade plus
  the mean (human - judge) difference over those they did is unbiased whatever the judge's bias.
- PPI++ (Angelopoulos, Duchi & Zrnic, "PPI++: Efficient prediction-powered inference", arXiv
  2311.01453): weight the judge by lambda, chosen from the data for the smallest estimated
  variance. Here lambda is kept in [0, 1] (0: people only; 1: classical PPI), so a corrected
  interval is never wider than the plain people-only t interval on the same data.

Variances are cluster-robust over events (or queries): the influence values of both means are
summed per cluster, so a person's grades of several passages of one event are not counted as
independent, nor are the judge's and the people's grades of one event.

Which units: P@K is an average over passages, so every human-graded passage is a unit
(`passage_units`); nDCG@K and Hit@K are per event, so only events whose passages the measure
reads were all graded by people are (`event_units`). Expected gain: about 1.5x effective labels
with a good judge (Boyeau et al., "AutoEval done right", arXiv 2403.07008), at most about 2x
and less with a poor one (Dorner, Nastl & Hardt, arXiv 2410.13341).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.core.drift import Interval, cluster_variance, t_ppf
from ragmon.core.measure_table import MEASURES
from ragmon.core.measures import DEFAULT_PARAMS, MeasureParams, compute

# Below these a corrected estimate is not given (tests/stats/anchor_sim.py: coverage held from
# here on; docs/agreement.md says why).
MIN_LABELS = 10  # human-graded units (passages for P@K, events for nDCG@K and Hit@K)
MIN_CLUSTERS = 10  # effective number of events (or queries) among them (Kish)
PSEUDO = 1.0  # weight of each of the four pseudo-units (degenerate and binary samples)
# The event-level measures offered, and what a person must have graded for an event's value:
# "all" passages sent (nDCG@K's ideal ranking reads the whole judged pool) or the "top" K.
EVENT_MEASURES = {"ndcg": "all", "hit": "top", "precision": "top"}
_RANGE = {m.key: (m.lo, m.hi) for m in MEASURES}


@dataclass(frozen=True)
class GradedEvent:
    """One judged event as a corrected estimate reads it."""

    judge: Sequence[int | None]  # the judge's grade of each passage sent, best first
    human: Sequence[int | None]  # a person's grade of the same passages; None: not graded
    k: int
    weight: float = 1.0  # 1 / the probability the event was judged (1.0: all are)
    cluster: Hashable = None  # events sharing one (a query) move together; None: on its own
    judge_id: str | None = None  # the judge identity that graded it


@dataclass(frozen=True)
class Units:
    """One measure on its units: those people graded (both values) and the rest (judge only).

    Cluster codes are shared by both groups (an event's code is the same in each). The people's
    units must be a uniform random draw among the judged ones; `weights` (1 / the probability
    of being judged) make both means stand for all the traffic.
    """

    human: np.ndarray  # the measure with people's grades, per graded unit
    judge: np.ndarray  # the judge's measure on the same units
    clusters: np.ndarray
    weights: np.ndarray
    judge_rest: np.ndarray  # the judge's measure on the judged units people did not grade
    clusters_rest: np.ndarray
    weights_rest: np.ndarray
    lo: float = -math.inf  # the measure's range: intervals are cut to it
    hi: float = math.inf
    scale: float = 1.0  # the measure's mean is `scale` times the units' mean (P@K's empty slots)


@dataclass(frozen=True)
class Corrected:
    """A corrected (PPI++) mean beside the human-only and judge-only ones (`ppi_mean`)."""

    estimate: Interval | None  # PPI++; None with `reason` when too few units were graded
    human_only: Interval | None  # the people's mean on the graded units alone
    judge_only: float | None  # the judge's mean over every judged unit
    lam: float  # the judge's weight: 0 = people only, 1 = classical PPI
    labels: int  # human-graded units
    effective_labels: float | None  # labels x var(plain people-only) / var(corrected)
    reason: str | None = None
    random_draw: bool | None = None  # whether the graded units look like a random draw


def ppi_mean(
    units: Units,
    conf: float = 0.95,
    min_labels: int = MIN_LABELS,
    min_clusters: int = MIN_CLUSTERS,
) -> Corrected:
    """The PPI++ estimate of the mean and its interval, with the people-only one on the same data.

    theta(lam) = mean_L(Y - lam Yhat) + lam mean_U(Yhat) (weighted means; L the graded units,
    U the rest). Its influence values are a + lam b, so the cluster-robust variance is a
    quadratic in lam, minimised at -sum(A_c B_c) / sum(B_c^2) over cluster totals, then cut to
    [0, 1]. As lam = 0 (the people-only mean, whose variance is the plain t interval's) is
    allowed, the tuned variance is never larger: the interval is never wider than the plain
    people-only one, and at most as wide as classical PPI's (lam = 1) on the same data. Both use
    Student's t with the same degrees of freedom: the effective number of graded clusters
    (sum s)^2 / sum s^2 minus 1, s a cluster's graded weight (Kish's design effect: a few big
    clusters or weights count as few), which the minimum applies to as well. The interval is
    symmetric around the estimate, cut to the measure's range.

    Degenerate and binary samples: when every graded value is the same or the judge agreed with
    people on every graded unit, the plain variance of the people's part is 0 and would give a
    zero-width (or too narrow) interval; when every value is at an end of the range (Hit@K, a
    passage's relevance), the plain interval of a few dozen units misses more often than it
    says. For a measure with a finite range the intervals then get four pseudo-units beside the
    graded ones, at the corners (lo, lo), (lo, hi), (hi, lo), (hi, hi) of (human, judge)
    (Agresti & Coull's two successes and two failures; on the difference human - judge, Agresti
    & Min's cell adjustment), each weighing one average graded unit, or one average cluster
    when degenerate; the point estimate stays the plain one and the interval holds it.
    """
    y, f, v = units.human, units.judge, units.weights
    fu, w = units.judge_rest, units.weights_rest
    n = len(y)
    total = float(v.sum() + w.sum())
    judge_only = float(v @ f + w @ fu) / total * units.scale if total > 0 else None
    g = len(np.unique(units.clusters))
    sizes = np.bincount(units.clusters, weights=v)
    g_eff = float(sizes.sum() ** 2 / (sizes @ sizes)) if n else 0.0
    if n < min_labels or g_eff < min_clusters - 1e-9:
        why = (
            f"{n} graded units from {g_eff:.4g} effective clusters; "
            f"needs {min_labels} from {min_clusters}"
        )
        return Corrected(None, None, judge_only, 0.0, n, None, why)
    df = max(1.0, min(g - 1.0, g_eff - 1.0))
    fubar = float(w @ fu / w.sum()) if len(fu) else 0.0
    ybar, fbar = float(v @ y / v.sum()), float(v @ f / v.sum())
    lo, hi = units.lo, units.hi
    graded = units.clusters
    degenerate = bool(np.ptp(y) == 0 or np.all(y == f))
    binary = bool(np.isin(y, (lo, hi)).all() and np.isin(f, (lo, hi)).all())
    if (degenerate or binary) and math.isfinite(lo) and math.isfinite(hi):
        unit = float(sizes.sum()) / g if degenerate else float(v.mean())
        y = np.concatenate([y, [lo, lo, hi, hi]])
        f = np.concatenate([f, [lo, hi, lo, hi]])
        v = np.concatenate([v, np.full(4, PSEUDO * unit)])
        top = max(int(graded.max()), int(units.clusters_rest.max(initial=0)))
        graded = np.concatenate([graded, top + 1 + np.arange(4)])
    my, mf = float(v @ y / v.sum()), float(v @ f / v.sum())  # with any pseudo-units
    a = v * (y - my) / v.sum()
    b = np.concatenate([-v * (f - mf) / v.sum(), w * (fu - fubar) / w.sum() if len(fu) else []])
    a = np.concatenate([a, np.zeros(len(fu))])
    codes = np.concatenate([graded, units.clusters_rest])
    big_a, big_b = np.bincount(codes, weights=a), np.bincount(codes, weights=b)
    bb = float(big_b @ big_b)
    tuned = min(1.0, max(0.0, -float(big_a @ big_b) / bb)) if bb > 0 and len(fu) else 0.0

    def variance(lam: float) -> float:
        return cluster_variance(a + lam * b, codes, groups=g)[0]

    def interval(lam: float) -> Interval | None:
        var = variance(lam)
        if var <= 0:
            return None
        est = min(hi, max(lo, ybar - lam * (fbar - fubar)))
        center = my - lam * (mf - fubar)  # the estimate but with pseudo-units
        half = t_ppf(0.5 + conf / 2, df) * math.sqrt(var)
        low, high = max(lo, min(est, center - half)), min(hi, max(est, center + half))
        s = units.scale
        return Interval(est * s, low * s, high * s, n, g, df)

    human_only = interval(0.0)
    if human_only is None:
        return Corrected(None, None, judge_only, 0.0, n, None, "no spread among the human values")
    estimate = interval(tuned)
    if estimate is None or estimate.high - estimate.low > human_only.high - human_only.low:
        tuned, estimate = 0.0, human_only
    effective = n * variance(0.0) / variance(tuned)
    return Corrected(estimate, human_only, judge_only, tuned, n, effective)


# ---- from grades to units ---------------------------------------------------------------------


class _Builder:
    """Collects (value, cluster, weight) for the graded units and the rest."""

    def __init__(self) -> None:
        self.codes: dict[Hashable, int] = {}
        self.graded: list[tuple[float, float, int, float]] = []
        self.rest: list[tuple[float, int, float]] = []

    def code(self, index: int, cluster: Hashable) -> int:
        key = ("event", index) if cluster is None else ("cluster", cluster)
        return self.codes.setdefault(key, len(self.codes))

    def units(self, measure: str, scale: float = 1.0) -> Units:
        y, f, c, v = np.array(self.graded, dtype=float).reshape(-1, 4).T
        fu, cu, w = np.array(self.rest, dtype=float).reshape(-1, 3).T
        lo, hi = _RANGE[measure]
        return Units(y, f, c.astype(np.int64), v, fu, cu.astype(np.int64), w, lo, hi, scale)


_GRADES = (None, 0, 1, 2, 3)


def _check(e: GradedEvent, i: int) -> None:
    if len(e.human) != len(e.judge):
        raise ValueError(f"events[{i}]: {len(e.human)} human grades for {len(e.judge)} passages")
    for name, grades in (("human", e.human), ("judge", e.judge)):
        for r, g in enumerate(grades):
            if g not in _GRADES or type(g) not in (int, type(None)):
                raise ValueError(f"events[{i}].{name}[{r}] must be 0-3 or None, got {g!r}")
    if type(e.k) is not int or e.k < 1:
        raise ValueError(f"events[{i}]: k must be an integer >= 1, got {e.k!r}")
    if not (e.weight > 0 and math.isfinite(e.weight)):
        raise ValueError(f"events[{i}]: weight must be a positive number, got {e.weight!r}")


def passage_units(events: Sequence[GradedEvent], params: MeasureParams = DEFAULT_PARAMS) -> Units:
    """P@K's units: every passage in each event's top K; those a person graded are the labels.

    A passage's value is P@1 of that passage alone (`measures.compute`'s own rule of relevant:
    an ungraded passage is not relevant) and its weight the event's weight / K, so the weighted
    mean over passages, times `scale` (the events' mean fill of their top K: 1 unless some sent
    fewer than K passages), is the weighted mean P@K over events.
    """
    value = {g: compute([g], 1, params)["precision"] or 0.0 for g in _GRADES}
    out = _Builder()
    fill = weight = 0.0
    for i, e in enumerate(events):
        _check(e, i)
        code = out.code(i, e.cluster)
        shown = min(e.k, len(e.judge))
        fill += e.weight * shown / e.k
        weight += e.weight
        for h, j in zip(e.human[:shown], e.judge[:shown], strict=True):
            if h is None:
                out.rest.append((value[j], code, e.weight / e.k))
            else:
                out.graded.append((value[h], value[j], code, e.weight / e.k))
    return out.units("precision", fill / weight if weight else 1.0)


def event_units(
    events: Sequence[GradedEvent], measure: str, params: MeasureParams = DEFAULT_PARAMS
) -> Units:
    """An event-level measure's units: every event; those whose passages the measure reads were
    all graded by a person are the labels (`EVENT_MEASURES`: nDCG@K needs every passage sent,
    Hit@K and P@K the top K). Both values come from `measures.compute`. An event with no
    passage is never a label (there is nothing to grade)."""
    if measure not in EVENT_MEASURES:
        raise ValueError(f"measure must be one of {', '.join(EVENT_MEASURES)}, got {measure!r}")
    reads_all = EVENT_MEASURES[measure] == "all"
    memo: dict[tuple[tuple[int | None, ...], int], float] = {}  # rankings repeat: few patterns

    def value(grades: Sequence[int | None], k: int) -> float:
        key = (tuple(grades), k)
        if key not in memo:
            memo[key] = compute(list(grades), k, params)[measure] or 0.0  # never None for these
        return memo[key]

    out = _Builder()
    for i, e in enumerate(events):
        _check(e, i)
        code = out.code(i, e.cluster)
        needed = e.human if reads_all else e.human[: e.k]
        if needed and all(g is not None for g in needed):
            out.graded.append((value(e.human, e.k), value(e.judge, e.k), code, e.weight))
        else:
            out.rest.append((value(e.judge, e.k), code, e.weight))
    return out.units(measure)
