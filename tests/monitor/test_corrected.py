"""Corrected (PPI++) estimates: hand-computed cases, the textbook t interval at lam = 0, the
never-wider property on random data, and the units built from grades."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmon.core.corrected import (
    GradedEvent,
    Units,
    event_units,
    passage_units,
    ppi_mean,
)
from ragmon.core.measures import MeasureParams, compute
from tests.support.lazy import Lazy

stats = Lazy("scipy.stats")  # the reference implementations, imported when first used


def _units(
    y: list[float],
    f: list[float],
    rest: list[float],
    clusters: list[int] | None = None,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> Units:
    """Graded units y, f (each its own cluster unless told), then the rest (each its own)."""
    n = len(y)
    c = np.arange(n) if clusters is None else np.array(clusters)
    first = int(c.max()) + 1
    return Units(
        np.array(y, float), np.array(f, float), c, np.ones(n),
        np.array(rest, float), np.arange(first, first + len(rest)), np.ones(len(rest)), lo, hi,
    )  # fmt: skip


def test_hand_case_lambda_two_thirds() -> None:
    # L: y = f = 0, 0, 1, 1; U: f = 0, 1 four times. Cluster totals A = (y - 0.5)/4,
    # B_L = -(f - 0.5)/4, B_U = (f - 0.5)/8: sum AB = -1/16, sum B^2 = 1/16 + 1/32 -> lam = 2/3.
    # var = 4/3 * (4 (1/3 * 1/8)^2 + (2/3)^2 * 8/64) = 1/36; human only: 4/3 * 4/64 = 1/12.
    got = ppi_mean(_units([0, 0, 1, 1], [0, 0, 1, 1], [0, 1] * 4), min_labels=2, min_clusters=2)
    assert got.lam == pytest.approx(2 / 3)
    assert got.estimate is not None and got.human_only is not None
    t3 = stats.t.ppf(0.975, 3)  # 4 equal clusters: 3 degrees of freedom
    assert got.estimate.estimate == pytest.approx(0.5)
    assert got.estimate.high - 0.5 == pytest.approx(t3 / 6)
    assert got.human_only.high - 0.5 == pytest.approx(t3 * math.sqrt(1 / 12))
    assert got.effective_labels == pytest.approx(4 * (1 / 16) / (1 / 48))  # 12 labels' worth
    assert got.judge_only == pytest.approx(0.5) and got.labels == 4 and got.reason is None


def test_a_biased_judge_is_corrected() -> None:
    # The judge says 0.3 more than people everywhere: its mean is off by 0.3, PPI's is not.
    rng = np.random.default_rng(1)
    truth = rng.random(5000)
    y, f = truth[:100], truth[:100] + 0.3
    got = ppi_mean(_units(list(y), list(f), list(truth[100:] + 0.3)))
    assert got.judge_only == pytest.approx(truth.mean() + 0.3)
    # a perfect (shifted) judge: lam = 1 / (1 + var_U / var_L) (PPI++'s 1 / (1 + n / N))
    var_l, var_u = np.var(y) / 100, np.var(truth[100:]) / 4900
    assert got.lam == pytest.approx(1 / (1 + var_u / var_l))
    assert got.estimate is not None
    assert got.estimate.estimate == pytest.approx(
        y.mean() - got.lam * (y.mean() - truth[100:].mean())
    )
    assert got.estimate.low < truth.mean() < got.estimate.high
    assert got.effective_labels is not None and got.effective_labels > 1000


def test_a_useless_judge_gets_no_weight() -> None:
    rng = np.random.default_rng(2)
    y = rng.random(200)
    f = -y  # anti-correlated: the tuned lam is negative, cut to 0
    got = ppi_mean(_units(list(y), list(f), list(rng.random(1000))))
    assert got.lam == 0.0 and got.estimate == got.human_only
    assert got.effective_labels == pytest.approx(200)


def test_human_only_is_the_t_interval() -> None:
    y = [0.1, 0.4, 0.35, 0.8, 0.62, 0.05, 0.9, 0.5, 0.33, 0.71, 0.2, 0.45]
    got = ppi_mean(_units(y, [0.5] * 12, [0.4] * 30))
    lo, hi = stats.t.interval(0.95, 11, loc=np.mean(y), scale=stats.sem(y))
    assert got.human_only is not None
    assert (got.human_only.low, got.human_only.high) == pytest.approx((lo, hi))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(0, 7)), min_size=12, max_size=40
    ),
    st.lists(st.floats(0, 1), max_size=80),
)
def test_never_wider_than_human_only(
    graded: list[tuple[float, float, int]], rest: list[float]
) -> None:
    y, f, c = (list(col) for col in zip(*graded, strict=True))
    got = ppi_mean(_units(y, f, rest, c, 0.0, 1.0), min_labels=2, min_clusters=2)
    if got.estimate is None:
        assert got.reason
        return
    assert got.human_only is not None and 0.0 <= got.lam <= 1.0
    assert got.estimate.high - got.estimate.low <= got.human_only.high - got.human_only.low + 1e-12
    assert 0.0 <= got.estimate.low <= got.estimate.estimate <= got.estimate.high <= 1.0


@pytest.mark.parametrize(("value", "low", "high"), [(1.0, 0.684931, 1.0), (0.0, 0.0, 0.315069)])
def test_all_graded_values_at_an_end_still_have_an_interval(
    value: float, low: float, high: float
) -> None:
    # 12 values at 1 plus the pseudo-units (0, 0, 1, 1) of weight 1: center 14/16, sum of
    # squared influence values (14 (1/8)^2 + 2 (7/8)^2) / 16^2 = 1.75 / 256, CR1 x 12/11,
    # half = t(0.975, 11) x 0.0863562 = 0.190069; the plain estimate 1 stays inside.
    got = ppi_mean(_units([value] * 12, [value] * 12, [], lo=0.0, hi=1.0))
    assert got.estimate is not None and got.estimate.estimate == value
    assert (got.estimate.low, got.estimate.high) == pytest.approx((low, high), abs=1e-5)
    assert got.estimate == got.human_only and got.lam == 0.0


def test_a_binary_measure_gets_agresti_coulls_four_units() -> None:
    """Hit@K-like values (0 or 1) of 30 events: the plain t interval of so few misses more often
    than it says (simulated: 92 % for a 95 % interval), so two successes and two failures of one
    unit each join them, at the four corners of (people, judge)."""
    y = [1.0] * 24 + [0.0] * 6
    f = [0.0] * 3 + [1.0] * 24 + [0.0] * 3  # the judge disagrees on 6 events
    got = ppi_mean(_units(y, f, [], lo=0.0, hi=1.0))
    ys = np.array(y + [0.0, 0.0, 1.0, 1.0])
    center = ys.mean()  # 26 / 34
    var = 30 / 29 * float(np.sum(((ys - center) / len(ys)) ** 2))  # CR1 over the 30 events
    half = stats.t.ppf(0.975, 29) * math.sqrt(var)
    assert got.human_only is not None and got.human_only.estimate == 0.8  # the plain mean
    assert (got.human_only.low, got.human_only.high) == pytest.approx(
        (center - half, min(1.0, center + half))
    )
    plain = stats.t.interval(0.95, 29, loc=0.8, scale=stats.sem(y))
    assert got.human_only.low < plain[0]  # wider on the side the plain one misses


def test_a_judge_that_agreed_on_every_graded_event_gets_no_zero_width_interval() -> None:
    y = [1.0, 0.0] * 6
    got = ppi_mean(_units(y, y, [1.0, 0.0] * 500, lo=0.0, hi=1.0))
    assert got.estimate is not None and got.human_only is not None and got.lam > 0.5
    width = got.estimate.high - got.estimate.low
    assert 0.3 < width < got.human_only.high - got.human_only.low


def test_no_spread_on_an_open_range_gives_a_reason() -> None:
    got = ppi_mean(_units([0.5] * 12, [0.5] * 12, [0.5] * 20))
    assert got.estimate is None and got.reason == "no spread among the human values"


def test_too_few_graded_units() -> None:
    got = ppi_mean(_units([0.2] * 12, [0.3] * 12, [0.3] * 20, clusters=[i % 4 for i in range(12)]))
    assert got.estimate is None and got.human_only is None
    assert got.reason == "12 graded units from 4 effective clusters; needs 10 from 10"
    assert got.judge_only == pytest.approx(0.3)


def test_unequal_weights_count_as_fewer_clusters() -> None:
    # 12 events, one weighing 12: Kish's (sum w)^2 / sum w^2 = 23^2 / 155 = 3.4 clusters
    u = _units([0.2, 0.4] * 6, [0.3] * 12, [0.3] * 20)
    heavy = Units(u.human, u.judge, u.clusters, np.array([12.0] + [1.0] * 11), u.judge_rest,
                  u.clusters_rest, u.weights_rest)  # fmt: skip
    assert ppi_mean(u).estimate is not None
    got = ppi_mean(heavy)
    assert got.estimate is None and got.reason is not None and "3.413 effective" in got.reason


# ---- from grades to units ---------------------------------------------------------------------


def test_passage_units_for_p_at_k() -> None:
    events = [
        GradedEvent([3, 0, 2, 1], [2, 1, None, None], k=2),  # 2 graded passages in the top 2
        GradedEvent([1, None], [None, None], k=4, weight=2.0),  # a short ranking: 2 of K = 4
        GradedEvent([2, 2, 0], [None, 3, None], k=3, cluster="q1"),
        GradedEvent([0, 0, 0], [None, None, None], k=3, cluster="q1"),
    ]
    u = passage_units(events)
    assert u.human.tolist() == [1.0, 0.0, 1.0]  # relevant = grade >= 2
    assert u.judge.tolist() == [1.0, 0.0, 1.0]
    assert u.clusters.tolist() == [0, 0, 2]  # events 3 and 4 share the cluster "q1"
    assert u.weights.tolist() == [0.5, 0.5, 1 / 3]  # the event's weight / K
    assert u.judge_rest.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # unjudged: not relevant
    assert u.clusters_rest.tolist() == [1, 1, 2, 2, 2, 2, 2]
    # scale x the weighted passage mean = the weighted mean P@K over events
    p_at_k = [compute(list(e.judge), e.k)["precision"] for e in events]
    w = [e.weight for e in events]
    want = np.average(p_at_k, weights=w)
    all_f = np.concatenate([u.judge, u.judge_rest])
    all_w = np.concatenate([u.weights, u.weights_rest])
    assert u.scale == pytest.approx((1 + 2 * 0.5 + 1 + 1) / 5)
    assert u.scale * np.average(all_f, weights=all_w) == pytest.approx(want)
    assert (u.lo, u.hi) == (0.0, 1.0)


def test_passage_units_follow_the_relevant_grade() -> None:
    u = passage_units([GradedEvent([1, 1], [1, 0], k=2)], MeasureParams(relevant_grade=1))
    assert u.human.tolist() == [1.0, 0.0] and u.judge.tolist() == [1.0, 1.0]


def test_event_units_need_every_passage_the_measure_reads() -> None:
    events = [
        GradedEvent([3, 0, 2], [2, 0, 1], k=2),  # every passage graded: a label for all
        GradedEvent([3, 0, 2], [2, 0, None], k=2),  # top 2 only: Hit@K yes, nDCG@K no
        GradedEvent([3, 0, 2], [2, None, 1], k=2),  # not the top 2: neither
    ]
    ndcg, hit = event_units(events, "ndcg"), event_units(events, "hit")
    assert ndcg.human.tolist() == [compute([2, 0, 1], 2)["ndcg"]]
    assert ndcg.judge.tolist() == [compute([3, 0, 2], 2)["ndcg"]]
    assert ndcg.judge_rest.tolist() == [compute([3, 0, 2], 2)["ndcg"]] * 2
    assert hit.human.tolist() == [1.0, 1.0] and hit.clusters.tolist() == [0, 1]
    assert hit.clusters_rest.tolist() == [2] and hit.scale == 1.0


@pytest.mark.parametrize(
    ("events", "measure", "message"),
    [
        ([GradedEvent([1], [1], 1)], "t", "measure must be one of ndcg, hit, precision, got 't'"),
        ([GradedEvent([1, 2], [1], 1)], "hit", "events[0]: 1 human grades for 2 passages"),
        ([GradedEvent([1], [4], 1)], "hit", "events[0].human[0] must be 0-3 or None, got 4"),
        ([GradedEvent([1], [1], 0)], "hit", "events[0]: k must be an integer >= 1, got 0"),
        ([GradedEvent([1], [1], 1, weight=0)], "hit", "events[0]: weight must be a positive"),
    ],
)
def test_bad_events_are_named(events: list[GradedEvent], measure: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        event_units(events, measure)


def _bounded_sample(n: int, seed: int) -> Units:
    """n graded nDCG-like values in [0, 1] with a judge that tracks them, 2,000 others."""
    rng = np.random.default_rng(seed)
    y = rng.beta(4, 2, n)
    f = np.clip(y + rng.normal(0.05, 0.08, n), 0, 1)
    rest = np.clip(rng.beta(4, 2, 2000) + rng.normal(0.05, 0.08, 2000), 0, 1)
    return _units(list(y), list(f), list(rest), lo=0.0, hi=1.0)


def test_people_only_is_the_plain_t_interval_on_a_bounded_measure() -> None:
    # It was widened by four pseudo-units (0.181 where the plain interval is 0.118).
    u = _bounded_sample(30, 3)
    got = ppi_mean(u)
    lo, hi = stats.t.interval(0.95, 29, loc=np.mean(u.human), scale=stats.sem(u.human))
    assert got.human_only is not None
    assert (got.human_only.low, got.human_only.high) == pytest.approx((lo, hi))


@pytest.mark.parametrize("seed", range(5))
def test_the_corrected_interval_is_symmetric_and_as_tight_as_classical_ppi(seed: int) -> None:
    u = _bounded_sample(30, seed)
    got = ppi_mean(u)
    assert got.estimate is not None and got.human_only is not None
    e = got.estimate
    assert e.estimate - e.low == pytest.approx(e.high - e.estimate)  # not lopsided
    # classical PPI (lam = 1) on the same data, with the same t quantile
    diff = u.human - u.judge
    var = diff.var(ddof=1) / 30 + u.judge_rest.var(ddof=1) / len(u.judge_rest)
    classical = 2 * stats.t.ppf(0.975, 29) * math.sqrt(var)
    assert e.high - e.low <= classical * 1.001
    assert e.high - e.low < got.human_only.high - got.human_only.low


def test_effective_labels_are_counted_against_the_plain_people_only_interval() -> None:
    u = _bounded_sample(30, 7)
    got = ppi_mean(u)
    assert got.estimate is not None and got.effective_labels is not None
    plain = 2 * stats.t.ppf(0.975, 29) * stats.sem(u.human)
    width = got.estimate.high - got.estimate.low
    assert got.effective_labels == pytest.approx(30 * (plain / width) ** 2, rel=1e-6)
