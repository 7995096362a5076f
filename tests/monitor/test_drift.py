"""The drift statistics against scipy and direct computation on test vectors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ragmon.core import drift
from ragmon.report.small_series import segments
from tests.support.lazy import Lazy

stats = Lazy("scipy.stats")  # the reference implementations, imported when first used


def _sample(seed: int, n: int, shift: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(shift, 1.0) for _ in range(n)]


# ---- PSI ---------------------------------------------------------------------------------


def test_psi_direct_computation() -> None:
    base, cur = [50, 30, 20], [30, 30, 40]
    b = [0.5, 0.3, 0.2]
    c = [0.3, 0.3, 0.4]
    expected = sum((ci - bi) * math.log(ci / bi) for bi, ci in zip(b, c, strict=True))
    assert drift.psi(base, cur) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.2 * math.log(5 / 3) + 0.2 * math.log(2), rel=1e-12)
    # PSI is the symmetric KL divergence: KL(c||b) + KL(b||c), scipy's entropy
    sym = stats.entropy(c, b) + stats.entropy(b, c)
    assert drift.psi(base, cur) == pytest.approx(sym, rel=1e-12)


def test_psi_identical_and_empty_bins() -> None:
    assert drift.psi([10, 20, 0], [20, 40, 0]) == pytest.approx(0.0, abs=1e-15)
    v = drift.psi([10, 0], [9, 1])  # an empty bin counts as a 1e-4 share: finite
    expected = (0.9 - 1.0) * math.log(0.9 / 1.0) + (0.1 - 1e-4) * math.log(0.1 / 1e-4)
    assert math.isfinite(v) and v == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError):
        drift.psi([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        drift.psi([0, 0], [1, 2])


@pytest.mark.parametrize(
    ("value", "level"),
    [(0.0, "stable"), (0.099, "stable"), (0.1, "moderate"), (0.25, "moderate"), (0.26, "major")],
)
def test_psi_levels(value: float, level: str) -> None:
    assert drift.psi_level(value) == level


def test_psi_noise_matches_simulation() -> None:
    """With no change, PSI averages about (occupied bins - 1)(1/n_b + 1/n_c)."""
    rng = np.random.default_rng(1)
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    vals = [drift.psi(rng.multinomial(400, p), rng.multinomial(300, p)) for _ in range(400)]
    predicted = drift.psi_noise([80, 80, 120, 100, 20], [60, 60, 90, 75, 15])
    assert predicted == pytest.approx(4 * (1 / 400 + 1 / 300))
    assert np.mean(vals) == pytest.approx(predicted, rel=0.15)


# ---- reference distributions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "df"), [(0.5, 3), (2.5, 10), (4.0, 30), (-1.2, 7), (10.0, 2), (3.3, 1000), (2.0, 1.3)]
)
def test_t_sf_matches_scipy(t: float, df: float) -> None:
    assert drift.t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9)


@pytest.mark.parametrize(("q", "df"), [(0.975, 1), (0.975, 5), (0.995, 12.5), (0.9995, 40)])
def test_t_ppf_matches_scipy(q: float, df: float) -> None:
    assert drift.t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-6)


@pytest.mark.parametrize(("x", "df"), [(0.5, 1), (10, 3), (50, 20), (300, 200), (1e-3, 5)])
def test_chi2_sf_matches_scipy(x: float, df: float) -> None:
    assert drift.chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9)


def test_psi_pvalue_is_calibrated_with_no_change() -> None:
    """With no change, PSI's p-value is about uniform: 5% of draws read p < 0.05."""
    rng = np.random.default_rng(3)
    p = np.array([0.05, 0.1, 0.2, 0.3, 0.2, 0.1, 0.05])
    ps = [drift.psi_pvalue(rng.multinomial(500, p), rng.multinomial(400, p)) for _ in range(2000)]
    assert 0.03 <= np.mean(np.array(ps) < 0.05) <= 0.07
    # the same shift reads as noise at 40 events and beyond noise at 4,000
    shifted = p * np.array([1.6, 1.3, 1.0, 0.8, 1.0, 1.0, 1.0])
    shifted /= shifted.sum()
    small = drift.psi_pvalue((p * 40).round(), (shifted * 40).round())
    large = drift.psi_pvalue((p * 4000).round(), (shifted * 4000).round())
    assert small > 0.2 and large < 1e-6


