"""Per-event measures: hand-worked cases, docs/measures.md's example, validation, properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.core.measure_table import BY_KEY
from ragmon.core.measures import (
    BUCKETS,
    HISTOGRAM_MEASURES,
    MAX_PASSAGES,
    MEASURE_KEYS,
    MeasureParams,
    compute,
)
from tests.monitor.test_measures_llm import reference_llm

PRIMER = [0, 3, 0, 1, 0, 2, 0, 0, 3, 0]
LINEAR = MeasureParams(ndcg_gain="linear")


def d(rank: int) -> float:
    """DCG discount of a 1-based rank."""
    return 1.0 / math.log2(rank + 1)


# --- docs/measures.md's worked example -------------------------------------------------------


def test_primer_ndcg_exponential() -> None:
    out = compute(PRIMER, 10)
    dcg = 7 * d(2) + 1 * d(4) + 3 * d(6) + 7 * d(9)
    idcg = 7 * d(1) + 7 * d(2) + 3 * d(3) + 1 * d(4)
    assert out["ndcg"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert round(out["ndcg"], 4) == 0.6011


def test_primer_ndcg_linear() -> None:
    out = compute(PRIMER, 10, LINEAR)
    dcg = 3 * d(2) + 1 * d(4) + 2 * d(6) + 3 * d(9)
    idcg = 3 * d(1) + 3 * d(2) + 2 * d(3) + 1 * d(4)
    assert out["ndcg"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert round(out["ndcg"], 4) == 0.6229


def test_primer_t_with_relevant_grade_1() -> None:
    out = compute(PRIMER, 10, MeasureParams(relevant_grade=1))
    assert out["t"] == pytest.approx(0.5 * 4 - 0.5 * 6 / 10)
    assert out["t"] == pytest.approx(1.7)


def test_primer_default_relevant_grade_2() -> None:
    out = compute(PRIMER, 10)
    # n_p = 3 (grades 3, 2, 3), n_n = 7.
    assert out["t"] == pytest.approx(0.5 * 3 - 0.5 * 7 / 10)
    assert out["precision"] == pytest.approx(0.3)
    assert out["hit"] == 1.0
    assert out["rr"] == 0.5
    assert out["harm"] == pytest.approx(0.1)  # the one grade-1 passage
    assert out["f_e"] is None and out["k_over_np"] is None  # 10 passages < 2K
    assert out["f"] is None and out["recall"] is None
    assert out["judged_at_k"] == 1.0


# --- one measure at a time ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("grades", "k", "params", "expected"),
    [
        ([3, 0, 2, 1], 4, MeasureParams(), 0.5 * 2 - 0.5 * 2 / 4),
        ([3, 0, 2, 1], 4, MeasureParams(t_alpha=0.2), 0.8 * 2 - 0.2 * 2 / 4),
        ([3, 0, 2, 1], 4, MeasureParams(relevant_grade=1), 0.5 * 3 - 0.5 * 1 / 4),
        ([3, 3, 3], 3, MeasureParams(), 0.5 * 3),  # upper bound (1 - a) K
        ([0, 1, 0], 3, MeasureParams(), -0.5),  # lower bound -a
        ([3, 0], 1, MeasureParams(t_alpha=0.0), 1.0),  # a = 0: T = n_p
        ([0, 3], 1, MeasureParams(t_alpha=1.0), -1.0),  # a = 1: T = -n_n / K
    ],
)
def test_t(grades: list[int], k: int, params: MeasureParams, expected: float) -> None:
    assert compute(grades, k, params)["t"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("grades", "k", "gain", "expected"),
    [
        ([3, 2, 1, 0], 4, "exponential", 1.0),  # already ideal
        ([0, 1, 2, 3], 4, "exponential", (1 * d(2) + 3 * d(3) + 7 * d(4)) / (7 + 3 * d(2) + d(3))),
        ([0, 1, 2, 3], 4, "linear", (1 * d(2) + 2 * d(3) + 3 * d(4)) / (3 + 2 * d(2) + d(3))),
        ([1, 2], 2, "linear", (1 + 2 * d(2)) / (2 + 1 * d(2))),
        ([1, 0, 3], 1, "exponential", 1 / 7),  # the ideal comes from the whole pool, not the top K
        ([0, 0, 3, 3], 2, "exponential", 0.0),
        ([0, 0, 0], 2, "exponential", 0.0),  # IDCG = 0 -> 0
        ([None, 3], 1, "exponential", 0.0),  # an unjudged passage has no gain
        ([3, None], 1, "linear", 1.0),
        ([None, 2, None, 3], 4, "linear", (2 * d(2) + 3 * d(4)) / (3 + 2 * d(2))),
    ],
)
def test_ndcg(grades: list[int | None], k: int, gain: str, expected: float) -> None:
    out = compute(grades, k, MeasureParams(ndcg_gain=gain))
    assert out["ndcg"] == pytest.approx(expected, abs=1e-12)


def test_ndcg_gains_differ_only_in_weighting() -> None:
    # Same ranking, two gains: exponential weighs the grade-3 passage at rank 2 more.
    grades = [2, 3, 0, 0]
    exp = compute(grades, 2)["ndcg"]
    lin = compute(grades, 2, LINEAR)["ndcg"]
    assert exp == pytest.approx((3 + 7 * d(2)) / (7 + 3 * d(2)))
    assert lin == pytest.approx((2 + 3 * d(2)) / (3 + 2 * d(2)))
    assert exp < lin


@pytest.mark.parametrize(
    ("grades", "k", "f_alpha", "expected"),
    [
        ([3, 0, 2, 2], 2, 0.5, 1 / (0.5 * 2 + 0.5 * 3)),  # n_p = 1, N̂_p = 3
        ([3, 0, 2, 2], 2, 0.2, 1 / (0.2 * 2 + 0.8 * 3)),
        ([3, 0, 2, 2, 3, 3], 2, 0.5, 1 / (0.5 * 2 + 0.5 * 3)),  # ranks > 2K are not in N̂_p
        ([3, 3, 0, 0], 2, 0.5, 1.0),  # every relevant passage of the top 2K is in the top K
        ([0, 0, 0, 0], 2, 0.5, 0.0),
        ([0, 0, 0, 0], 2, 0.0, 0.0),  # denominator 0 -> 0
        ([2, 0, 0, 0], 2, 0.0, 1.0),  # a = 0: n_p / N̂_p
        ([2, 0, 3, 0], 2, 1.0, 0.5),  # a = 1: n_p / K
    ],
)
def test_f_e(grades: list[int], k: int, f_alpha: float, expected: float) -> None:
    assert compute(grades, k, MeasureParams(f_alpha=f_alpha))["f_e"] == pytest.approx(expected)


def test_f_e_and_k_over_np_need_2k_passages() -> None:
    out = compute([3, 0, 2], 2)
    assert out["f_e"] is None
    assert out["k_over_np"] is None
    out = compute([3, 0, 2, 0], 2)
    assert out["f_e"] is not None
    assert out["k_over_np"] == pytest.approx(2 / 2)


@pytest.mark.parametrize(
    ("grades", "k", "expected"),
    [
        ([3, 0, 2, 2], 2, 2 / 3),
        ([3, 0, 0, 0, 0, 0, 0, 0], 4, 4.0),
        ([0, 0, 0, 0], 2, None),  # N̂_p = 0: undefined
        ([1, 1, 1, 1], 2, None),  # grade 1 is not relevant by default
    ],
)
def test_k_over_np(grades: list[int], k: int, expected: float | None) -> None:
    assert compute(grades, k)["k_over_np"] == (
        None if expected is None else pytest.approx(expected)
    )


@pytest.mark.parametrize(
    ("grades", "k", "harm_grades", "expected"),
    [
        ([1, 1, 0, 3], 4, None, 0.5),  # default {1}: distractors only
        ([1, 1, 0, 3], 4, {0, 1}, 0.75),  # Dallaire's reading: 1 - P@K
        ([1, 2, 2, 3], 4, {1, 2}, 0.75),
        ([1, 0], 1, None, 1.0),
        ([0, 1], 1, None, 0.0),  # rank 2 is outside the top K
        ([1, None], 2, None, 0.5),  # unjudged is not a distractor
        ([0, None], 2, {0, 1}, 0.5),  # ... so Harm != 1 - P@K when grades are missing
        ([3, 3], 2, {0, 1}, 0.0),
    ],
)
def test_harm(
    grades: list[int | None], k: int, harm_grades: set[int] | None, expected: float
) -> None:
    params = MeasureParams() if harm_grades is None else MeasureParams(harm_grades=harm_grades)
    assert compute(grades, k, params)["harm"] == pytest.approx(expected)


def test_harm_with_grades_0_and_1_is_one_minus_precision() -> None:
    grades = [0, 3, 1, 2, 0, 1]
    out = compute(grades, 6, MeasureParams(harm_grades=frozenset({0, 1})))
    assert out["harm"] == pytest.approx(1 - out["precision"])


@pytest.mark.parametrize(
    ("grades", "k", "relevant_grade", "precision", "hit", "rr"),
    [
        ([0, 1, 2, 3], 4, 2, 0.5, 1.0, 1 / 3),
        ([0, 1, 2, 3], 4, 3, 0.25, 1.0, 1 / 4),
        ([0, 1, 2, 3], 4, 1, 0.75, 1.0, 1 / 2),
        ([0, 1, 2, 3], 2, 2, 0.0, 0.0, 0.0),  # the relevant ones are below K
        ([2, 0, 0], 1, 2, 1.0, 1.0, 1.0),
        ([None, None, 3], 3, 2, 1 / 3, 1.0, 1 / 3),
    ],
)
def test_precision_hit_rr(
    grades: list[int | None],
    k: int,
    relevant_grade: int,
    precision: float,
    hit: float,
    rr: float,
) -> None:
    out = compute(grades, k, MeasureParams(relevant_grade=relevant_grade))
    assert out["precision"] == pytest.approx(precision)
    assert out["hit"] == hit
    assert out["rr"] == pytest.approx(rr)


@pytest.mark.parametrize(
    ("grades", "k", "relevant_total", "f_alpha", "f", "recall"),
    [
        ([3, 0, 2], 2, 4, 0.5, 1 / (0.5 * 2 + 0.5 * 4), 1 / 4),
        ([3, 0, 2], 2, 4, 0.0, 1 / 4, 1 / 4),  # a = 0: F = recall
        ([3, 0, 2], 2, 4, 1.0, 1 / 2, 1 / 4),  # a = 1: F = precision
        ([3, 2], 2, 2, 0.5, 1.0, 1.0),
        ([0, 0], 2, 0, 0.5, 0.0, None),  # no relevant passage exists: recall undefined
        ([0, 0], 2, 0, 0.0, 0.0, None),  # ... and F's denominator is 0
        ([0, 0], 2, 5, 0.5, 0.0, 0.0),
        # relevant_total below what the grades show: N_p is at least the 3 seen
        ([3, 3, 3], 1, 1, 0.5, 1 / (0.5 * 1 + 0.5 * 3), 1 / 3),
    ],
)
def test_f_and_recall_with_relevant_total(
    grades: list[int],
    k: int,
    relevant_total: int,
    f_alpha: float,
    f: float,
    recall: float | None,
) -> None:
    out = compute(grades, k, MeasureParams(f_alpha=f_alpha), relevant_total=relevant_total)
    assert out["f"] == pytest.approx(f)
    assert out["recall"] == (None if recall is None else pytest.approx(recall))


def test_f1_is_the_harmonic_mean_of_precision_and_recall() -> None:
    out = compute([3, 0, 2, 1, 0], 5, relevant_total=6)
    p, r = out["precision"], out["recall"]
    assert out["f"] == pytest.approx(2 * p * r / (p + r))


@pytest.mark.parametrize(
    ("grades", "k", "expected"),
    [
        ([None, 1, None, 0], 4, 0.5),
        ([None, 1, None, 0], 2, 0.5),
        ([0, 1, None, None], 2, 1.0),  # unjudged passages below K do not count
        ([None], 1, 0.0),
    ],
)
def test_judged_at_k(grades: list[int | None], k: int, expected: float) -> None:
    assert compute(grades, k)["judged_at_k"] == pytest.approx(expected)


# --- unjudged passages ----------------------------------------------------------------------


def test_all_unjudged_counts_nothing_as_relevant() -> None:
    out = compute([None] * 6, 3, MeasureParams(relevant_grade=1), relevant_total=2)
    assert out == {
        "t": -0.5,
        "ndcg": 0.0,
        "f_e": 0.0,
        "harm": 0.0,
        "precision": 0.0,
        "hit": 0.0,
        "rr": 0.0,
        "k_over_np": None,
        "f": 0.0,
        "recall": 0.0,
        "judged_at_k": 0.0,
        "udcg": None,
        "ra_nwg": 0.0,  # two relevant passages exist (relevant_total): the formula's 0
        "n_recall4": None,
        "precision4": 0.0,
        "n_recall5": None,
        "ndcg_pooled": 0.0,
        "ra_nwg_pooled": 0.0,
        "n_recall4_pooled": None,
    }


@pytest.mark.parametrize("grade", [0, 1, 2, 3])
def test_unjudged_is_never_better_than_any_grade(grade: int) -> None:
    # Replacing an unjudged passage by a judged one never lowers nDCG, P, RR, T:
    # None is read as "not relevant, no gain".
    unjudged = compute([None, 2, 0, 3], 2)
    judged = compute([grade, 2, 0, 3], 2)
    for key in ("ndcg", "precision", "rr", "t", "f_e", "hit"):
        assert judged[key] >= unjudged[key] - 1e-12, key


def test_unjudged_passages_are_left_out_of_the_ideal_ranking() -> None:
    # With the unjudged passage dropped the pool is {2}: the top K holds it -> nDCG 1.
    assert compute([2, None, None], 1)["ndcg"] == 1.0


# --- shape of the result and constants -------------------------------------------------------


def test_result_has_every_key_in_order() -> None:
    assert tuple(compute([0, 1, 2, 3], 2)) == MEASURE_KEYS


def test_histogram_measures_and_buckets() -> None:
    assert set(HISTOGRAM_MEASURES) <= set(MEASURE_KEYS)
    assert set(BUCKETS) == set(HISTOGRAM_MEASURES)
    for key, bounds in BUCKETS.items():
        assert list(bounds) == sorted(set(bounds)), key
    for key in ("ndcg", "f_e", "harm", "precision"):
        assert BUCKETS[key][0] == 0.0 and BUCKETS[key][-1] == 1.0


def test_accepts_tuples_and_other_iterables() -> None:
    grades = [3, None, 0, 2, 1, 0]
    expected = compute(grades, 3, relevant_total=4)
    assert compute(tuple(grades), 3, relevant_total=4) == expected
    assert compute(iter(grades), 3, relevant_total=4) == expected


def test_default_params_match_the_docs() -> None:
    p = MeasureParams()
    assert (p.relevant_grade, p.t_alpha, p.f_alpha, p.ndcg_gain) == (2, 0.5, 0.5, "exponential")
    assert p.harm_grades == frozenset({1})


def test_harm_grades_are_normalised_to_a_frozenset() -> None:
    assert MeasureParams(harm_grades=[0, 1, 1]).harm_grades == frozenset({0, 1})  # type: ignore[arg-type]


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grades", "k", "relevant_total", "message"),
    [
        ([0, 1], 0, None, r"k must be an integer >= 1, got 0"),
        ([0, 1], -3, None, r"k must be an integer >= 1, got -3"),
        ([0, 1], 1.0, None, r"k must be an integer >= 1, got 1\.0"),
        ([0, 1], True, None, r"k must be an integer >= 1, got True"),
        ([0] * (MAX_PASSAGES + 1), 1, None, rf"at most {MAX_PASSAGES} grades, got 201"),
        ([0, 4], 1, None, r"grades\[1\] must be 0, 1, 2, 3 or None, got 4"),
        ([-1, 0], 1, None, r"grades\[0\] must be 0, 1, 2, 3 or None, got -1"),
        ([0, 1, 2.5], 1, None, r"grades\[2\] must be 0, 1, 2, 3 or None, got 2\.5"),
        ([0, 2.0], 1, None, r"grades\[1\] must be 0, 1, 2, 3 or None, got 2\.0"),
        ([0, "2"], 1, None, r"grades\[1\] must be 0, 1, 2, 3 or None, got '2'"),
        ([True, 0], 1, None, r"grades\[0\] must be 0, 1, 2, 3 or None, got True"),
        ([0, [1]], 1, None, r"grades\[1\] must be 0, 1, 2, 3 or None, got \[1\]"),
        ([0, 1], 1, -1, r"relevant_total must be an integer >= 0 or None, got -1"),
        ([0, 1], 1, 2.0, r"relevant_total must be an integer >= 0 or None, got 2\.0"),
    ],
)
def test_bad_input_raises_a_clear_error(
    grades: list[object], k: object, relevant_total: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        compute(grades, k, relevant_total=relevant_total)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"relevant_grade": 0}, r"relevant_grade must be 1, 2 or 3, got 0"),
        ({"relevant_grade": 4}, r"relevant_grade must be 1, 2 or 3, got 4"),
        ({"relevant_grade": True}, r"relevant_grade must be 1, 2 or 3, got True"),
        ({"t_alpha": -0.1}, r"t_alpha must be a number in \[0, 1\], got -0\.1"),
        ({"t_alpha": 1.5}, r"t_alpha must be a number in \[0, 1\], got 1\.5"),
        ({"f_alpha": math.nan}, r"f_alpha must be a number in \[0, 1\], got nan"),
        ({"f_alpha": "0.5"}, r"f_alpha must be a number in \[0, 1\], got '0\.5'"),
        ({"ndcg_gain": "log"}, r"ndcg_gain must be exponential or linear, got 'log'"),
        ({"harm_grades": frozenset()}, r"harm_grades must be a non-empty set of grades 0-3"),
        ({"harm_grades": frozenset({1, 4})}, r"harm_grades must be a non-empty set of grades 0-3"),
        ({"harm_grades": 1}, r"harm_grades must be a non-empty set of grades 0-3"),
    ],
)
def test_bad_params_raise_a_clear_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MeasureParams(**kwargs)  # type: ignore[arg-type]


# --- an independent reference, written straight from the definitions --------------------------


def reference(
    grades: list[int | None], k: int, p: MeasureParams, relevant_total: int | None = None
) -> dict[str, float | None]:
    """The documented formulas, spelled out with a sort and no shortcuts."""

    def rel(g: int | None) -> bool:
        return g is not None and g >= p.relevant_grade

    def gain(g: int | None) -> float:
        if g is None:
            return 0.0
        return float(2**g - 1) if p.ndcg_gain == "exponential" else float(g)

    top = grades[:k]
    n_p = sum(rel(g) for g in top)
    n_n = k - n_p
    dcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(top))
    ideal = sorted((g for g in grades if g is not None), reverse=True)[:k]
    idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
    ranks = [i + 1 for i, g in enumerate(top) if rel(g)]
    out: dict[str, float | None] = {
        "t": (1 - p.t_alpha) * n_p - p.t_alpha * n_n / k,
        "ndcg": dcg / idcg if idcg > 0 else 0.0,
        "f_e": None,
        "harm": sum(g in p.harm_grades for g in top if g is not None) / k,
        "precision": n_p / k,
        "hit": float(n_p > 0),
        "rr": 1 / ranks[0] if ranks else 0.0,
        "k_over_np": None,
        "f": None,
        "recall": None,
        "judged_at_k": sum(g is not None for g in top) / k,
    }
    if len(grades) >= 2 * k:
        np_hat = sum(rel(g) for g in grades[: 2 * k])
        denom = p.f_alpha * k + (1 - p.f_alpha) * np_hat
        out["f_e"] = n_p / denom if denom else 0.0
        out["k_over_np"] = k / np_hat if np_hat else None
    if relevant_total is not None:
        n = max(relevant_total, sum(rel(g) for g in grades))
        denom = p.f_alpha * k + (1 - p.f_alpha) * n
        out["f"] = n_p / denom if denom else 0.0
        out["recall"] = n_p / n if n else None
    out.update(reference_llm(grades, k, p, None))  # UDCG, RA-nWG...: test_measures_llm.py
    out.update(reference_pooled(grades, k, p, [g for g in grades if g is not None]))
    if out["ra_nwg"] is None and relevant_total:  # relevant passages the event lost: 0, not NA
        out["ra_nwg"] = out["ra_nwg_pooled"] = 0.0
    return out


def reference_pooled(
    grades: list[int | None], k: int, p: MeasureParams, pool: list[int]
) -> dict[str, float | None]:
    """The pooled measures spelled out from docs/measures.md: the event's own DCG@K and top-K
    weights over the ideal of `pool` (every passage graded for the query, the event's own
    included), sorted passage by passage."""

    def gain(g: int | None) -> float:
        if not g:
            return 0.0
        return float(2**g - 1) if p.ndcg_gain == "exponential" else float(g)

    dcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(grades[:k]))
    ideal = sorted(pool, reverse=True)[:k]
    idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
    five = {0: 1, 1: 2, 2: 4, 3: 5}
    util = [five[g] for g in pool]
    n = {u: util.count(u) for u in range(1, 6)}
    if n[5] == 0:
        w = {1: 0.0, 2: 0.0, 3: 0.2, 4: 1.0, 5: 1.0}
    else:
        r5 = 1.0 / (n[5] / len(util)) ** p.ra_alpha
        w = {1: 0.0, 2: 0.0, 5: 1.0}
        w[4] = min(0.5 / (n[4] / len(util)) ** p.ra_alpha / r5, 1.0) if n[4] else 0.0
        w[3] = min(0.1 / (n[3] / len(util)) ** p.ra_alpha / r5, 0.25) if n[3] else 0.0
    top = [five[g] for g in grades[:k] if g is not None]
    best = sum(sorted((w[u] for u in util), reverse=True)[:k])
    good_pool = n[4] + n[5]
    return {
        "ndcg_pooled": dcg / idcg if idcg else 0.0,
        "ra_nwg_pooled": sum(w[u] for u in top) / best if best else None,
        "n_recall4_pooled": sum(u >= 4 for u in top) / min(k, good_pool) if good_pool else None,
    }


# --- property-based tests -------------------------------------------------------------------

grade = st.one_of(st.none(), st.integers(0, 3))
alpha = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))
params_st = st.builds(
    MeasureParams,
    relevant_grade=st.integers(1, 3),
    t_alpha=alpha,
    f_alpha=alpha,
    ndcg_gain=st.sampled_from(["exponential", "linear"]),
    harm_grades=st.frozensets(st.integers(0, 3), min_size=1),
)


@st.composite
def events(draw: st.DrawFn, min_len: int = 1, max_len: int = 40) -> tuple[list[int | None], int]:
    grades = draw(st.lists(grade, min_size=min_len, max_size=max_len))
    k = draw(st.integers(1, len(grades)))
    return grades, k


@st.composite
def events_2k(draw: st.DrawFn, max_k: int = 20, tail: int = 0) -> tuple[list[int | None], int]:
    """Events with at least 2K passages (F_e is defined), and at least `tail` more."""
    k = draw(st.integers(1, max_k))
    grades = draw(st.lists(grade, min_size=2 * k + tail, max_size=2 * k + tail + 10))
    return grades, k


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


@given(events(), params_st, st.one_of(st.none(), st.integers(0, 50)))
def test_matches_the_reference(
    event: tuple[list[int | None], int], params: MeasureParams, relevant_total: int | None
) -> None:
    grades, k = event
    got = compute(grades, k, params, relevant_total)
    want = reference(grades, k, params, relevant_total)
    for key in MEASURE_KEYS:
        assert close(got[key], want[key]), (key, got[key], want[key])


@given(events(), params_st, st.lists(st.integers(0, 3), max_size=40))
def test_pooled_measures_match_the_reference(
    event: tuple[list[int | None], int], params: MeasureParams, others: list[int]
) -> None:
    """Against a pool of the event's graded passages and `others` (passages other events of
    the query showed): each pooled measure as spelled out, within [0, 1], and nDCG never above
    the event's own (a larger pool only raises the ideal)."""
    grades, k = event
    pool = [g for g in grades if g is not None] + others
    got = compute(grades, k, params, pool=pool)
    want = reference_pooled(grades, k, params, pool)
    for key, value in want.items():
        assert close(got[key], value), (key, got[key], value)
        assert got[key] is None or 0.0 <= got[key] <= 1.0 + 1e-12, key
    assert got["ndcg_pooled"] <= got["ndcg"] + 1e-12


