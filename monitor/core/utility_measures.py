"""The LLM-era measures on the 1-5 utility scale: pure functions, no I/O (`measures.compute`
calls them for every event; described in `measure_table`).

- UDCG: Trappolini, Cuconasu et al., "Redefining Retrieval Evaluation in the Era of LLMs"
  (arXiv 2510.21440), eq. 2 and the training-free eq. 4 with gamma = 1/3; needs each top-K
  passage's p(NO-RESPONSE) from the utility probe (`udcg`).
- RA-nWG@K, N-Recall4+@K, Precision4+@K, N-Recall5@K: Dallaire, "Practical RAG Evaluation: A
  Rarity-Aware Set-Based Metric" (arXiv 2511.09545), section 2.4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

UDCG_GAMMA = 1.0 / 3.0  # Trappolini et al.'s weight of the distracting effect (eq. 4)


# The 0-3 UMBRELA grade as a 1-5 utility grade (index = 0-3 grade): 0 irrelevant -> 1 not
# relevant, 1 related -> 2 weak/tangential, 2 highly relevant -> 4, 3 perfectly relevant -> 5.
# Caveat: the map never gives 3 (partially relevant), so w3 is unused, and the 4/5 split is the
# assessor's 2/3 split, not a direct 1-5 judgment (RAGMON_JUDGE_SCALE=utility5 asks for one).
UMBRELA_TO_UTILITY = (1, 2, 4, 5)
# The way back, for a judge grading 1-5 (index = 1-5 grade): 3 "partially relevant, not enough
# to answer" and 2 "weak" are both "related, does not answer" (1); the map round-trips 0-3.
UTILITY_TO_UMBRELA = (None, 0, 1, 1, 2, 3)

# Dallaire section 2.4: base utilities, caps of the relative weights, and the fixed weights
# used when the pool holds no grade-5 passage.
_RA_BASE = (0.0, 0.0, 0.0, 0.1, 0.5, 1.0)  # index = grade 0 (unused), 1..5
_RA_CAP3, _RA_CAP4 = 0.25, 1.0
_RA_FALLBACK = (0.0, 0.0, 0.0, 0.2, 1.0, 1.0)


def checked_utility(utility: Sequence[int | None], m: int) -> list[int | None]:
    out = list(utility)
    if len(out) != m:
        raise ValueError(f"need one utility grade per passage, got {len(out)} for {m}")
    for i, g in enumerate(out):
        if g is not None and (type(g) is not int or not 1 <= g <= 5):
            raise ValueError(f"utility[{i}] must be 1-5 or None, got {g!r}")
    return out


def utility_grades(grades: Sequence[int | None]) -> list[int | None]:
    """0-3 grades mapped to the 1-5 utility scale with `UMBRELA_TO_UTILITY` (None stays)."""
    return [None if g is None else UMBRELA_TO_UTILITY[g] for g in grades]


def udcg(
    relevant: Sequence[bool | None],
    p_no_response: Sequence[float],
    gamma: float = UDCG_GAMMA,
) -> float:
    """UDCG of the passages in the LLM's context (Trappolini, Cuconasu et al., arXiv
    2510.21440, eq. 4): the top K, or all M when the retriever sent fewer (M < K).

    Passage utility u = R (1 - p) with R = +1 (relevant) or -1 (not), p = p(NO-RESPONSE | q, p)
    (eq. 2); UDCG = sigmoid((1/k) [sum of u over relevant + gamma * sum of u over the rest]),
    k the passages in the context, as in the paper: a short ranking is not averaged over
    slots the app never filled. No position discount: an LLM reads the whole context. In
    [sigmoid(-gamma), sigmoid(1)]. `relevant` None marks a repeated passage: it fills a slot
    the LLM learns nothing new from (utility 0), neither help nor distraction.
    """
    m = len(relevant)
    if m == 0 or len(p_no_response) != m:
        raise ValueError(f"need one p(NO-RESPONSE) per passage, got {len(p_no_response)} for {m}")
    pos = neg = 0.0
    for r, p in zip(relevant, p_no_response, strict=True):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p(NO-RESPONSE) must be in [0, 1], got {p!r}")
        if r:
            pos += 1.0 - p
        elif r is not None:
            neg += 1.0 - p
    x = (pos - gamma * neg) / m
    return 1.0 / (1.0 + math.exp(-x))


def rarity_weights(pool: Sequence[int], alpha: float = 1.0) -> tuple[float, ...]:
    """Weights w_0..w_5 of the 1-5 grades for one query's pool (Dallaire, arXiv 2511.09545, 2.4).

    Rarity r_g = b_g / p_g^alpha with p_g the share of grade g in the pool (r_g = 0 when absent);
    w5 = 1, w4 = min(r4/r5, 1), w3 = min(r3/r5, 0.25), w2 = w1 = 0: a scarce grade 5 dominates,
    and caps keep abundant mid grades from standing in for it. No grade 5: the fixed fallback
    w5 = w4 = 1, w3 = 0.2.
    """
    return _weights([pool.count(g) for g in range(6)], alpha)


def _weights(counts: Sequence[int], alpha: float) -> tuple[float, ...]:
    n5 = counts[5]
    if not n5:
        return _RA_FALLBACK
    n = sum(counts)
    r5 = 1.0 / (n5 / n) ** alpha  # b5 = 1
    w4 = min(_RA_BASE[4] / (counts[4] / n) ** alpha / r5, _RA_CAP4) if counts[4] else 0.0
    w3 = min(_RA_BASE[3] / (counts[3] / n) ** alpha / r5, _RA_CAP3) if counts[3] else 0.0
    return (0.0, 0.0, 0.0, w3, w4, 1.0)


def set_utility(
    pool: Sequence[int], top: Sequence[int], k: int, alpha: float
) -> tuple[float | None, float | None, float]:
    """RA-nWG@K, N-Recall4+@K, Precision4+@K from the count of each 1-5 grade (index 1..5) in
    the pool and in the top K: grades take five values, so no sort is needed."""
    w = _weights(pool, alpha)
    # The K heaviest passages of the pool: all grade 5 first (w5 = 1 is the largest), then the
    # heavier of grades 4 and 3; grades 1-2 weigh nothing.
    first, second = (4, 3) if w[4] >= w[3] else (3, 4)
    slots = k
    ideal = 0.0
    for g in (5, first, second):
        take = pool[g] if pool[g] < slots else slots
        ideal += take * w[g]
        slots -= take
    good_top, good_pool = top[4] + top[5], pool[4] + pool[5]
    return (
        (top[5] + top[4] * w[4] + top[3] * w[3]) / ideal if ideal > 0 else None,
        good_top / min(k, good_pool) if good_pool else None,
        good_top / k,
    )


def n_recall5_counts(pool: Sequence[int], top: Sequence[int], k: int) -> float | None:
    return top[5] / min(k, pool[5]) if pool[5] else None


def n_recall5(utility: Sequence[int | None], k: int) -> float | None:
    """N-Recall5@K: grade-5 passages in the top K over min(K, grade-5 in the pool)
    (Dallaire 2.4); None (NA) when the pool holds none."""
    return n_recall5_counts(*utility_counts(utility, k), k)


def utility_counts(utility: Sequence[int | None], k: int) -> tuple[list[int], list[int]]:
    top = utility[:k]
    return [utility.count(g) for g in range(6)], [top.count(g) for g in range(6)]


def ra_nwg(utility: Sequence[int | None], k: int, alpha: float = 1.0) -> float | None:
    """RA-nWG@K: rarity-weighted gain of the top K over the best K of the pool (Dallaire 2.4).

    `utility` is the ranked list on the 1-5 scale; the pool is its graded passages (None is
    unjudged: out of the pool, gain 0 in the top K). Order-free inside the top K. None (NA)
    when the pool's best K weigh nothing (only grades 1-2).
    """
    return set_utility(*utility_counts(utility, k), k, alpha)[0]


def n_recall4(utility: Sequence[int | None], k: int) -> float | None:
    """N-Recall4+@K: grade-4+ passages in the top K over min(K, grade-4+ in the pool)
    (Dallaire 2.4); None (NA) when the pool holds none."""
    return set_utility(*utility_counts(utility, k), k, 1.0)[1]


def precision4(utility: Sequence[int | None], k: int) -> float:
    """Precision4+@K: share of the top K graded 4 or 5 (Dallaire 2.4)."""
    return set_utility(*utility_counts(utility, k), k, 1.0)[2]