# ---- clustered means and changes ----------------------------------------------------------------


def _singletons(values: np.ndarray, offset: int = 0) -> drift.Sample:
    n = len(values)
    return drift.Sample(values, np.zeros(n, int), np.arange(n) + offset)


def test_clustered_mean_of_singletons_is_the_t_interval() -> None:
    v = np.array(_sample(9, 40))
    ci = drift.clustered_mean(v, np.arange(40))
    low, high = stats.t.interval(0.95, ci.df, loc=v.mean(), scale=stats.sem(v))
    assert ci.estimate == pytest.approx(v.mean())
    assert (ci.low, ci.high) == (pytest.approx(low, rel=1e-4), pytest.approx(high, rel=1e-4))
    assert ci.clusters == ci.n == 40 and 1 <= ci.df <= 39


def test_change_of_singletons_has_welch_variance() -> None:
    a, b = np.array(_sample(1, 50)), np.array(_sample(2, 70, 0.5)) * 2
    ch = drift.segment_change(_singletons(a), _singletons(b, 1000))
    assert ch.estimate == ch.total == pytest.approx(b.mean() - a.mean())
    welch_se = math.sqrt(a.var(ddof=1) / 50 + b.var(ddof=1) / 70)
    se = (ch.high - ch.estimate) / drift.t_ppf(0.975, ch.df)
    assert se == pytest.approx(welch_se * math.sqrt(120 / 119), rel=1e-4)  # CR1's G/(G-1)
    assert ch.pvalue == pytest.approx(2 * stats.t.sf(abs(ch.estimate) / se, ch.df), rel=1e-6)
    # the effective number of clusters is conservative next to Welch's degrees of freedom
    assert ch.df <= stats.ttest_ind(b, a, equal_var=False).df


def test_repeated_questions_do_not_shrink_the_interval() -> None:
    """Each question asked 20 times with the same grades carries one question's information."""
    a, b = np.array(_sample(3, 30)), np.array(_sample(4, 30, 0.3))
    once = drift.segment_change(_singletons(a), _singletons(b, 100))
    rep = drift.Sample(np.repeat(a, 20), np.zeros(600, int), np.repeat(np.arange(30), 20))
    rep_b = drift.Sample(np.repeat(b, 20), np.zeros(600, int), np.repeat(np.arange(30) + 100, 20))
    many = drift.segment_change(rep, rep_b)
    assert many.estimate == pytest.approx(once.estimate)
    assert many.high - many.low == pytest.approx(once.high - once.low, rel=0.15)
    assert many.pvalue == pytest.approx(once.pvalue, rel=0.5)
    naive = stats.ttest_ind(np.repeat(b, 20), np.repeat(a, 20)).pvalue
    assert naive < once.pvalue / 100  # what treating the repeats as independent would claim


def test_zero_variance_is_sane() -> None:
    """Constant windows: no change gives p = 1; a change gives the permutation bound, not 0."""
    same = drift.segment_change(_singletons(np.full(5, 0.9)), _singletons(np.full(5, 0.9), 10))
    assert same.pvalue == 1.0 and same.effect == 0.0
    moved = drift.segment_change(_singletons(np.full(5, 0.9)), _singletons(np.full(5, 0.7), 10))
    assert moved.pvalue == pytest.approx(2 / math.comb(10, 5))
    # two events per window: a normal reference gave p = 1.3e-15; no test on 2 + 2 events can
    # go below the permutation bound 2 / C(4, 2) = 1/3
    tiny = drift.segment_change(
        _singletons(np.array([0.9, 0.95])), _singletons(np.array([0.7, 0.72]), 10)
    )
    assert tiny.pvalue == pytest.approx(1 / 3)


def test_mix_shift_is_not_a_within_segment_change() -> None:
    """Segments of different quality; only their shares move: the change is all mix."""
    rng = np.random.default_rng(5)

    def window(share_hard: float, n: int, offset: int) -> drift.Sample:
        seg = (rng.random(n) < share_hard).astype(int)
        values = np.where(seg == 1, 0.4, 0.8) + rng.normal(0, 0.1, n)
        return drift.Sample(values, seg, np.arange(n) + offset)

    ch = drift.segment_change(window(0.5, 4000, 0), window(0.8, 4000, 10_000))
    assert ch.total == pytest.approx(-0.12, abs=0.02)
    assert abs(ch.estimate) < 0.01 and ch.pvalue > 0.01
    assert ch.mix == pytest.approx(ch.total - ch.estimate) and ch.segments == 2


