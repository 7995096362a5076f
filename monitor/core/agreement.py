"""Agreement between two raters (a judge and people, or known grades): pure functions, no I/O;
`ragmon calibrate` and `ragmon agreement` report them.

- Cohen's kappa, unweighted or with linear or quadratic disagreement weights (Cohen, 1960;
  Cohen, 1968), with the Landis & Koch (1977) words for it.
- Kendall's tau-b between two orders, ties in either handled (Kendall, 1945), and a percentile
  bootstrap interval for the order of retrievers that resamples whole queries.
- `paired_agreement`: exact agreement, quadratic-weighted and unweighted kappa (quadratic
  weights forgive a near miss, so it reads higher: both are given), the confusion matrix and the
  judge's mean signed difference on passages graded by both, each with a 95 % interval that
  allows for grades of one event moving together (cluster-robust, Student's t with the
  effective number of events as degrees of freedom, as the drift statistics).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.core.drift import Interval, cluster_variance, clustered_mean, t_ppf

TAU_BOOTSTRAP = 1000  # resamples of the queries for Kendall tau's interval
GRADES = 4  # the 0-3 scale
# Below these, `paired_agreement` gives no interval (tests/stats/anchor_sim.py: coverage held
# from here on; docs/agreement.md says why).
MIN_PAIRS = 30
MIN_EVENTS = 10
# query -> retriever -> (measure with known grades, with the judge's) per record
PerQuery = dict[str, dict[str, list[tuple[float, float]]]]


def confusion(known: Sequence[int], judged: Sequence[int], n: int = 4) -> list[list[int]]:
    """n x n counts: rows the known grade, columns the judge's."""
    m = [[0] * n for _ in range(n)]
    for a, b in zip(known, judged, strict=True):
        m[a][b] += 1
    return m


def weighted_kappa(matrix: Sequence[Sequence[int]], weights: str = "none") -> float:
    """Cohen's kappa of a confusion matrix: unweighted, `linear` or `quadratic` weights.

    kappa = 1 - sum(w * observed) / sum(w * expected), w_ij = disagreement weight; NaN when
    expected disagreement is 0 (both raters used one category only).
    """
    n = len(matrix)
    total = sum(sum(row) for row in matrix)
    if total == 0:
        return math.nan
    rows = [sum(row) for row in matrix]
    cols = [sum(matrix[i][j] for i in range(n)) for j in range(n)]

    def w(i: int, j: int) -> float:
        if weights == "quadratic":
            return ((i - j) / (n - 1)) ** 2
        if weights == "linear":
            return abs(i - j) / (n - 1)
        return 0.0 if i == j else 1.0

    observed = sum(w(i, j) * matrix[i][j] for i in range(n) for j in range(n)) / total
    expected = sum(w(i, j) * rows[i] * cols[j] for i in range(n) for j in range(n)) / total**2
    return 1.0 - observed / expected if expected > 0 else math.nan


def binary_kappa(known: Sequence[int], judged: Sequence[int], relevant_grade: int) -> float:
    """Cohen's kappa of relevant (grade >= relevant_grade) versus not."""
    return weighted_kappa(
        confusion(
            [int(g >= relevant_grade) for g in known],
            [int(g >= relevant_grade) for g in judged],
            n=2,
        )
    )


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either list handled); NaN when a list is constant."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(xs)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else math.nan


