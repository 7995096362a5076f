"""Distribution shift (PSI), many comparisons at once (Holm), and the words for both."""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def holm(pvalues: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given); controls family-wise error.

    With `weights` (positive), the weighted Holm procedure: a hypothesis of weight w is first
    tested at level alpha * w / (sum of the weights), and each rejection passes its share on
    to the rest, so the family-wise error stays at alpha however the weights are set.
    """
    m = len(pvalues)
    w = [1.0] * m if weights is None else [float(x) for x in weights]
    order = sorted(range(m), key=lambda i: pvalues[i] / w[i])
    out = [1.0] * m
    left = sum(w)
    running = 0.0
    for i in order:
        running = max(running, min(1.0, pvalues[i] / w[i] * left))
        out[i] = running
        left -= w[i]
    return out


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
