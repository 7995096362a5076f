"""UDCG, RA-nWG@K, N-Recall4+@K, Precision4+@K: hand-worked cases from the formulas, properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.core.measures import MeasureParams, compute
from ragmon.core.utility_measures import (
    UMBRELA_TO_UTILITY,
    n_recall4,
    n_recall5,
    precision4,
    ra_nwg,
    rarity_weights,
    udcg,
    utility_grades,
)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def reference_llm(
    grades: list[int | None], k: int, params: MeasureParams, p_no: list[float | None] | None
) -> dict[str, float | None]:
    """The four measures spelled out from docs/measures.md, independently of ragmon's own."""
    util = [None if g is None else {0: 1, 1: 2, 2: 4, 3: 5}[g] for g in grades]
    pool = [u for u in util if u is not None]
    n = {g: pool.count(g) for g in range(1, 6)}
    if n[5] == 0:
        w = {1: 0.0, 2: 0.0, 3: 0.2, 4: 1.0, 5: 1.0}
    else:
        share = {g: n[g] / len(pool) for g in range(1, 6)}
        base = {3: 0.1, 4: 0.5, 5: 1.0}
        r = {g: base[g] / share[g] ** params.ra_alpha if n[g] else 0.0 for g in (3, 4, 5)}
        w = {1: 0.0, 2: 0.0, 3: min(r[3] / r[5], 0.25), 4: min(r[4] / r[5], 1.0), 5: 1.0}
    ideal = sum(sorted((w[u] for u in pool), reverse=True)[:k])
    top = util[:k]
    good_top = sum(1 for u in top if u is not None and u >= 4)
    good_pool = n[4] + n[5]
    out: dict[str, float | None] = {
        "udcg": None,
        "ra_nwg": sum(w[u] for u in top if u is not None) / ideal if ideal else None,
        "n_recall4": good_top / min(k, good_pool) if good_pool else None,
        "precision4": good_top / k,
        "n_recall5": top.count(5) / min(k, n[5]) if n[5] else None,
    }
    if p_no is not None and all(p is not None for p in p_no[:k]):
        s = 0.0
        for g, p in zip(grades[:k], p_no[:k], strict=True):
            assert p is not None
            relevant = g is not None and g >= params.relevant_grade
            s += (1 - p) if relevant else -params.udcg_gamma * (1 - p)
        out["udcg"] = sigmoid(s / len(grades[:k]))  # the passages in the context (eq. 4)
    return out


# --- UDCG, hand-worked -----------------------------------------------------------------------


def test_udcg_hand_worked() -> None:
    # Two relevant passages the LLM answers from (p = 0.1, 0.3), one distractor it also answers
    # from (p = 0.2), one unrelated passage it abstains on (p = 0.9), K = 4:
    # (1/4) [(0.9 + 0.7) - (1/3)(0.8 + 0.1)] = (1.6 - 0.3) / 4 = 0.325.
    got = udcg([True, True, False, False], [0.1, 0.3, 0.2, 0.9])
    assert got == pytest.approx(sigmoid(0.325), abs=1e-12)
    assert round(got, 4) == 0.5805


def test_udcg_extremes() -> None:
    # All relevant and always answered: sigmoid(1); all distractors always answered:
    # sigmoid(-1/3); every passage abstained on: sigmoid(0) = 0.5 whatever the relevance.
    assert udcg([True] * 3, [0.0] * 3) == pytest.approx(sigmoid(1.0))
    assert udcg([False] * 3, [0.0] * 3) == pytest.approx(sigmoid(-1 / 3))
    assert udcg([True, False], [1.0, 1.0]) == 0.5


def test_udcg_of_a_short_ranking_averages_over_the_passages_sent() -> None:
    # eq. 4 averages over the k passages in the context: one grade-3 passage the LLM answers
    # from, sent where the app asked for K = 10, is sigmoid(1) = 0.731, not sigmoid(1/10).
    out = compute([3], 10, p_no_response=[0.0])
    assert out["udcg"] == pytest.approx(sigmoid(1.0))
    assert round(out["udcg"], 3) == 0.731


def test_a_repeated_passage_is_an_empty_slot_for_udcg() -> None:
    # Ranks 1-3: relevant (p 0), unrelated (p 0.5), the first passage again (p 0). The repeat
    # adds neither help nor distraction: (1/3) [1 - (1/3) 0.5] = 0.2778, where counting it as
    # a distractor gives (1/3) [1 - (1/3) 1.5] = 0.1667.
    out = compute([3, 0, None], 3, p_no_response=[0.0, 0.5, 0.0], repeats=[False, False, True])
    assert out["udcg"] == pytest.approx(sigmoid((1 - 0.5 / 3) / 3))
    assert udcg([True, False, None], [0.0, 0.5, 0.0]) == out["udcg"]
    assert out["judged_at_k"] == 1.0  # the repeat is not a distinct passage to judge