def test_small_segments_are_pooled() -> None:
    seg_b = np.array([0] * 50 + [1] * 3 + [2] * 4)
    seg_c = np.array([0] * 50 + [1] * 4 + [2] * 3)
    vb, vc = np.linspace(0, 1, 57), np.linspace(0, 1, 57)
    ch = drift.segment_change(
        drift.Sample(vb, seg_b, np.arange(57)), drift.Sample(vc, seg_c, np.arange(57) + 57)
    )
    assert ch.segments == 1  # segment 0 alone; 1 and 2 pooled hold 7 events, under 10: dropped


def test_binned_change_matches_records_for_singletons() -> None:
    a, b = np.array(_sample(6, 300)), np.array(_sample(7, 200, 0.2))
    cells_a = {"x": (300, float(a.mean()), float(a.var(ddof=1)))}
    cells_b = {"x": (200, float(b.mean()), float(b.var(ddof=1)))}
    binned = drift.binned_change(cells_a, cells_b)
    ref = stats.ttest_ind(b, a, equal_var=False)
    assert binned.estimate == pytest.approx(b.mean() - a.mean())
    assert binned.df == pytest.approx(ref.df) and binned.pvalue == pytest.approx(ref.pvalue)


def test_binned_moments_use_the_sum_of_squares() -> None:
    bounds = (0.0, 0.5, 1.0)
    counts = [2, 4, 4, 0]
    values = [0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9]
    n, mean, var = drift.binned_moments(counts, bounds, sum(values), sum(v * v for v in values))
    assert (n, mean, var) == (10, pytest.approx(0.4), pytest.approx(np.var(values, ddof=1)))
    _, _, approx = drift.binned_moments(counts, bounds, sum(values))  # older data: mid-points
    mids = [0.0] * 2 + [0.25] * 4 + [0.75] * 4
    assert approx == pytest.approx(np.var(mids, ddof=1))


def test_holm_matches_direct() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert drift.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert drift.holm([]) == []


def test_weighted_holm_gives_the_heavy_hypothesis_its_share_and_passes_it_on() -> None:
    p = [0.02, 0.03, 0.04]
    # weights 2:1:1 of 4: 0.02/2*4=0.04; then 0.03*2=0.06; then 0.04*1 -> monotone 0.06
    assert drift.holm(p, [2, 1, 1]) == pytest.approx([0.04, 0.06, 0.06])
    assert drift.holm(p, [1, 1, 1]) == pytest.approx(drift.holm(p))
    assert drift.holm(p, [2, 1, 1])[0] < drift.holm(p)[0]  # 0.04 against plain Holm's 0.06


def test_weighted_holm_keeps_the_family_wise_error() -> None:
    """Under the null (uniform p-values), any weights reject something at 5% in at most 5%
    of families."""
    rng = np.random.default_rng(3)
    weights = [9.0, 9.0, 9.0, *([1.0] * 27)]
    families = rng.uniform(size=(4000, 30))
    rejected = sum(min(drift.holm(list(f), weights)) < 0.05 for f in families)
    assert rejected / 4000 <= 0.05 + 3 * (0.05 * 0.95 / 4000) ** 0.5


def test_evidence_words_never_say_real() -> None:
    words = [drift.evidence(p) for p in (1e-5, 0.005, 0.03, 0.5)]
    assert words == [
        "very strong evidence", "strong evidence", "some evidence", "no evidence beyond noise"
    ]  # fmt: skip
    assert not any("real" in w or "certain" in w or "likely" in w for w in words)


@pytest.mark.parametrize(
    ("low", "high", "level"),
    [(-0.9, -0.6, "major"), (-0.7, -0.3, "moderate"), (-0.5, -0.1, "minor"), (-0.8, 0.1, "minor")],
)
def test_severity_from_the_effect_interval(low: float, high: float, level: str) -> None:
    ch = drift.Change((low + high) / 2, (low + high) / 2, low, high, 0.001, 50, 1.0, 1)
    assert drift.severity(ch) == level


