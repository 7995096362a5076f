"""Retrieval signals of every accepted event, judged or not, and score-based query performance
predictors (QPP): pure functions of the event as sent, no grades, no I/O.

Each signal is described once in `SIGNALS` (the `/metrics` catalog, the store's write at ingest
and the dashboards read it) and computed once, in `extract`. Their buckets are a storage
contract, like the measures' (`measure_table`): never edited later.

Scores of different retrievers are not comparable (BM25 ~10-30, cosine 0.7-0.95, SPLADE
~1e5 on TREC DL), so the score signals are only ever compared within one series, and their
buckets are a 1-2-5 grid over many decades rather than fine steps over one range.

The predictors replace the corpus score of their papers (the query's score against the whole
collection, which an app does not send) by the scores the app sent, which makes them
scale-free:

- NQC (Shtok, Kurland, Carmel, Raiber, Markovits, "Predicting query performance by query-drift
  estimation", ACM TOIS 30(2), 2012): the standard deviation of the top-K scores divided by the
  corpus score; here divided by the magnitude of the top-K scores' mean (Roitman, "Normalized
  Query Commitment Revisited", SIGIR 2019, studies such normalizers).
- WIG (Zhou and Croft, "Query performance prediction in web search environments", SIGIR
  2007): the mean of the top-K scores minus the corpus score; here minus the lowest score sent
  (rank 2K when the app sends 2K, the API's advice), divided by that score's magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["SIGNALS", "EventSignals", "Signal", "extract", "nqc", "wig"]


def _grid(lo: int, hi: int) -> tuple[float, ...]:
    """1, 2, 5 times each power of ten from 10^lo to 10^hi (rounded to 12 digits)."""
    return tuple(round(m * 10.0**e, 12) for e in range(lo, hi + 1) for m in (1, 2, 5))


RESULT_BUCKETS = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
QUERY_WORD_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0, 30.0, 50.0,
                      100.0, 200.0)  # fmt: skip
SCORE_BUCKETS = (*(-(10.0**e) for e in range(4, -3, -1)), 0.0, *_grid(-3, 5))
GAP_BUCKETS = (0.0, *_grid(-3, 5))
QPP_BUCKETS = (0.0, *_grid(-4, 1))


@dataclass(frozen=True)
class Signal:
    """One per-series histogram of a signal: `ragmon_signal_<key>` on /metrics."""

    key: str
    name: str  # display name (dashboards, docs)
    help: str  # the Prometheus HELP
    buckets: tuple[float, ...]
    sum_squares: bool = False  # also keep the sum of squares (the score-drop alert's variance)


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "results",
        "Passages sent (M)",
        "Passages sent per accepted event (M), sampled out or not: le=0 counts empty results, "
        "and _count is the events received per series.",
        RESULT_BUCKETS,
    ),
    Signal(
        "query_words",
        "Query length (words)",
        "Words (runs of non-space characters) in the query of each accepted event.",
        QUERY_WORD_BUCKETS,
    ),
    Signal(
        "top_score",
        "Top score",
        "The retriever's score of the first passage, for accepted events whose passages all "
        "carry a score (comparable within a series only).",
        SCORE_BUCKETS,
        sum_squares=True,
    ),
    Signal(
        "score_gap",
        "Top-1 minus top-K score",
        "The first passage's score minus the score at rank min(K, M), for accepted events of "
        "2 or more passages that all carry a score.",
        GAP_BUCKETS,
    ),
    Signal(
        "qpp_nqc",
        "QPP: NQC",
        "Normalized query commitment (Shtok et al. 2012): the standard deviation of the top "
        "min(K, M) scores over the magnitude of their mean; events of 2 or more scored "
        "passages.",
        QPP_BUCKETS,
    ),
    Signal(
        "qpp_wig",
        "QPP: WIG",
        "Weighted information gain (Zhou and Croft 2007) with the lowest score sent for the "
        "corpus score: (mean of the top min(K, M) scores - lowest score) / |lowest score|; "
        "events of 2 or more scored passages.",
        QPP_BUCKETS,
    ),
)
KEYS = tuple(s.key for s in SIGNALS)


class EventSignals(NamedTuple):
    """What one event adds to its series' signals: a value per `SIGNALS` key (None: not
    observed), whether it is short (M < K) and its repeated passages. (A tuple: the API builds
    one per event.)"""

    values: dict[str, float | None]
    short: bool
    repeated: int


# A signal's largest magnitude: a ratio over a mean near 0 can be astronomically large or
# infinite, and one such value would make its series' shared sums infinite (Redis then refuses
# the whole write); a value past it is not observed.
MAX_SIGNAL = 1e15


def _within(v: float) -> bool:
    return -MAX_SIGNAL <= v <= MAX_SIGNAL  # False for NaN and the infinities


def _bounded(v: float) -> float | None:
    return v if _within(v) else None


def _nqc(top: Sequence[float], mean: float) -> float | None:
    if mean == 0:
        return None
    var = math.fsum([(s - mean) * (s - mean) for s in top]) / len(top)  # `**` would raise
    return _bounded(math.sqrt(var) / abs(mean))


def _wig(mean: float, low: float) -> float | None:
    return _bounded((mean - low) / abs(low)) if low != 0 else None


def nqc(scores: Sequence[float], k: int) -> float | None:
    """σ / |μ| of the top min(k, M) scores (population σ, as Shtok et al.); None with fewer
    than 2 scores or a mean of 0."""
    top = scores[:k]
    return _nqc(top, math.fsum(top) / len(top)) if len(top) >= 2 else None


def wig(scores: Sequence[float], k: int) -> float | None:
    """(mean of the top min(k, M) scores - the lowest score sent) / |lowest|; None with fewer
    than 2 scores or a lowest score of 0."""
    top = scores[:k]
    return _wig(math.fsum(top) / len(top), min(scores)) if len(top) >= 2 else None


def extract(query: str, k: int, ids: Sequence[str], scores: Sequence[float | None]) -> EventSignals:
    """The signals of one event: its query, K, and its passages' ids and scores (best first).

    The score signals need every passage's score (a partly scored list has no rank-K score to
    trust); a score that is not a finite number within `MAX_SIGNAL` counts as absent (the API
    bounds scores tighter before this: `wire.MAX_SCORE`), and so does a ratio past it. Written
    for speed: the API runs it on every event it accepts (docs/performance.md)."""
    m = len(ids)
    values: dict[str, float | None] = dict.fromkeys(KEYS)
    values["results"] = m
    values["query_words"] = len(query.split())
    if m and None not in scores and all(map(_within, scores)):  # type: ignore[arg-type]
        sent: Sequence[float] = scores  # type: ignore[assignment]
        values["top_score"] = sent[0]
        if m >= 2:
            top = sent[:k]
            mean = math.fsum(top) / len(top)
            values["score_gap"] = sent[0] - top[-1]
            values["qpp_nqc"] = _nqc(top, mean)
            values["qpp_wig"] = _wig(mean, min(sent))
    return EventSignals(values, m < k, m - len(set(ids)))