def test_udcg_gamma_zero_ignores_distractors() -> None:
    assert udcg([True, False], [0.5, 0.0], gamma=0.0) == pytest.approx(sigmoid(0.25))


@pytest.mark.parametrize(
    ("relevant", "p", "message"),
    [
        ([], [], "one p"),
        ([True], [0.5, 0.5], "one p"),
        ([True], [1.5], r"\[0, 1\]"),
        ([True], [-0.1], r"\[0, 1\]"),
    ],
)
def test_udcg_bad_input(relevant: list[bool], p: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        udcg(relevant, p)


def test_compute_udcg_uses_relevant_grade_and_top_k_only() -> None:
    grades = [3, 1, 2, 0, 3]
    p = [0.2, 0.4, 0.6, 0.0, None]  # the fifth passage is past K = 4: its missing p is fine
    out = compute(grades, 4, MeasureParams(relevant_grade=2), p_no_response=p)
    # relevant: grades 3 and 2 -> (0.8 + 0.4); not: 1 and 0 -> (0.6 + 1.0)
    assert out["udcg"] == pytest.approx(sigmoid((1.2 - (1.6 / 3)) / 4))
    out1 = compute(grades, 4, MeasureParams(relevant_grade=1), p_no_response=p)
    assert out1["udcg"] == pytest.approx(sigmoid((0.8 + 0.6 + 0.4 - 1.0 / 3) / 4))


def test_compute_rejects_p_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="one p"):
        compute([3, 0, 1], 2, p_no_response=[0.1, 0.2])


def test_compute_udcg_is_null_without_p() -> None:
    assert compute([3, 0], 2)["udcg"] is None
    assert compute([3, 0], 2, p_no_response=[0.1, None])["udcg"] is None


def test_compute_udcg_unjudged_counts_as_not_relevant() -> None:
    # The lower bound: the unknown passage is taken as a distractor.
    out = compute([3, None], 2, p_no_response=[0.0, 0.4])
    assert out["udcg"] == pytest.approx(sigmoid((1.0 - 0.6 / 3) / 2))
    assert out["udcg"] <= compute([3, 3], 2, p_no_response=[0.0, 0.4])["udcg"]  # type: ignore[operator]


# --- RA-nWG@K and friends, hand-worked -------------------------------------------------------


def test_rarity_weights_hand_worked() -> None:
    # Pool of 10: one 5, four 4s, two 3s, three 1s. p5 = 0.1, p4 = 0.4, p3 = 0.2.
    # r5 = 1/0.1 = 10, r4 = 0.5/0.4 = 1.25, r3 = 0.1/0.2 = 0.5;
    # w4 = min(1.25/10, 1) = 0.125, w3 = min(0.5/10, 0.25) = 0.05.
    pool = [5, 4, 4, 4, 4, 3, 3, 1, 1, 1]
    w = rarity_weights(pool)
    assert w[5] == 1.0
    assert w[4] == pytest.approx(0.125)
    assert w[3] == pytest.approx(0.05)
    assert w[1] == w[2] == 0.0
    # alpha = 1 closed form: w4 = 0.5 n5/n4, w3 = 0.1 n5/n3.
    assert w[4] == pytest.approx(0.5 * 1 / 4)
    assert w[3] == pytest.approx(0.1 * 1 / 2)


def test_rarity_weights_caps() -> None:
    # Many 5s, one 4 and one 3: r4/r5 = 0.5 * 8 = 4 -> capped at 1; r3/r5 = 0.1 * 8 = 0.8 -> 0.25.
    w = rarity_weights([5] * 8 + [4, 3])
    assert w[4] == 1.0
    assert w[3] == 0.25


def test_rarity_weights_alpha_zero_is_no_rarity() -> None:
    w = rarity_weights([5, 4, 4, 4, 3], alpha=0.0)
    assert w[4] == 0.5  # b4 / b5
    assert w[3] == pytest.approx(0.1)


def test_ra_nwg_hand_worked() -> None:
    # The pool above in a ranked list, K = 3, top 3 = [4, 1, 5]:
    # G_obs = 0.125 + 0 + 1 = 1.125; G_ideal = 1 + 0.125 + 0.125 = 1.25; RA-nWG = 0.9.
    ranked = [4, 1, 5, 4, 3, 4, 3, 1, 4, 1]
    assert ra_nwg(ranked, 3) == pytest.approx(1.125 / 1.25)
    assert ra_nwg(ranked, 3) == pytest.approx(0.9)
    # N-Recall4+@3: grade 4+ in the top 3 = 2, in the pool = 5, min(3, 5) = 3 -> 2/3.
    assert n_recall4(ranked, 3) == pytest.approx(2 / 3)
    # Precision4+@3 = 2/3 as well; at K = 10 all five are in: 5/5 and 5/10.
    assert precision4(ranked, 3) == pytest.approx(2 / 3)
    assert n_recall4(ranked, 10) == 1.0
    assert precision4(ranked, 10) == 0.5
    # N-Recall5@K: the one grade 5 is at rank 3: 0 at K = 2, 1/min(3, 1) = 1 at K = 3.
    assert n_recall5(ranked, 2) == 0.0 and n_recall5(ranked, 3) == 1.0
    assert n_recall5([4, 3, 1], 2) is None  # no grade 5 in the pool: NA


