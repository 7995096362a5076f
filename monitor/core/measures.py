"""Per-event retrieval-quality measures: pure functions, no I/O; described in `measure_table`.

Grades use the TREC DL / UMBRELA 0-3 scale. A passage is relevant when its grade is at
least `MeasureParams.relevant_grade`. Definitions and sources (docs/measures.md has them with
the worked example):

- T = (1 - a) n_p - a n_n / K: Schwartz et al., eq. 3 (only n_n is divided by K).
- nDCG@K, gain 2^g - 1 or g: Järvelin & Kekäläinen (2002); the ideal ranking is the judged
  pool of the M passages sent (trec_eval's `ndcg_cut` when its qrels are that pool).
- F_e = n_p / (a K + (1 - a) N̂_p), N̂_p = relevant among the top 2K: Schwartz et al.'s F
  with N_p estimated; F and R@K use a known N_p (`relevant_total`).
- Harm@K: share of the top K whose grade is a harm grade: Dallaire (Harm@K); distractors
  (grade 1) per Trappolini et al.
- P@K, Hit@K, RR@K: the usual set and rank measures, cut at K.
- UDCG: Trappolini, Cuconasu et al., "Redefining Retrieval Evaluation in the Era of LLMs"
  (arXiv 2510.21440), eq. 2 and the training-free eq. 4 with gamma = 1/3; needs each top-K
  passage's p(NO-RESPONSE) from the utility probe (`udcg`).
- RA-nWG@K, N-Recall4+@K, Precision4+@K, N-Recall5@K: Dallaire, "Practical RAG Evaluation: A
  Rarity-Aware Set-Based Metric" (arXiv 2511.09545), section 2.4, on the 1-5 utility scale.
- nDCG@K, RA-nWG@K and N-Recall4+@K (pooled): the same numerators against the pooled ideal,
  the grades of every passage judged for the query across retrievers and time (TREC's
  pooling), which the caller passes as `pool`; with no pool they equal the per-event ones.

Unjudged passages (grade `None`, e.g. the judge failed on one passage or the budget ran out)
follow trec_eval's convention: they count as non-relevant (in n_n, gain 0) and never as
relevant; they are not distractors for Harm@K (nobody knows they are on topic) and are left
out of the ideal ranking. `judged_at_k` in the result says how much of the top K was judged,
so a consumer can discount an event whose grades are mostly missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragmon.core.measure_table import MEASURES
from ragmon.core.utility_measures import (
    UDCG_GAMMA,
    checked_utility,
    n_recall5_counts,
    set_utility,
    udcg,
    utility_counts,
)

__all__ = [
    "BUCKETS",
    "HISTOGRAM_MEASURES",
    "MEASURE_KEYS",
    "MeasureParams",
    "compute",
    "histogram_bounds",
]

# Every key `compute` returns, in a stable order; names, ranges and buckets: `measure_table`.
MEASURE_KEYS = tuple(m.key for m in MEASURES)
# Measures exported as Prometheus histograms (and kept per day for drift reports).
HISTOGRAM_MEASURES = tuple(m.key for m in MEASURES if m.histogram)
# Fixed upper bounds ("le") per histogram measure: a storage contract (see `Measure`).
BUCKETS: dict[str, tuple[float, ...]] = {m.key: m.buckets for m in MEASURES if m.histogram}

MAX_PASSAGES = 200
# Discount of rank i + 1 (DCG's 1 / log2(rank + 1)), precomputed for every possible rank.
_DISCOUNT = tuple(1.0 / math.log2(i + 2) for i in range(MAX_PASSAGES))
_GAINS = {"exponential": (0.0, 1.0, 3.0, 7.0), "linear": (0.0, 1.0, 2.0, 3.0)}
_VALID_GRADES: frozenset[int | None] = frozenset({0, 1, 2, 3, None})
_VALID_TYPES = frozenset({int, type(None)})


def _is_grade(value: object) -> bool:
    return value is None or (type(value) is int and 0 <= value <= 3)


@dataclass(frozen=True)
class MeasureParams:
    """Parameters of the measures (RAGMON_RELEVANT_GRADE, _T_ALPHA, _F_ALPHA, ...)."""

    relevant_grade: int = 2
    t_alpha: float = 0.5
    f_alpha: float = 0.5
    ndcg_gain: str = "exponential"
    harm_grades: frozenset[int] = field(default_factory=lambda: frozenset({1}))
    udcg_gamma: float = UDCG_GAMMA
    ra_alpha: float = 1.0

    def __post_init__(self) -> None:
        if type(self.relevant_grade) is not int or self.relevant_grade not in (1, 2, 3):
            raise ValueError(f"relevant_grade must be 1, 2 or 3, got {self.relevant_grade!r}")
        for name in ("t_alpha", "f_alpha", "udcg_gamma", "ra_alpha"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0.0 <= value <= 1.0
            ):
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        if self.ndcg_gain not in _GAINS:
            raise ValueError(f"ndcg_gain must be exponential or linear, got {self.ndcg_gain!r}")
        harm: frozenset[object]
        try:
            harm = frozenset(self.harm_grades)
        except TypeError:
            harm = frozenset({None})  # not iterable: rejected just below
        if not harm or not all(type(g) is int and 0 <= g <= 3 for g in harm):
            raise ValueError(
                f"harm_grades must be a non-empty set of grades 0-3, got {self.harm_grades!r}"
            )
        object.__setattr__(self, "harm_grades", harm)


DEFAULT_PARAMS = MeasureParams()


def histogram_bounds(params: MeasureParams = DEFAULT_PARAMS) -> dict[str, tuple[float, ...]]:
    """Each histogram measure's bucket bounds for these parameters.

    T >= -a, so T's three lowest bounds are -a, -a/2 and -a/4: every event with no relevant
    passage (T = -a exactly) falls in the lowest bucket, and no quantile Prometheus
    interpolates can read below -a (with fixed bounds -1 and -0.5, a p10 read -0.833 at
    a = 0.5). The number of buckets never changes, so stored counts keep their places.
    With a = 0, T >= 0 and the default layout is kept.
    """
    out = dict(BUCKETS)
    a = params.t_alpha
    if a > 0:
        out["t"] = (-a, -a / 2, -a / 4, *BUCKETS["t"][3:])
    return out


def _validate(grades: Sequence[int | None], k: int, relevant_total: int | None) -> None:
    m = len(grades)
    if type(k) is not int or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if m > MAX_PASSAGES:
        raise ValueError(f"at most {MAX_PASSAGES} grades, got {m}")
    if relevant_total is not None and (type(relevant_total) is not int or relevant_total < 0):
        raise ValueError(f"relevant_total must be an integer >= 0 or None, got {relevant_total!r}")
    # Fast path in C; the slow loop only runs to name the first bad grade.
    try:
        valid = _VALID_GRADES.issuperset(grades) and _VALID_TYPES.issuperset(map(type, grades))
    except TypeError:  # an unhashable grade
        valid = False
    if not valid:
        for i, g in enumerate(grades):
            if not _is_grade(g):
                raise ValueError(f"grades[{i}] must be 0, 1, 2, 3 or None, got {g!r}")


def compute(
    grades: Sequence[int | None],
    k: int,
    params: MeasureParams = DEFAULT_PARAMS,
    relevant_total: int | None = None,
    p_no_response: Sequence[float | None] | None = None,
    utility: Sequence[int | None] | None = None,
    repeats: Sequence[bool] | None = None,
    pool: Sequence[int | None] | None = None,
    pool_utility: Sequence[int | None] | None = None,
) -> dict[str, float | None]:
    """All measures of one ranked list of grades (best first) cut at K.

    Fewer than K grades (M < K) leave empty slots: gain 0, not relevant, not harmful, still
    counted in n_n and in the K of P@K; M = 0 is the worst outcome (T = -a, everything else 0,
    F_e, K/N̂_p, judged@K and UDCG null). A repeated passage is passed as None (unjudged) at
    its later rank, and `repeats` (one flag per passage) marks it, so that judged@K is the
    share of the top K's distinct passages that have a grade and UDCG counts it as a slot the
    LLM learns nothing from (utility 0).

    `p_no_response` (one per passage, None where not probed) gives UDCG; without it, or with
    any top-K passage unprobed, UDCG is None. An unjudged top-K passage counts as not relevant
    there too, so UDCG is then a lower bound. `utility` is the list on the 1-5 scale for
    RA-nWG, N-Recall4+ and Precision4+; by default the grades mapped by `utility_grades`.

    `pool` holds the 0-3 grade of every passage graded for this query so far, each distinct
    passage once with its best grade (None is skipped), this event's own included; it is the
    ideal of `ndcg_pooled` and the pool of `ra_nwg_pooled` and `n_recall4_pooled`
    (`pool_utility`: the same passages on the 1-5 scale, by default mapped). Each grade's count
    in it is taken as at least this event's own, so a pool that misses some of the event's
    passages never gives a pooled value above 1. Without a pool the pooled measures equal the
    per-event ones.

    Returns a dict with every key of `MEASURE_KEYS`; a measure that is undefined for this
    event is `None` (F_e and K/N̂_p need 2K passages; F and recall need `relevant_total`,
    and recall is undefined when it is 0). A `relevant_total` below the number of relevant
    passages among the grades contradicts them; the larger of the two is used as N_p.

    Cost: one O(K) loop plus O(M) counting passes in C; no sort (grades take four values,
    so the ideal ranking is built from their counts).
    """
    if not isinstance(grades, list | tuple):
        grades = list(grades)
    _validate(grades, k, relevant_total)

    rel = params.relevant_grade
    gain = _GAINS[params.ndcg_gain]
    harm_grades = params.harm_grades

    n_p = n_harm = judged = first_rel = 0
    n_repeats = sum(repeats[:k]) if repeats is not None else 0
    dcg = 0.0
    shown = min(k, len(grades))  # passages in the top K; the rest are empty slots
    for i in range(shown):
        g = grades[i]
        if g is None:
            continue
        judged += 1
        if g:
            dcg += gain[g] * _DISCOUNT[i]
            if g >= rel:
                n_p += 1
                if not first_rel:
                    first_rel = i + 1
        if g in harm_grades:
            n_harm += 1

    # Ideal ranking: the judged pool sorted by grade, built from counts (zeros add nothing).
    counts = [grades.count(0), grades.count(1), grades.count(2), grades.count(3)]
    ideal = [gain[3]] * counts[3] + [gain[2]] * counts[2] + [gain[1]] * counts[1]
    idcg = 0.0
    for i, x in enumerate(ideal[:k]):
        idcg += x * _DISCOUNT[i]

    a_t = params.t_alpha
    a_f = params.f_alpha
    out: dict[str, float | None] = {
        "t": (1.0 - a_t) * n_p - a_t * (k - n_p) / k,
        "ndcg": dcg / idcg if idcg > 0 else 0.0,
        "f_e": None,
        "harm": n_harm / k,
        "precision": n_p / k,
        "hit": 1.0 if n_p else 0.0,
        "rr": 1.0 / first_rel if first_rel else 0.0,
        "k_over_np": None,
        "f": None,
        "recall": None,
        "judged_at_k": judged / (shown - n_repeats) if shown > n_repeats else None,
        "udcg": None,
        "ra_nwg": None,
        "n_recall4": None,
        "precision4": None,
        "n_recall5": None,
        "ndcg_pooled": None,
        "ra_nwg_pooled": None,
        "n_recall4_pooled": None,
    }
    if p_no_response is not None:
        if len(p_no_response) != len(grades):
            raise ValueError(
                f"need one p(NO-RESPONSE) (or None) per passage, got {len(p_no_response)} "
                f"for {len(grades)}"
            )
        top_p = p_no_response[:shown]  # the context: the top K, or all if fewer were sent
        if shown and all(p is not None for p in top_p):
            top_rel: list[bool | None] = [g is not None and g >= rel for g in grades[:shown]]
            if repeats is not None:
                top_rel = [None if r else x for x, r in zip(top_rel, repeats, strict=False)]
            out["udcg"] = udcg(top_rel, top_p, params.udcg_gamma)  # type: ignore[arg-type]
    if utility is None:  # the 0-3 counts, moved to the 1-5 grades they map to (0 1 2 3 -> 1 2 4 5)
        head = grades[:k]
        counts5 = [0, counts[0], counts[1], 0, counts[2], counts[3]]
        top = [0, head.count(0), head.count(1), 0, head.count(2), head.count(3)]
    else:
        counts5, top = utility_counts(checked_utility(utility, len(grades)), k)
    out["ra_nwg"], out["n_recall4"], out["precision4"] = set_utility(
        counts5, top, k, params.ra_alpha
    )
    out["n_recall5"] = n_recall5_counts(counts5, top, k)
    # The event's passages weigh nothing but the query has some that do (the app counts its
    # relevant passages, or the pooled ideal holds them): G_obs = 0 over a positive G_ideal.
    if out["ra_nwg"] is None and relevant_total:
        out["ra_nwg"] = 0.0
    out["ndcg_pooled"], out["ra_nwg_pooled"], out["n_recall4_pooled"] = (
        (out["ndcg"], out["ra_nwg"], out["n_recall4"])
        if pool is None
        else _pooled(dcg, counts, counts5, top, pool, pool_utility, k, params)
    )
    if out["ra_nwg"] is None and out["ra_nwg_pooled"] is not None:
        out["ra_nwg"] = 0.0
    if len(grades) >= 2 * k:
        below = grades[k : 2 * k]  # ranks K+1..2K; the top K's share is n_p
        np_hat = n_p
        for g in range(rel, 4):
            np_hat += below.count(g)
        denom = a_f * k + (1.0 - a_f) * np_hat
        out["f_e"] = n_p / denom if denom > 0 else 0.0
        if np_hat:
            out["k_over_np"] = k / np_hat
    if relevant_total is not None:
        n_rel = max(relevant_total, sum([grades.count(g) for g in range(rel, 4)]))
        denom = a_f * k + (1.0 - a_f) * n_rel
        out["f"] = n_p / denom if denom > 0 else 0.0
        out["recall"] = n_p / n_rel if n_rel else None
    return out


def _pooled(
    dcg: float,
    own: Sequence[int],
    own5: Sequence[int],
    top5: Sequence[int],
    pool: Sequence[int | None],
    pool_utility: Sequence[int | None] | None,
    k: int,
    params: MeasureParams,
) -> tuple[float, float | None, float | None]:
    """nDCG@K, RA-nWG@K and N-Recall4+@K against the query's pool (see `compute`): the event's
    own DCG and top-K weights over the pool's ideal, each grade counted at least as often as
    in the event's own passages (`own`: 0-3 counts, `own5`: 1-5 counts)."""
    pool = list(pool)
    if not all(_is_grade(g) for g in pool):
        raise ValueError("pool grades must be 0, 1, 2, 3 or None")
    counts = [max(pool.count(g), own[g]) for g in range(4)]
    gain = _GAINS[params.ndcg_gain]
    idcg, slot = 0.0, 0
    for g in (3, 2, 1):
        for _ in range(min(counts[g], k - slot)):
            idcg += gain[g] * _DISCOUNT[slot]
            slot += 1
    if pool_utility is None:
        five = [0, counts[0], counts[1], 0, counts[2], counts[3]]
    else:
        five = utility_counts(checked_utility(pool_utility, len(pool_utility)), 0)[0]
    five = [max(five[g], own5[g]) for g in range(6)]
    ra, recall4, _ = set_utility(five, top5, k, params.ra_alpha)
    return (dcg / idcg if idcg > 0 else 0.0), ra, recall4