def test_pooled_measures_hand_worked() -> None:
    """K = 2, the event shows two distractors [1, 1] (nDCG 1.0: the best order of what it
    found); other retrievers found a 3 and a 2 for the query. Pooled ideal [3, 2]:
    IDCG = 7 + 3 / log2(3) = 8.893, DCG = 1 + 1 / log2(3) = 1.631, nDCG (pooled) = 0.1834.
    On the 1-5 scale the pool is {5, 4, 2, 2}: w5 = 1, w4 = min(0.5 * 1/1, 1) = 0.5; the top
    holds two 2s (weight 0), so RA-nWG (pooled) = 0 and N-Recall4+ (pooled) = 0 of 2."""
    out = compute([1, 1, 0, 0], 2, pool=[1, 1, 3, 2])
    assert out["ndcg"] == 1.0 and out["n_recall4"] is None
    assert out["ra_nwg"] == 0.0  # the query's pool weighs: G_obs 0 over G_ideal > 0, not NA
    assert out["ndcg_pooled"] == pytest.approx((1 + 1 / math.log2(3)) / (7 + 3 / math.log2(3)))
    assert out["ra_nwg_pooled"] == 0.0 and out["n_recall4_pooled"] == 0.0


def test_a_query_that_lost_its_relevant_passages_scores_ra_nwg_0_not_na() -> None:
    """Nothing the event found weighs (grades 0-1: 1-5 grades 1-2), so its own G_ideal is 0;
    with nothing known of the query it stays NA, as Dallaire reports a zero denominator."""
    assert compute([1, 0, 1], 3)["ra_nwg"] is None
    assert compute([1, 0, 1], 3, pool=[1, 0])["ra_nwg"] is None  # nor does the pool weigh
    assert compute([1, 0, 1], 3, pool=[1, 0, 2])["ra_nwg"] == 0.0
    assert compute([1, 0, 1], 3, relevant_total=1)["ra_nwg"] == 0.0
    assert compute([], 3, pool=[3])["ra_nwg"] == 0.0  # an empty result, for a known query