# ---- clusters: what the retriever saw ------------------------------------------------------


def _same(codes: np.ndarray, i: int, j: int) -> bool:
    return bool(codes[i] == codes[j])


def test_paraphrases_that_retrieve_the_same_passages_are_one_cluster() -> None:
    top = [f"p{i}" for i in range(10)]
    keys = ["reset my password", "how to reset password", "password reset?", "other", "other"]
    passages = [top, top[::-1], top[:4] + ["x1", "x2", "x3", "x4", "x5", "x6"], ["y"] * 3, []]
    codes = drift.retrieval_clusters(keys, passages)
    assert _same(codes, 0, 1)  # same passages, other order
    assert not _same(codes, 0, 2)  # 4 of 10 shared: below half
    assert _same(codes, 3, 4) and not _same(codes, 0, 3)  # the same key; no passages: key only
    assert sorted(set(codes.tolist())) == [0, 1, 2]


def test_overlap_rule_and_no_chains() -> None:
    a = [f"a{i}" for i in range(10)]
    b = a[:5] + [f"b{i}" for i in range(5)]  # 5 of 10 shared with a: joined
    c = b[5:] + [f"c{i}" for i in range(5)]  # 5 of 10 with b, none with a: leads its own
    d = ["c0"]  # a one-passage list: joined when its only passage is in a leading list
    e = ["a0", "z1", "z2"]  # 1 of 3 shared: fewer than two ids, not joined
    codes = drift.retrieval_clusters(list("aabcde"), [a, a, b, c, d, e])  # a leads (2 events)
    assert _same(codes, 0, 2) and _same(codes, 3, 4) and not _same(codes, 0, 3)
    assert len(set(codes.tolist())) == 3
    strict = drift.retrieval_clusters(list("abc"), [a, b, c], overlap=0.6)
    assert len(set(strict.tolist())) == 3


def test_a_small_knowledge_base_is_not_one_question() -> None:
    """200 documents in 40 lists of 10, each overlapping the next by half: single linkage made
    them all one question (every interval of the report then had zero width)."""
    docs = [f"d{i}" for i in range(200)]
    passages = [[docs[(5 * i + j) % 200] for j in range(10)] for i in range(40)]
    codes = drift.retrieval_clusters([f"q{i}" for i in range(40)], passages)
    assert len(set(codes.tolist())) == 20  # every other list leads, its successor joins it


def test_a_hub_passage_proposes_no_pair() -> None:
    """A passage in every list (a footer, a FAQ page) does not join unrelated questions."""
    passages = [["hub", f"q{i}a", f"q{i}b"] for i in range(40)]
    codes = drift.retrieval_clusters([f"k{i}" for i in range(40)], passages, hub=10)
    assert len(set(codes.tolist())) == 40
    assert len(set(drift.retrieval_clusters(["k"] * 3, passages[:3]).tolist())) == 1


def test_clusters_match_a_slow_reference() -> None:
    """Random overlapping lists: the leader rule and the query keys, computed directly."""
    rng = random.Random(3)
    for _ in range(20):
        n = rng.randint(2, 40)
        keys = [rng.randrange(n) for _ in range(n)]
        passages = [rng.sample(range(30), rng.randint(0, 6)) for _ in range(n)]
        got = drift.retrieval_clusters(keys, passages)
        comp = list(range(n))

        def find(i: int, comp: list[int] = comp) -> int:
            while comp[i] != i:
                i = comp[i]
            return i

        sets = list(dict.fromkeys(frozenset(p) for p in passages if p))
        uses = [sum(frozenset(p) == x for p in passages) for x in sets]
        leader_of: dict[frozenset, frozenset] = {}
        leading: list[frozenset] = []
        for x in sorted(sets, key=lambda x: (-uses[sets.index(x)], sets.index(x))):

            def enough(y: frozenset, x: frozenset = x) -> bool:
                small = min(len(x), len(y))
                return len(x & y) >= (small if small <= 1 else max(2, math.ceil(0.5 * small)))

            lead = next((y for y in leading if enough(y)), None)
            if lead is None:
                leading.append(x)
            leader_of[x] = lead or x
        for i in range(n):
            for j in range(i + 1, n):
                a, b = frozenset(passages[i]), frozenset(passages[j])
                same_lead = a and b and leader_of[a] == leader_of[b]
                if keys[i] == keys[j] or same_lead:
                    comp[find(i)] = find(j)
        for i in range(n):
            for j in range(n):
                assert (got[i] == got[j]) == (find(i) == find(j))


