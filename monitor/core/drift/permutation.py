"""A permutation test of a change of means for the few events a small series has.

The report's t reference leans on many query clusters; a series with 2-12 events a week has too
few even over four weeks. Under "nothing changed" the (question, window) blocks of events are
exchangeable between the windows, so the share of re-assignments of whole blocks to the two
windows that move the mean at least as much as observed is an exact p-value at any size
(Fisher's randomization test; Good, *Permutation, Parametric and Bootstrap Tests of
Hypotheses*, 2005, ch. 3). Whole blocks move together: a question asked three times in one
window is one unit, as in the cluster-robust interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

REPS = 4999  # random re-assignments when there are more than this many; p >= 1 / (REPS + 1)
# The change-point scan draws this many more when its first REPS leave p below REFINE_BELOW:
# a small p is then resolved finely enough for Holm over a report's many comparisons.
MORE_REPS = 15_000
REFINE_BELOW = 0.002
_TIE = 1e-12  # a permuted change this close to the observed one counts as as large


def _blocks(
    values: np.ndarray, clusters: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Events (or their weights) and the (weighted) sum of values per cluster present."""
    present, inverse = np.unique(clusters, return_inverse=True)
    w = np.ones(len(values)) if weights is None else weights
    counts = np.bincount(inverse, weights=w, minlength=len(present))
    sums = np.bincount(inverse, weights=w * values, minlength=len(present))
    return counts, sums


@lru_cache(maxsize=32)
def _arrangements(m: int, k: int, reps: int, seed: int) -> tuple[np.ndarray, bool]:
    """The blocks put in the first window, one row per arrangement (every one, or `reps` drawn
    with `seed`), and whether that is every one. Cached: the measures of one retriever share
    their blocks."""
    if math.comb(m, k) <= reps:
        return np.array(list(itertools.combinations(range(m), k)), dtype=int), True
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((reps, m)), axis=1)[:, :k], False


def permutation_pvalue(
    base_values: np.ndarray,
    base_clusters: np.ndarray,
    cur_values: np.ndarray,
    cur_clusters: np.ndarray,
    reps: int = REPS,
    seed: int = 0,
    base_weights: np.ndarray | None = None,
    cur_weights: np.ndarray | None = None,
) -> float:
    """Two-sided p-value of mean(cur) - mean(base) by re-assigning (cluster, window) blocks.

    Every re-assignment that keeps each window's number of blocks is enumerated when there are
    at most `reps` of them; otherwise `reps` random ones are drawn (seeded: the same data give
    the same p) and p = (1 + as large) / (1 + reps), which is exact in the same sense.
    With weights (1 / inclusion probabilities) the means are Hajek's; exchangeability then
    holds only approximately (a block carries its weights with it), which is why the planned
    sampling judges a small series whole.
    """
    cb, sb = _blocks(base_values, base_clusters, base_weights)
    cc, sc = _blocks(cur_values, cur_clusters, cur_weights)
    if not len(cb) or not len(cc):
        return 1.0
    counts = np.concatenate([cb, cc])
    sums = np.concatenate([sb, sc])
    n_all, s_all = float(counts.sum()), float(sums.sum())
    k, m = len(cb), len(counts)
    observed = abs(sc.sum() / cc.sum() - sb.sum() / cb.sum())
    base_sets, exact = _arrangements(m, k, reps, seed)
    nb = counts[base_sets].sum(axis=1)
    s_b = sums[base_sets].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.abs((s_all - s_b) / (n_all - nb) - s_b / nb)
    as_large = int(np.count_nonzero(diff >= observed - _TIE))
    if exact:
        return as_large / len(base_sets)
    return (1 + as_large) / (1 + reps)