def test_without_a_pool_the_pooled_measures_are_the_event_own() -> None:
    out = compute([3, 1, 0, 2, None], 3)
    assert (out["ndcg_pooled"], out["ra_nwg_pooled"], out["n_recall4_pooled"]) == (
        out["ndcg"], out["ra_nwg"], out["n_recall4"],
    )  # fmt: skip


def test_a_pool_missing_some_of_the_event_own_passages_never_gives_more_than_1() -> None:
    out = compute([3, 3, 2], 3, pool=[1])
    assert out["ndcg_pooled"] == out["ndcg"] == 1.0 and out["ra_nwg_pooled"] == 1.0


def test_a_utility5_pool_feeds_ra_nwg_its_own_grades() -> None:
    # The event [5, 2] (1-5); other retrievers found two more 5s: w5 = 1, ideal of K = 2 is 2.
    out = compute([3, 1], 2, utility=[5, 2], pool=[3, 1, 3, 3], pool_utility=[5, 2, 5, 5])
    assert out["ra_nwg"] == 1.0 and out["ra_nwg_pooled"] == 0.5
    assert out["n_recall4_pooled"] == 0.5


@given(events(), params_st, st.one_of(st.none(), st.integers(0, 50)))
def test_bounds(
    event: tuple[list[int | None], int], params: MeasureParams, relevant_total: int | None
) -> None:
    grades, k = event
    out = compute(grades, k, params, relevant_total)
    for key in ("ndcg", "f_e", "harm", "precision", "hit", "rr", "judged_at_k", "f", "recall"):
        if out[key] is not None:
            assert 0.0 <= out[key] <= 1.0, (key, out[key])
    a = params.t_alpha
    assert -a - 1e-12 <= out["t"] <= (1 - a) * k + 1e-12
    assert out["hit"] in (0.0, 1.0)
    if out["k_over_np"] is not None:
        assert 0.5 <= out["k_over_np"] <= k  # 1 <= N̂_p <= 2K
    for key, value in out.items():  # the range the measure table states
        if value is not None:
            assert BY_KEY[key].lo <= value <= BY_KEY[key].hi, (key, value)