def order_tau(per_query: PerQuery, weights: dict[str, int]) -> float:
    """Kendall tau between the retrievers' mean measure with known and with judge grades, the
    queries counted `weights` times."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for q, w in weights.items():
        for retriever, pairs in per_query[q].items():
            acc = sums[retriever]
            acc[0] += w * sum(p[0] for p in pairs)
            acc[1] += w * sum(p[1] for p in pairs)
            acc[2] += w * len(pairs)
    names = [r for r in sorted(sums) if sums[r][2]]
    if len(names) < 2:
        return math.nan
    return kendall_tau(
        [sums[r][0] / sums[r][2] for r in names], [sums[r][1] / sums[r][2] for r in names]
    )


def tau_with_interval(
    per_query: PerQuery, n_boot: int = TAU_BOOTSTRAP, seed: int = 0, conf: float = 0.95
) -> tuple[float, float, float]:
    """Kendall tau of the retrievers' order and its percentile bootstrap interval over queries
    (a query's records move together: the retrievers are compared on the same questions)."""
    queries = sorted(per_query)
    tau = order_tau(per_query, dict.fromkeys(queries, 1))
    if len(queries) < 2 or math.isnan(tau):
        return tau, math.nan, math.nan
    rng = random.Random(seed)
    draws = []
    for _ in range(n_boot):
        weights: dict[str, int] = defaultdict(int)
        for q in rng.choices(queries, k=len(queries)):
            weights[q] += 1
        t = order_tau(per_query, weights)
        if not math.isnan(t):
            draws.append(t)
    if not draws:
        return tau, math.nan, math.nan
    draws.sort()
    lo = draws[int((1 - conf) / 2 * (len(draws) - 1))]
    hi = draws[int((1 + conf) / 2 * (len(draws) - 1))]
    return tau, lo, hi


def landis_koch(kappa: float) -> str:
    """The usual words for a kappa (Landis & Koch, 1977)."""
    if math.isnan(kappa):
        return "undefined"
    for bound, word in ((0.0, "poor"), (0.2, "slight"), (0.4, "fair"), (0.6, "moderate"),
                        (0.8, "substantial")):  # fmt: skip
        if kappa <= bound:
            return word
    return "almost perfect"


# ---- a judge against people, with intervals ---------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """A judge's agreement with people on the passages both graded (`paired_agreement`).

    A value is None when it cannot be computed; `reasons` then says why, under its name.
    """

    pairs: int
    events: int  # distinct clusters (events) the pairs come from
    confusion: tuple[tuple[int, ...], ...]  # rows: the person's grade 0-3; columns: the judge's
    exact: Interval | None  # share of pairs with the same grade
    kappa: Interval | None  # quadratic-weighted kappa
    difference: Interval | None  # mean of judge minus person, in grades (> 0: over-grades)
    # shares[h][j]: of the passages people graded h, the share the judge graded j
    shares: tuple[tuple[Interval | None, ...], ...]
    reasons: Mapping[str, str]
    kappa_unweighted: Interval | None = None  # Cohen's unweighted kappa: any disagreement counts


def _codes(events: Sequence[Hashable] | None, n: int) -> np.ndarray:
    """Integer cluster codes: equal keys share a code; no keys, every pair its own."""
    if events is None:
        return np.arange(n)
    if len(events) != n:
        raise ValueError(f"need one event per pair, got {len(events)} for {n}")
    index: dict[Hashable, int] = {}
    return np.array([index.setdefault(e, len(index)) for e in events], dtype=np.int64)


def clustered_share(hits: np.ndarray, clusters: np.ndarray, conf: float = 0.95) -> Interval:
    """A share with Wilson's score interval (Wilson, 1927) at the effective sample size.

    n_eff = p(1 - p) / (cluster-robust variance of p), at most n, and z from Student's t with
    the effective number of clusters (Korn & Graubard, 1998, for proportions from clustered
    samples): the plain Wilson interval when pairs are independent, never an interval of zero
    width at p = 0 or 1.
    """
    n = len(hits)
    if not n:
        raise ValueError("no values")
    p = float(hits.mean())
    var, g, df = cluster_variance((hits - p) / n, clusters)
    n_eff = min(float(n), p * (1 - p) / var) if var > 0 else float(n)
    z = t_ppf(0.5 + conf / 2, df)
    z2 = z * z / n_eff
    center = (p + z2 / 2) / (1 + z2)
    half = z * math.sqrt(p * (1 - p) / n_eff + z2 / (4 * n_eff)) / (1 + z2)
    low, high = max(0.0, min(p, center - half)), min(1.0, max(p, center + half))  # p: rounding
    return Interval(p, low, high, n, g, df)


def quadratic_kappa(
    human: np.ndarray, judge: np.ndarray, clusters: np.ndarray, conf: float = 0.95
) -> Interval | None:
    """Quadratic-weighted kappa with a cluster-robust delta-method interval; None when both
    raters gave one and the same grade throughout (no disagreement is expected then).

    With quadratic weights kappa = 2 cov(h, j) / (var h + var j + (mean h - mean j)^2), Lin's
    concordance correlation (Fleiss & Cohen, 1973; Lin, 1989): a smooth function of five
    means, so its influence values give the variance, summed per event (CR1). The interval is
    built on Fisher's z = atanh(kappa) (Lin, 1989), which keeps it inside [-1, 1]; a kappa of
    exactly 1 has no spread to measure and gets the zero-width interval [1, 1].
    """
    n = len(human)
    h, j = human.astype(float), judge.astype(float)
    a, b = h.mean(), j.mean()
    cross, hh, jj = h * j, h * h, j * j
    big_a, big_bh, big_bj = cross.mean(), hh.mean(), jj.mean()
    d = big_bh + big_bj - 2 * a * b
    if d <= 0:
        return None
    num = 2 * (big_a - a * b)
    kappa = float(num / d)
    influence = (
        2 / d * (cross - big_a)
        - 2 * (d - num) / d**2 * (b * (h - a) + a * (j - b))
        - num / d**2 * (hh - big_bh + jj - big_bj)
    )
    var, g, df = cluster_variance(influence / n, clusters)
    if var <= 0 or abs(kappa) >= 1:
        return Interval(kappa, kappa, kappa, n, g, df)
    half = t_ppf(0.5 + conf / 2, df) * math.sqrt(var) / (1 - kappa * kappa)
    z = math.atanh(kappa)
    return Interval(kappa, math.tanh(z - half), math.tanh(z + half), n, g, df)


def unweighted_kappa(
    human: np.ndarray, judge: np.ndarray, clusters: np.ndarray, conf: float = 0.95
) -> Interval | None:
    """Cohen's unweighted kappa (p_o - p_e) / (1 - p_e) with a cluster-robust delta-method t
    interval, cut to [-1, 1]; None when chance agreement is certain (both raters one grade).

    A pair's influence on p_o is 1[h = j] - p_o, on p_e = sum_k ph_k pj_k it is pj_(h) +
    ph_(j) - 2 p_e, and on kappa (infl_o (1 - p_e) - infl_e (1 - p_o)) / (1 - p_e)^2."""
    n = len(human)
    ph = np.bincount(human, minlength=GRADES) / n
    pj = np.bincount(judge, minlength=GRADES) / n
    po, pe = float((human == judge).mean()), float(ph @ pj)
    if pe >= 1:
        return None
    kappa = (po - pe) / (1 - pe)
    infl_o = (human == judge) - po
    infl_e = pj[human] + ph[judge] - 2 * pe
    influence = (infl_o * (1 - pe) - infl_e * (1 - po)) / (1 - pe) ** 2
    var, g, df = cluster_variance(influence / n, clusters)
    half = t_ppf(0.5 + conf / 2, df) * math.sqrt(max(var, 0.0))
    return Interval(kappa, max(-1.0, kappa - half), min(1.0, kappa + half), n, g, df)


def paired_agreement(
    human: Sequence[int],
    judge: Sequence[int],
    events: Sequence[Hashable] | None = None,
    conf: float = 0.95,
    min_pairs: int = MIN_PAIRS,
    min_events: int = MIN_EVENTS,
) -> Agreement:
    """Agreement of the judge with people on pairs of 0-3 grades of the same passages.

    `events` names each pair's event (or any cluster: pairs sharing one move together, so the
    intervals count events, not pairs); None treats pairs as independent. Below `min_pairs`
    pairs or `min_events` events only the confusion counts are given. Intervals: exact
    agreement and the confusion shares by `clustered_share`, kappa by `quadratic_kappa`, the
    mean difference by a cluster-robust t interval (`drift.clustered_mean`).
    """
    if len(human) != len(judge):
        raise ValueError(f"need one judge grade per human grade, got {len(judge)} for {len(human)}")
    for name, grades in (("human", human), ("judge", judge)):
        for i, g in enumerate(grades):
            if type(g) is not int or not 0 <= g < GRADES:
                raise ValueError(f"{name}[{i}] must be a grade 0-3, got {g!r}")
    n = len(human)
    clusters = _codes(events, n)
    matrix = tuple(tuple(row) for row in confusion(human, judge, GRADES))
    g = len(set(clusters.tolist()))
    empty = tuple((None,) * GRADES for _ in range(GRADES))
    if n < min_pairs or g < min_events:
        why = (
            f"{n} pairs from {g} events; intervals need at least {min_pairs} pairs "
            f"from {min_events} events"
        )
        reasons = dict.fromkeys(("exact", "kappa", "difference", "shares"), why)
        return Agreement(n, g, matrix, None, None, None, empty, reasons)
    h, j = np.array(human), np.array(judge)
    kappa = quadratic_kappa(h, j, clusters, conf)
    reasons = {} if kappa else {"kappa": "both raters gave the same single grade throughout"}
    shares = tuple(
        tuple(
            clustered_share((j[h == r] == c).astype(float), clusters[h == r], conf)
            if (h == r).any()
            else None
            for c in range(GRADES)
        )
        for r in range(GRADES)
    )
    return Agreement(
        pairs=n,
        events=g,
        confusion=matrix,
        exact=clustered_share((h == j).astype(float), clusters, conf),
        kappa=kappa,
        difference=clustered_mean((j - h).astype(float), clusters, conf),
        shares=shares,
        reasons=reasons,
        kappa_unweighted=unweighted_kappa(h, j, clusters, conf),
    )