# ---- permutation test (small series) ------------------------------------------------------


@pytest.mark.parametrize(("n_base", "n_cur", "shift"), [(5, 6, 0.0), (6, 6, 1.0), (4, 7, 2.0)])
def test_permutation_pvalue_is_scipys_exact_test_for_single_events(
    n_base: int, n_cur: int, shift: float
) -> None:
    b = np.array(_sample(1, n_base))
    c = np.array(_sample(2, n_cur, shift))
    ours = drift.permutation_pvalue(b, np.arange(n_base), c, np.arange(n_base, n_base + n_cur))
    ref = stats.permutation_test(  # two-sided as |change| >= the observed |change|
        (c, b), lambda x, y: abs(np.mean(x) - np.mean(y)), permutation_type="independent",
        n_resamples=10**6, alternative="greater",
    ).pvalue  # fmt: skip
    assert ours == pytest.approx(ref, rel=1e-9)


def test_permutation_moves_a_question_as_one_block() -> None:
    """A question asked three times in one window is one unit: with blocks, 2 + 2 units give
    6 arrangements (p >= 1/3); counted as events, 8 would give 70."""
    b = np.array([0.1, 0.1, 0.1, 0.2])
    c = np.array([0.9, 0.9, 0.9, 0.8])
    p = drift.permutation_pvalue(b, np.array([0, 0, 0, 1]), c, np.array([2, 2, 2, 3]))
    assert p == pytest.approx(2 / 6)
    single = drift.permutation_pvalue(b, np.arange(4), c, np.arange(4, 8))
    assert single == pytest.approx(2 / 70)


def test_permutation_sampled_when_large_is_seeded_and_valid() -> None:
    b = np.array(_sample(3, 30))
    c = np.array(_sample(4, 30, 0.0))
    args = (b, np.arange(30), c, np.arange(30, 60))
    p1, p2 = drift.permutation_pvalue(*args, seed=5), drift.permutation_pvalue(*args, seed=5)
    assert p1 == p2 and 1 / 5000 <= p1 <= 1
    ref = stats.ttest_ind(c, b).pvalue  # large and normal: close to Welch/Student's t
    assert abs(p1 - ref) < 0.05
    shifted = drift.permutation_pvalue(b, np.arange(30), c + 2.0, np.arange(30, 60))
    assert shifted == pytest.approx(1 / 5000)  # the smallest a sampled p can be