@given(events(), params_st)
def test_ideal_ranking_scores_exactly_one(
    event: tuple[list[int | None], int], params: MeasureParams
) -> None:
    grades, k = event
    ranked = sorted((g for g in grades if g is not None), reverse=True)
    ranked += [None] * (len(grades) - len(ranked))
    out = compute(ranked, k, params)
    assert out["ndcg"] == (1.0 if any(ranked[:k]) else 0.0)


@given(events(min_len=2), params_st, st.data())
def test_swapping_a_better_passage_upward_never_lowers_ndcg(
    event: tuple[list[int | None], int], params: MeasureParams, data: st.DataObject
) -> None:
    grades, k = event
    i = data.draw(st.integers(0, len(grades) - 2), label="upper rank")
    j = data.draw(st.integers(i + 1, len(grades) - 1), label="lower rank")
    grades[j] = data.draw(st.integers(1, 3), label="better grade, below")
    grades[i] = data.draw(st.one_of(st.none(), st.integers(0, grades[j] - 1)), label="above")
    swapped = list(grades)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    before = compute(grades, k, params)["ndcg"]
    after = compute(swapped, k, params)["ndcg"]
    assert after >= before - 1e-12
    if i < k <= j:  # a better passage entered the top K: nDCG strictly rises
        assert after > before


