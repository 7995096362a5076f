"""Agreement between two raters (a judge and known grades): pure functions, no I/O, no project
imports; `ragmon calibrate` reports them.

- Cohen's kappa, unweighted or with linear or quadratic disagreement weights (Cohen, 1960;
  Cohen, 1968), with the Landis & Koch (1977) words for it.
- Kendall's tau-b between two orders, ties in either handled (Kendall, 1945), and a percentile
  bootstrap interval for the order of retrievers that resamples whole queries.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence

TAU_BOOTSTRAP = 1000  # resamples of the queries for Kendall tau's interval
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