def test_a_grade_3_can_outweigh_a_grade_4() -> None:
    """Rarity at work, as the formulas say: one 5, ten 4s and one 3 give w4 = 0.5 * 1/10 = 0.05
    and w3 = min(0.1 * 1/1, 0.25) = 0.1, so a top 1 holding the 3 scores twice the 4's."""
    w = rarity_weights([5] + [4] * 10 + [3])
    assert w[4] == pytest.approx(0.05) and w[3] == pytest.approx(0.1)
    pool = [4] * 10 + [5]
    assert ra_nwg([3, *pool], 1) == pytest.approx(0.1)
    assert ra_nwg([4, 3, *pool[1:]], 1) == pytest.approx(0.05)
    # With grades 0-3 mapped to 1-5 no passage is ever graded 3, so this cannot happen online.


def test_ra_nwg_fallback_without_grade_5() -> None:
    # No 5 in the pool: fixed weights w4 = 1, w3 = 0.2. Pool [4, 3, 3, 2, 1], K = 2, top [3, 2]:
    # G_obs = 0.2, G_ideal = 1 + 0.2 = 1.2.
    assert rarity_weights([4, 3, 3, 2, 1]) == (0.0, 0.0, 0.0, 0.2, 1.0, 1.0)
    assert ra_nwg([3, 2, 4, 3, 1], 2) == pytest.approx(0.2 / 1.2)


def test_ra_nwg_na_when_the_pool_weighs_nothing() -> None:
    assert ra_nwg([1, 2, 2, 1], 2) is None
    assert n_recall4([1, 2, 3], 2) is None
    assert precision4([1, 2, 3], 2) == 0.0


def test_unjudged_is_out_of_the_pool_and_gains_nothing() -> None:
    # Top 2 = [None, 5]; pool = [5, 4]: w4 = 0.5 * 1/1 = 0.5; ideal = 1.5; observed = 1.
    assert ra_nwg([None, 5, 4], 2) == pytest.approx(1 / 1.5)


def test_umbrela_to_utility_mapping() -> None:
    assert UMBRELA_TO_UTILITY == (1, 2, 4, 5)
    assert utility_grades([0, 1, 2, 3, None]) == [1, 2, 4, 5, None]
    # The caveat: 3 (partially relevant) is never produced, so w3 never counts.
    assert 3 not in UMBRELA_TO_UTILITY


def test_compute_maps_grades_or_takes_utility() -> None:
    out = compute([2, 0, 3, 1], 2)
    # utility [4, 1, 5, 2]: w4 = 0.5 * 1/1 = 0.5; ideal = 1.5; observed 0.5.
    assert out["ra_nwg"] == pytest.approx(0.5 / 1.5)
    assert out["n_recall4"] == 0.5
    assert out["precision4"] == 0.5
    direct = compute([2, 0, 3, 1], 2, utility=[3, 1, 5, 2])  # a 1-5 judge said 3, not 4
    assert direct["ra_nwg"] == pytest.approx(0.1 / 1.1)  # w3 = min(0.1, 0.25), ideal = 1 + 0.1
    assert direct["precision4"] == 0.0