def test_permutation_under_the_null_holds_its_level() -> None:
    """Over 400 null draws of 8 vs 8 events, p < 0.05 in about 5% of them (at most 8%)."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        b, c = rng.normal(size=8), rng.normal(size=8)
        hits += drift.permutation_pvalue(b, np.arange(8), c, np.arange(8, 16), reps=999) < 0.05
    assert hits <= 32


def test_changepoint_finds_the_split_and_holds_its_level_over_the_scan() -> None:
    """A drop in the last 5 of 8 weeks is found at its split; with no change, the scan's
    largest move over the lasting segments has p < 0.05 in about 5% of draws (more only with a
    chance under 0.1 %), though each draw picks its most extreme segment."""
    rng = np.random.default_rng(3)
    weeks = np.repeat(np.arange(8), 6)
    clusters = np.arange(48)
    found = segments([f"q{i}" for i in range(48)], weeks.tolist(), 8)
    assert (3, 8) in found and (2, 5) in found and (1, 8) not in found  # 6 events before 1
    values = rng.normal(size=48) - 2.0 * (weeks >= 3)
    where, p = drift.changepoint_pvalue(values, clusters, weeks, found, reps=999, seed=1)
    assert where == (3, 8) and p == pytest.approx(1 / (1 + 999 + drift.MORE_REPS))  # refined
    hits = 0
    for i in range(300):
        values = rng.normal(size=48)
        _, p = drift.changepoint_pvalue(values, clusters, weeks, found, 199, i, more=0)
        hits += p < 0.05
    assert hits <= stats.binom.isf(0.001, 300, 0.05)


def test_changepoint_finds_where_a_drop_ended() -> None:
    """A drop in weeks 3 to 5 of 8 that has recovered is found as a segment with an end (the
    weeks since compared with the drop's, not the drop with the weeks before it)."""
    rng = np.random.default_rng(4)
    weeks = np.repeat(np.arange(8), 6)
    values = rng.normal(size=48) - 2.0 * ((weeks >= 3) & (weeks < 6))
    found = segments([f"q{i}" for i in range(48)], weeks.tolist(), 8)
    where, p = drift.changepoint_pvalue(values, np.arange(48), weeks, found, reps=999, seed=1)
    assert where == (3, 6) and p < 0.01  # p: the scan for a lasting change (a change happened)
    only_lasting = [s for s in found if s[1] == 8]
    where, _ = drift.changepoint_pvalue(values, np.arange(48), weeks, only_lasting, 999, 1)
    assert where[0] == 3  # a scan of lasting changes alone compares the drop and its end as one


def test_segments_hold_the_small_minimum_on_every_side() -> None:
    # 4 events a week from 4 questions: a side needs 2 weeks (8 events, 5 questions)
    queries = [f"q{i % 4}w{w}" for w in range(6) for i in range(4)]
    weeks = [w for w in range(6) for _ in range(4)]
    found = segments(queries, weeks, 6)
    assert [s for s in found if s[1] == 6] == [(2, 6), (3, 6), (4, 6)]
    assert [s for s in found if s[1] < 6] == [(2, 4)]  # 2 weeks before, in and after


def test_changepoint_moves_a_question_of_one_week_as_one_block() -> None:
    """Three asks of one question in one week are one block: 2 + 2 blocks over 2 weeks give at
    most 6 distinct arrangements, so the drop cannot look rarer than 1 in 3."""
    values = np.array([0.9, 0.9, 0.9, 0.8, 0.1, 0.1, 0.1, 0.2])
    weeks = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    clusters = np.array([0, 0, 0, 1, 2, 2, 2, 3])
    _, p = drift.changepoint_pvalue(values, clusters, weeks, [(1, 2)], reps=2000, seed=0)
    assert p > 0.25


# ---- Hajek weights (planned sampling) -------------------------------------------------------


def test_weighted_clustered_mean_is_hajeks_mean_with_clusters() -> None:
    from ragmon.core.weighted import hajek

    rng = np.random.default_rng(8)
    y, p = rng.random(60), rng.choice([0.1, 0.5, 1.0], 60)
    clusters = rng.integers(0, 25, 60)
    ours = drift.clustered_mean(y, clusters, weights=1 / p)
    ref = hajek(y, p, clusters=clusters)
    for a, b in zip(
        (ours.estimate, ours.low, ours.high, ours.df), (ref.estimate, ref.low, ref.high, ref.df),
        strict=True,
    ):  # fmt: skip
        assert a == pytest.approx(b, rel=1e-12)


def test_weighted_change_is_the_change_of_hajeks_means() -> None:
    rng = np.random.default_rng(9)
    yb, yc = rng.random(80), rng.random(90)
    pb, pc = rng.choice([0.2, 1.0], 80), rng.choice([0.2, 1.0], 90)
    seg_b, seg_c = np.zeros(80, int), np.zeros(90, int)
    sb = drift.Sample(yb, seg_b, np.arange(80), 1 / pb)
    sc = drift.Sample(yc, seg_c, np.arange(80, 170), 1 / pc)
    d = drift.segment_change(sb, sc)
    want = float((yc / pc).sum() / (1 / pc).sum() - (yb / pb).sum() / (1 / pb).sum())
    assert d.estimate == pytest.approx(want, rel=1e-12) and d.total == pytest.approx(want)
    # equal weights are the plain change, to rounding
    plain = drift.segment_change(drift.Sample(yb, seg_b, np.arange(80)),
                                 drift.Sample(yc, seg_c, np.arange(80, 170)))  # fmt: skip
    equal = drift.segment_change(
        drift.Sample(yb, seg_b, np.arange(80), np.full(80, 4.0)),
        drift.Sample(yc, seg_c, np.arange(80, 170), np.full(90, 4.0)),
    )
    for a, b in (
        (plain.estimate, equal.estimate),
        (plain.low, equal.low),
        (plain.pvalue, equal.pvalue),
    ):
        assert a == pytest.approx(b, rel=1e-9)
