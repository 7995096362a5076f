"""Distribution shift (PSI), many comparisons at once (Holm), and the words for both."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from ragmon.core.drift.changes import Change
from ragmon.core.drift.distributions import chi2_sf

PSI_MODERATE = 0.1
PSI_MAJOR = 0.25
PSI_FLOOR = 1e-4  # share given to an empty bin so PSI stays finite


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


def _occupied(baseline: Sequence[float], current: Sequence[float]) -> int:
    return sum(1 for b, c in zip(baseline, current, strict=True) if b > 0 or c > 0)


def psi_noise(baseline: Sequence[float], current: Sequence[float]) -> float:
    """Expected PSI when nothing changed: (occupied bins - 1) * (1/n_b + 1/n_c)."""
    nb, nc = float(sum(baseline)), float(sum(current))
    if nb <= 0 or nc <= 0:
        return math.inf
    return max(_occupied(baseline, current) - 1, 0) * (1 / nb + 1 / nc)


def psi_pvalue(
    baseline: Sequence[float],
    current: Sequence[float],
    n_base: float | None = None,
    n_cur: float | None = None,
) -> float:
    """Chance of a PSI at least this large when nothing changed.

    With no change, PSI / (1/n_b + 1/n_c) is about chi-square with (occupied bins - 1) degrees
    of freedom (PSI is the symmetric KL divergence, which is Pearson's chi-square to second
    order). `n_base`/`n_cur` override the volumes with effective ones when events cluster.
    """
    nb = float(sum(baseline)) if n_base is None else n_base
    nc = float(sum(current)) if n_cur is None else n_cur
    df = _occupied(baseline, current) - 1
    if nb <= 0 or nc <= 0 or df < 1:
        return 1.0
    return chi2_sf(psi(baseline, current) / (1 / nb + 1 / nc), df)


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


DRAWS = 10_000  # normal draws behind `maxt`'s adjusted p-values (resolution 1e-4)
_CHUNK = 1_000


def correlation(influences: Sequence[np.ndarray | None]) -> np.ndarray:
    """The correlation of changes estimated over the same question clusters, from their
    influence values summed per cluster (`Change.influence`); a change without them, or with
    zero variance, is uncorrelated with the rest."""
    d = len(influences)
    width = max((len(u) for u in influences if u is not None), default=0)
    u = np.zeros((d, width))
    for i, x in enumerate(influences):
        if x is not None:
            u[i, : len(x)] = x
    cov = u @ u.T
    s = np.sqrt(np.diag(cov))
    ok = s > 0
    r = np.eye(d)
    r[np.ix_(ok, ok)] = cov[np.ix_(ok, ok)] / np.outer(s[ok], s[ok])
    np.fill_diagonal(r, 1.0)
    return r


def maxt(
    pvalues: Sequence[Sequence[float]],
    correlations: Sequence[np.ndarray],
    draws: int = DRAWS,
    seed: int = 0,
) -> list[list[float]]:
    """Step-down max-|Z| adjusted p-values (Westfall & Young, 1993) for blocks of two-sided
    tests: correlated within a block (`correlations`: the block's correlation matrix), blocks
    independent. Each p becomes |Z| = the normal quantile of 1 - p/2, and its adjusted p is the
    chance, under no change anywhere, that the largest |Z| among the hypotheses not yet
    rejected reaches it (seeded normal draws). It controls the family-wise error as Holm does,
    but a block of measures that move together counts as fewer tests; independent blocks
    (Šidák's inequality makes treating correlated blocks as independent conservative) give
    Holm-Šidák's step-down."""
    flat = np.array([p for block in pvalues for p in block], dtype=float)
    m = len(flat)
    if not m:
        return [[] for _ in pvalues]
    z = np.array([-NormalDist().inv_cdf(max(p, 1e-300) / 2) for p in flat])
    roots = []
    for r in correlations:
        lam, vec = np.linalg.eigh(r)
        roots.append(vec * np.sqrt(np.clip(lam, 0.0, None)))
    order = np.argsort(-z, kind="stable")
    hits = np.zeros(m)
    rng = np.random.default_rng(seed)
    done = 0
    while done < draws:
        n = min(_CHUNK, draws - done)
        sim = np.abs(np.hstack([rng.standard_normal((n, len(root))) @ root.T for root in roots]))
        tail_max = np.maximum.accumulate(sim[:, order][:, ::-1], axis=1)[:, ::-1]
        hits += (tail_max >= z[order]).sum(axis=0)
        done += n
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((hits + 1) / (draws + 1)))
    adjusted = np.maximum(adjusted, flat)
    out, at = [], 0
    for block in pvalues:
        out.append(adjusted[at : at + len(block)].tolist())
        at += len(block)
    return out


def family(blocks: Sequence[Sequence[Change]], draws: int = DRAWS) -> list[list[float]]:
    """`maxt`'s adjusted p-values of changes in blocks, each block's changes estimated over the
    same question clusters (one retriever's measures), blocks over different events."""
    return maxt(
        [[c.pvalue for c in b] for b in blocks],
        [correlation([c.influence for c in b]) for b in blocks],
        draws,
    )


def evidence(p_adjusted: float) -> str:
    """How strong the evidence against "nothing changed" is: a p-value in words.

    A p-value is how often a stable deployment would show a change at least this large; it is
    not the probability that the change is real, and these words do not say that it is.
    """
    if p_adjusted < 0.001:
        return "very strong evidence"
    if p_adjusted < 0.01:
        return "strong evidence"
    if p_adjusted < 0.05:
        return "some evidence"
    return "no evidence beyond noise"


def severity(change: Change) -> str:
    """major / moderate / minor from the effect size's 95% interval: its end nearest zero must
    reach 0.5 (major) or 0.2 (moderate) standard deviations of one event."""
    lo, hi = change.effect_interval
    nearest = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
    if nearest >= 0.5:
        return "major"
    return "moderate" if nearest >= 0.2 else "minor"
