"""The signals of every accepted event and the score-based predictors (`ragmon.core.signals`)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ragmon.core.signals import KEYS, SIGNALS, extract, nqc, wig


def test_hand_computed_example() -> None:
    """Scores 4, 3, 2, 1 with K = 2: the top 2 have mean 3.5 and σ 0.5; the lowest is 1."""
    s = extract("how  long is a\tflea's life", 2, ["a", "b", "c", "d"], [4.0, 3.0, 2.0, 1.0])
    assert s.values == {
        "results": 4.0,
        "query_words": 6.0,
        "top_score": 4.0,
        "score_gap": 1.0,
        "qpp_nqc": pytest.approx(0.5 / 3.5),
        "qpp_wig": pytest.approx(2.5),
    }
    assert (s.short, s.repeated) == (False, 0)


def test_short_list_uses_what_was_sent() -> None:
    """K = 10, M = 3: the top min(K, M) = 3 scores, the gap to rank 3."""
    s = extract("q", 10, ["a", "b", "c"], [3.0, 2.0, 1.0])
    assert s.short
    assert s.values["score_gap"] == 2.0
    assert s.values["qpp_nqc"] == pytest.approx(math.sqrt(2 / 3) / 2)
    assert s.values["qpp_wig"] == pytest.approx(1.0)


def test_empty_result() -> None:
    s = extract("q", 5, [], [])
    assert s.values == {**dict.fromkeys(KEYS), "results": 0.0, "query_words": 1.0}
    assert s.short and s.repeated == 0


@pytest.mark.parametrize(
    "scores",
    [[3.0, None, 1.0], [None, None, None], [3.0, math.nan, 1.0], [math.inf, 2.0, 1.0]],
)
def test_scores_count_only_when_every_passage_has_a_finite_one(scores: list) -> None:
    values = extract("q", 2, ["a", "b", "c"], scores).values
    assert [values[k] for k in ("top_score", "score_gap", "qpp_nqc", "qpp_wig")] == [None] * 4


def test_one_passage_has_a_top_score_only() -> None:
    values = extract("q", 3, ["a"], [0.7]).values
    assert values["top_score"] == 0.7
    assert values["score_gap"] is values["qpp_nqc"] is values["qpp_wig"] is None


def test_repeated_ids_are_counted_after_their_first() -> None:
    assert extract("q", 4, ["a", "b", "a", "a", "c", "b"], [None] * 6).repeated == 3


def test_undefined_predictors() -> None:
    assert nqc([1.0, -1.0], 2) is None  # mean 0
    assert wig([2.0, 1.0, 0.0], 2) is None  # lowest score 0
    assert nqc([1.0], 5) is None and wig([1.0], 5) is None


def test_predictors_are_scale_free_and_match_numpy() -> None:
    rng = random.Random(38)
    for _ in range(200):
        m, k = rng.randint(2, 40), rng.randint(1, 20)
        scores = sorted((rng.uniform(0.1, 30) for _ in range(m)), reverse=True)
        top = np.array(scores[: min(k, m)])
        if len(top) < 2:
            assert nqc(scores, k) is None
            continue
        assert nqc(scores, k) == pytest.approx(top.std() / abs(top.mean()), rel=1e-9)
        assert wig(scores, k) == pytest.approx((top.mean() - min(scores)) / min(scores), rel=1e-9)
        c = rng.uniform(1e-3, 1e5)
        assert nqc([c * s for s in scores], k) == pytest.approx(nqc(scores, k), rel=1e-9)
        assert wig([c * s for s in scores], k) == pytest.approx(wig(scores, k), rel=1e-9)


def test_table() -> None:
    assert tuple(s.key for s in SIGNALS) == KEYS and len(set(KEYS)) == len(KEYS)
    for s in SIGNALS:
        assert list(s.buckets) == sorted(set(s.buckets)), s.key
        assert s.help.endswith(".") and s.name
    # the score grids span the TREC DL runs' scales: cosine ~0.8 to SPLADE ~1.6e5
    top = next(s for s in SIGNALS if s.key == "top_score").buckets
    assert top[0] < 0 and 0.001 in top and top[-1] >= 2e5