def not_relevant(rel: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(0, rel - 1))


@given(events_2k(), params_st, st.data())
def test_making_a_top_k_passage_relevant_never_lowers_t_or_f_e(
    event: tuple[list[int | None], int], params: MeasureParams, data: st.DataObject
) -> None:
    grades, k = event
    rel = params.relevant_grade
    i = data.draw(st.integers(0, k - 1), label="replaced rank")
    grades[i] = data.draw(not_relevant(rel), label="old grade")
    better = list(grades)
    better[i] = data.draw(st.integers(rel, 3), label="new grade")
    before = compute(grades, k, params)
    after = compute(better, k, params)
    assert after["t"] > before["t"]
    assert after["f_e"] >= before["f_e"] - 1e-12
    assert after["precision"] > before["precision"]


@given(events_2k(), params_st, st.data())
def test_swapping_a_relevant_passage_into_the_top_k_never_lowers_t_or_f_e(
    event: tuple[list[int | None], int], params: MeasureParams, data: st.DataObject
) -> None:
    grades, k = event
    rel = params.relevant_grade
    i = data.draw(st.integers(0, k - 1), label="leaving rank")
    j = data.draw(st.integers(k, len(grades) - 1), label="entering rank")
    grades[i] = data.draw(not_relevant(rel), label="leaving grade")
    grades[j] = data.draw(st.integers(rel, 3), label="entering grade")
    swapped = list(grades)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    before = compute(grades, k, params)
    after = compute(swapped, k, params)
    assert after["t"] > before["t"]
    assert after["f_e"] >= before["f_e"] - 1e-12


@given(events_2k(), params_st, st.data())
def test_order_within_the_top_k_does_not_matter_for_set_measures(
    event: tuple[list[int | None], int], params: MeasureParams, data: st.DataObject
) -> None:
    grades, k = event
    top = data.draw(st.permutations(grades[:k]), label="permuted top K")
    permuted = list(top) + grades[k:]
    before = compute(grades, k, params)
    after = compute(permuted, k, params)
    for key in ("t", "f_e", "harm", "precision", "hit", "judged_at_k", "k_over_np"):
        assert after[key] == before[key], key


@given(events_2k(tail=15), params_st)
def test_measures_past_2k_do_not_depend_on_the_tail(
    event: tuple[list[int | None], int], params: MeasureParams
) -> None:
    # Only nDCG's ideal ranking (and F/recall's N_p floor) may look past rank 2K.
    grades, k = event
    out = compute(grades, k, params)
    tail = compute(grades[: 2 * k] + [0] * (len(grades) - 2 * k), k, params)
    for key in ("t", "f_e", "harm", "precision", "hit", "rr", "k_over_np", "judged_at_k"):
        assert out[key] == tail[key], key