@pytest.mark.parametrize(
    ("utility", "message"),
    [([1, 2, 3], "one utility grade"), ([0, 2, 3, 4], r"utility\[0\]"), ([1, 6, 1, 1], "1-5")],
)
def test_compute_rejects_bad_utility(utility: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compute([0, 1, 2, 3], 2, utility=utility)


@pytest.mark.parametrize(("name", "value"), [("udcg_gamma", 1.5), ("ra_alpha", -0.1)])
def test_bad_params(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        MeasureParams(**{name: value})  # type: ignore[arg-type]


# --- properties ------------------------------------------------------------------------------

grade = st.one_of(st.none(), st.integers(0, 3))
prob = st.floats(0.0, 1.0)
params_st = st.builds(
    MeasureParams,
    relevant_grade=st.integers(1, 3),
    udcg_gamma=st.floats(0.0, 1.0),
    ra_alpha=st.sampled_from([0.0, 0.5, 1.0]),
)


@st.composite
def probed(draw: st.DrawFn, max_len: int = 30) -> tuple[list[int | None], list[float | None], int]:
    grades = draw(st.lists(grade, min_size=1, max_size=max_len))
    p = draw(st.lists(st.one_of(st.none(), prob), min_size=len(grades), max_size=len(grades)))
    k = draw(st.integers(1, len(grades)))
    return grades, p, k


@given(probed(), params_st)
def test_matches_the_reference(
    event: tuple[list[int | None], list[float | None], int], params: MeasureParams
) -> None:
    grades, p, k = event
    got = compute(grades, k, params, p_no_response=p)
    want = reference_llm(grades, k, params, p)
    for key, value in want.items():
        if value is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


@given(probed(), params_st)
def test_mapped_counts_equal_the_explicit_map(
    event: tuple[list[int | None], list[float | None], int], params: MeasureParams
) -> None:
    """compute's count-based shortcut for 0-3 grades agrees with `utility_grades`."""
    grades, _, k = event
    got = compute(grades, k, params)
    want = compute(grades, k, params, utility=utility_grades(grades))
    for key in ("ra_nwg", "n_recall4", "precision4", "n_recall5"):
        assert got[key] == want[key], key


@given(st.lists(st.tuples(st.booleans(), prob), min_size=1, max_size=30))
def test_udcg_bounds(passages: list[tuple[bool, float]]) -> None:
    rel, p = zip(*passages, strict=True)
    value = udcg(rel, p)
    assert 0.0 < value < 1.0
    assert sigmoid(-1 / 3) - 1e-12 <= value <= sigmoid(1.0) + 1e-12


@given(probed(), params_st)
def test_ra_nwg_family_bounds(
    event: tuple[list[int | None], list[float | None], int], params: MeasureParams
) -> None:
    grades, _, k = event
    out = compute(grades, k, params)
    for key in ("ra_nwg", "n_recall4", "precision4", "n_recall5"):
        if out[key] is not None:
            assert 0.0 <= out[key] <= 1.0 + 1e-12, key  # type: ignore[operator]


@given(st.lists(st.tuples(st.booleans(), prob), min_size=1, max_size=30), st.data())
def test_making_a_passage_relevant_never_lowers_udcg(
    passages: list[tuple[bool, float]], data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, len(passages) - 1))
    rel, p = map(list, zip(*passages, strict=True))
    before = udcg(rel, p)
    rel[i] = True
    assert udcg(rel, p) >= before - 1e-15


@given(st.lists(st.integers(1, 5), min_size=2, max_size=30), st.data())
def test_swapping_a_grade_4_plus_passage_into_the_top_k_never_lowers_ra_nwg(
    utility: list[int], data: st.DataObject
) -> None:
    """Adding a good passage to the top K (from the same pool, so the weights do not move)."""
    k = data.draw(st.integers(1, len(utility) - 1))
    below = [j for j in range(k, len(utility)) if utility[j] >= 4]
    if not below:
        return
    j = data.draw(st.sampled_from(below))
    i = data.draw(st.integers(0, k - 1))
    if utility[i] >= utility[j] or utility[i] == 3:
        return  # out: a grade 3 can outweigh a grade 4 (test_a_grade_3_can_outweigh_a_grade_4)
    swapped = list(utility)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    before, after = ra_nwg(utility, k), ra_nwg(swapped, k)
    assert before is not None and after is not None  # a grade 4+ in the pool: G_ideal > 0
    assert after >= before - 1e-12
    gained = utility[i] < 4  # a new grade-4+ passage in the top K, not a 4 swapped for a 5
    r_before, r_after = n_recall4(utility, k), n_recall4(swapped, k)
    assert r_before is not None and r_after is not None
    assert r_after > r_before if gained else r_after == r_before
    p_before, p_after = precision4(utility, k), precision4(swapped, k)
    assert p_after > p_before if gained else p_after == p_before


@given(
    st.lists(st.tuples(st.booleans(), prob), min_size=0, max_size=20),
    st.floats(0.0, 0.5),
    st.floats(0.5, 1.0),
)
def test_a_distractor_lowers_udcg_more_than_an_unrelated_passage(
    rest: list[tuple[bool, float]], p_distractor: float, p_unrelated: float
) -> None:
    """Both are not relevant; the one the LLM answers from (low p) costs more than the one it
    abstains on (high p); nDCG, from grades alone, cannot tell them apart."""
    if p_unrelated - p_distractor < 1e-6:
        return
    rel = [r for r, _ in rest] + [False]
    p = [x for _, x in rest]
    with_distractor = udcg(rel, [*p, p_distractor])
    with_unrelated = udcg(rel, [*p, p_unrelated])
    assert with_distractor < with_unrelated