def changepoint_pvalue(
    values: np.ndarray,
    clusters: np.ndarray,
    weeks: np.ndarray,
    segments: Sequence[tuple[int, int]],
    reps: int = REPS,
    seed: int = 0,
    weights: np.ndarray | None = None,
    more: int = MORE_REPS,
) -> tuple[tuple[int, int], float]:
    """The segment of weeks whose mean differs most from the other weeks', and the p-value of
    the scan for a lasting change.

    `weeks`: each event's week (0 the oldest); a segment (start, end) holds the weeks from
    `start` up to `end` (exclusive): one reaching past the last week is a change that lasts
    (the rest: the weeks before it), one ending earlier a change that ended (the rest: the
    weeks on both sides, an epidemic alternative; Levin and Kline, 1985). A segment's statistic
    is the plain change of means in standard errors of independent events (|mean in - mean
    out| * sqrt(n_in n_out / n)). The p-value is that of the largest over the lasting
    segments: under "nothing changed over these weeks" the (question, week) blocks are
    exchangeable between the weeks, so re-assigning them (each week keeping its number of
    blocks) and taking the scan's largest each time gives a p-value that holds for the scan as
    a whole, whichever segment is picked (Good 2005, ch. 3); `more` draws refine a p below
    `REFINE_BELOW`. The segment returned is the largest over all of them: a drop is compared
    with the weeks before it while it lasts, and once it has ended the weeks since are compared
    with the drop's, so it shows until it recovers, not after.
    """
    w = np.ones(len(values)) if weights is None else weights
    weeks = np.asarray(weeks, dtype=np.int64)
    _, codes = np.unique(clusters, return_inverse=True)
    key = weeks * (int(codes.max(initial=0)) + 1) + codes
    present, inverse = np.unique(key, return_inverse=True)  # sorted: blocks in week order
    block_week = present // (int(codes.max(initial=0)) + 1)
    counts = np.bincount(inverse, weights=w, minlength=len(present))
    sums = np.bincount(inverse, weights=w * values, minlength=len(present))
    pairs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    lo = np.searchsorted(block_week, pairs[:, 0])
    hi = np.searchsorted(block_week, pairs[:, 1])
    m = len(present)
    ok = (hi > lo) & (hi - lo < m)  # blocks inside and outside the segment
    if not ok.any():
        first = tuple(int(x) for x in pairs[0]) if len(pairs) else (0, 0)
        return (first[0], first[1]), 1.0
    lo, hi, kept = lo[ok], hi[ok], pairs[ok]

    n, total = float(counts.sum()), float(sums.sum())

    def scan(c: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        zero = np.zeros((*c.shape[:-1], 1))
        cn = np.concatenate([zero, np.cumsum(c, axis=-1)], axis=-1)
        cs = np.concatenate([zero, np.cumsum(s, axis=-1)], axis=-1)
        n_in, s_in = cn[..., hi] - cn[..., lo], cs[..., hi] - cs[..., lo]
        with np.errstate(divide="ignore", invalid="ignore"):
            move = np.abs(s_in / n_in - (total - s_in) / (n - n_in))
            move *= np.sqrt(n_in * (n - n_in) / n)
        return np.nan_to_num(move, nan=0.0)

    observed = scan(counts, sums, lo, hi)
    best = int(np.argmax(observed))
    lasting = hi == m
    if not lasting.any():  # only ended changes to scan: their largest is tested
        lasting[:] = True
    top = float(observed[lasting].max())
    drawn = as_large = 0
    for draws, salt in ((reps, 0), (more, 1)):
        order = _shuffles(m, draws, seed, salt)
        largest = scan(counts[order], sums[order], lo[lasting], hi[lasting]).max(axis=1)
        as_large += int(np.count_nonzero(largest >= top - _TIE))
        drawn += draws
        if (1 + as_large) / (1 + drawn) >= REFINE_BELOW:
            break
    start, stop = (int(x) for x in kept[best])
    return (start, stop), (1 + as_large) / (1 + drawn)


@lru_cache(maxsize=16)
def _shuffles(m: int, reps: int, seed: int, salt: int) -> np.ndarray:
    """`reps` seeded random orders of `m` blocks, one per row (cached: a series' measures share
    them)."""
    rng = np.random.default_rng([seed, salt])
    return np.argsort(rng.random((reps, m)), axis=1)
