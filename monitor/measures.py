"""Per-event retrieval-quality measures: pure functions, no I/O, no project imports.

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

__all__ = [
    "BUCKETS",
    "HISTOGRAM_MEASURES",
    "MEASURE_KEYS",
    "MeasureParams",
    "compute",
]

# Every key `compute` returns, in a stable order.
MEASURE_KEYS = (
    "t",
    "ndcg",
    "f_e",
    "harm",
    "precision",
    "hit",
    "rr",
    "k_over_np",
    "f",
    "recall",
    "judged_at_k",
)

# Measures exported as Prometheus histograms (and kept per day for drift reports).
HISTOGRAM_MEASURES = ("t", "ndcg", "f_e", "harm", "precision", "hit", "rr", "k_over_np")

_UNIT = tuple(round(i / 20, 2) for i in range(21))  # 0, 0.05, ..., 1.0
# Fixed upper bounds ("le") per histogram measure. They are a storage contract: changing them
# breaks stored per-day distributions, so add a new measure rather than edit one.
BUCKETS: dict[str, tuple[float, ...]] = {
    "t": (
        -1.0,
        -0.5,
        -0.25,
        0.0,
        0.25,
        0.5,
        0.75,
        1.0,
        1.5,
        2.0,
        3.0,
        4.0,
        5.0,
        7.5,
        10.0,
        15.0,
        20.0,
        30.0,
        50.0,
    ),
    "ndcg": _UNIT,
    "f_e": _UNIT,
    "harm": _UNIT,
    "precision": _UNIT,
    "hit": (0.0, 1.0),
    "rr": (0.0, 0.1, 0.125, 0.143, 0.167, 0.2, 0.25, 0.334, 0.5, 1.0),
    "k_over_np": (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0),
}

MAX_PASSAGES = 200
# Discount of rank i + 1 (DCG's 1 / log2(rank + 1)), precomputed for every possible rank.
_DISCOUNT = tuple(1.0 / math.log2(i + 2) for i in range(MAX_PASSAGES))
_GAINS = {"exponential": (0.0, 1.0, 3.0, 7.0), "linear": (0.0, 1.0, 2.0, 3.0)}
_VALID_GRADES = frozenset({0, 1, 2, 3, None})
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

    def __post_init__(self) -> None:
        if type(self.relevant_grade) is not int or self.relevant_grade not in (1, 2, 3):
            raise ValueError(f"relevant_grade must be 1, 2 or 3, got {self.relevant_grade!r}")
        for name in ("t_alpha", "f_alpha"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0.0 <= value <= 1.0
            ):
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        if self.ndcg_gain not in _GAINS:
            raise ValueError(f"ndcg_gain must be exponential or linear, got {self.ndcg_gain!r}")
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


def _validate(grades: Sequence[int | None], k: int, relevant_total: int | None) -> None:
    m = len(grades)
    if type(k) is not int or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if m < k:
        raise ValueError(f"need at least k={k} grades, got {m}")
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
) -> dict[str, float | None]:
    """All measures of one ranked list of grades (best first) cut at K.

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
    dcg = 0.0
    for i in range(k):
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
    ideal = [gain[3]] * grades.count(3) + [gain[2]] * grades.count(2)
    ideal += [gain[1]] * grades.count(1)
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
        "judged_at_k": judged / k,
    }
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
