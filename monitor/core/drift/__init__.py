"""Drift statistics for the weekly report: pure functions, no I/O, no project imports.

Production traffic breaks the textbook assumptions, and each piece here is chosen for that:

- Events are not independent: a trending question repeats all day with the same ranking and the
  same grades, often in other words. Every standard error is cluster-robust by question (the CR1
  sandwich over clusters of events with the same normalized query or strongly overlapping top-K
  passages, `retrieval_clusters`; a question seen in both windows is one cluster), and the
  reference distribution is Student's t with the effective number of clusters as degrees of
  freedom, so a few big clusters widen the interval instead of raising an alarm. In a change
  no question weighs more than `CAP` average questions of its window (`capped`): a topic
  trending this week is part of the mix, not a comparison of one degree of freedom.
- The mix of queries moves: `segment_change` splits the change of a mean into the change
  within segments at the baseline's segment mix (the retriever itself) and the part the mix
  explains (direct standardisation, as for age-adjusted rates).
- Small and degenerate samples: t instead of normal; a zero variance gives the exact
  permutation bound, never p = 0; the caller gates on a minimum of events and queries, and
  below it (a small series over several weeks) `permutation_pvalue` re-assigns whole question
  blocks between the windows, exact at any size.
- PSI reads noise as shift at small volumes: `psi_pvalue` is the chance of a PSI this large
  with no change (PSI times the harmonic volume is about chi-square; Siddiqi, *Credit Risk
  Scorecards*, 2006, for the conventional 0.1 / 0.25 readings).
- Many comparisons at once: Holm's step-down adjustment; `evidence` words a p-value as the
  strength of evidence, never as the probability that a change is real.
"""

from __future__ import annotations

from ragmon.core.drift.changes import (
    CAP,
    MIN_CELL,
    Cell,
    Change,
    Interval,
    Sample,
    bin_midpoints,
    binned_change,
    binned_moments,
    capped,
    cluster_variance,
    clustered_mean,
    segment_change,
)
from ragmon.core.drift.clusters import OVERLAP, retrieval_clusters
from ragmon.core.drift.distributions import chi2_sf, t_ppf, t_sf
from ragmon.core.drift.permutation import MORE_REPS, changepoint_pvalue, permutation_pvalue
from ragmon.core.drift.shift import (
    PSI_MAJOR,
    PSI_MODERATE,
    evidence,
    holm,
    psi,
    psi_level,
    psi_noise,
    psi_pvalue,
    severity,
)

__all__ = [
    "CAP",
    "MIN_CELL",
    "MORE_REPS",
    "OVERLAP",
    "PSI_MAJOR",
    "PSI_MODERATE",
    "Cell",
    "Change",
    "Interval",
    "Sample",
    "bin_midpoints",
    "changepoint_pvalue",
    "binned_change",
    "binned_moments",
    "capped",
    "chi2_sf",
    "cluster_variance",
    "clustered_mean",
    "evidence",
    "holm",
    "permutation_pvalue",
    "psi",
    "psi_level",
    "psi_noise",
    "psi_pvalue",
    "retrieval_clusters",
    "segment_change",
    "severity",
    "t_ppf",
    "t_sf",
]
