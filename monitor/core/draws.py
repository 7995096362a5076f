"""Do people's grades look like a random draw of the judged events? Pure tests, no I/O.

A corrected (PPI) estimate is unbiased only when the graded units are a uniform random draw of
the judged ones. People who grade only the events that look bad, or only those judged before
the judge changed, break it silently: the corrected mean is then further off than the judge's
alone. Two checks catch those patterns from what is stored anyway:

- `judge_values`: the judge's own values of the graded units against those of the rest. Under
  a random draw both are samples of one distribution, so their means differ by noise only; the
  difference is tested with a cluster-robust (CR1) Welch statistic and Student's t with the
  effective number of clusters (events of one question move together).
- `identities`: which judge identity graded each event. Under a random draw the graded events'
  mix of identities is the window's; the 2 x J table (graded or not, identity) is tested with
  Pearson's chi-square.

Each answers a p-value and what it compared; the caller adjusts for its number of checks and
declares the sample not random below `ALPHA`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.core.drift import chi2_sf, cluster_variance, t_sf

# A random draw is declared not random at most this often (tests/stats/ppi_sim.py measures it).
ALPHA = 0.01


@dataclass(frozen=True)
class Draw:
    """A check's p-value and, when it compared anything, what it found."""

    p: float
    problem: str | None = None


def judge_values(
    graded: np.ndarray,
    graded_clusters: np.ndarray,
    rest: np.ndarray,
    rest_clusters: np.ndarray,
    name: str = "the judge's value",
) -> Draw:
    """Whether the graded units' judge values look drawn from the same units as the rest's."""
    n, m = len(graded), len(rest)
    if n < 2 or m < 2:
        return Draw(1.0)
    a, b = float(graded.mean()), float(rest.mean())
    psi = np.concatenate([(graded - a) / n, -(rest - b) / m])
    codes = np.concatenate([graded_clusters, rest_clusters])
    _, uniq = np.unique(codes, return_inverse=True)
    var, _, df = cluster_variance(psi, uniq.astype(np.int64))
    if var <= 0:
        if a == b:
            return Draw(1.0)
        var = 1e-12  # no spread on either side and different means: as far apart as can be
    p = 2.0 * t_sf(abs(a - b) / math.sqrt(var), df)
    return Draw(
        p,
        f"not a random draw: {name} averages {a:.3f} on the {n} graded units and {b:.3f} on "
        "the others; grade events drawn at random (the review page)",
    )


def identities(graded: Sequence[Hashable], rest: Sequence[Hashable]) -> Draw:
    """Whether the graded events' judge identities are mixed as the window's."""
    cg, cr = Counter(graded), Counter(rest)
    kinds = sorted(set(cg) | set(cr), key=str)
    if len(kinds) < 2 or not cg or not cr:
        return Draw(1.0)
    n, m = sum(cg.values()), sum(cr.values())
    stat = 0.0
    for k in kinds:
        total = cg[k] + cr[k]
        for seen, size in ((cg[k], n), (cr[k], m)):
            expected = total * size / (n + m)
            stat += (seen - expected) ** 2 / expected
    p = chi2_sf(stat, len(kinds) - 1)
    shares = ", ".join(
        f"{k}: {cg[k] / n:.0%} of graded, {(cg[k] + cr[k]) / (n + m):.0%} of judged" for k in kinds
    )
    return Draw(p, f"not a random draw: the judge changed in the window ({shares})")
