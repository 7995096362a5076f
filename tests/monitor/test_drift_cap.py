"""The cap on one question's weight in a change, and intervals cut to a measure's range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragmon.core import drift


def _sample(values: np.ndarray, clusters: np.ndarray) -> drift.Sample:
    return drift.Sample(values, np.zeros(len(values), int), clusters)


def test_one_topic_new_this_week_keeps_the_degrees_of_freedom() -> None:
    """A third of this week asks one question: uncapped it takes the effective degrees of
    freedom to about 1; capped, it weighs `CAP` average questions and the drop is found."""
    rng = np.random.default_rng(4)
    base = rng.normal(0.6, 0.2, 500)
    cur = np.concatenate([rng.normal(0.55, 0.2, 350), np.full(150, 0.1)])
    clusters_c = np.concatenate([np.arange(350) + 1000, np.full(150, 5000)])
    b, c = _sample(base, np.arange(500)), _sample(cur, clusters_c)
    plain = drift.segment_change(b, c)
    capped = drift.segment_change(b, c, cap=drift.CAP)
    assert plain.df < 2 and plain.pvalue > 0.05
    assert capped.df > 30 and capped.pvalue < 1e-3
    assert capped.estimate == pytest.approx(
        np.average(cur, weights=[1] * 350 + [drift.CAP * 500 / 351 / 150] * 150) - base.mean()
    )
    assert capped.total == plain.total == pytest.approx(cur.mean() - base.mean())
    assert capped.sd == pytest.approx(plain.sd, rel=0.5)
    # no question above the cap: the same change
    again = drift.segment_change(b, _sample(cur[:350], clusters_c[:350]), cap=drift.CAP)
    same = drift.segment_change(b, _sample(cur[:350], clusters_c[:350]))
    assert (again.estimate, again.low, again.pvalue) == pytest.approx(
        (same.estimate, same.low, same.pvalue)
    )


def test_the_cap_never_cuts_a_single_event_whatever_its_weight() -> None:
    w = np.array([20.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert drift.capped(w, np.arange(6), 1.0).tolist() == w.tolist()
    cut = drift.capped(np.ones(6), np.array([0, 0, 0, 0, 1, 2]), 1.0)
    assert cut.tolist() == pytest.approx([0.5] * 4 + [1.0, 1.0])  # 6 events / 3 clusters = 2


def test_intervals_are_cut_to_the_range() -> None:
    iv = drift.Interval(0.45, -0.159, 1.288, 500, 300, 1.1)
    assert (iv.within(0.0, 1.0).low, iv.within(0.0, 1.0).high) == (0.0, 1.0)
    assert iv.within(0.0, 1.0).estimate == 0.45
    ch = drift.Change(-0.2, -0.3, -1.4, 0.8, 0.5, 1.1, 0.2, 1)
    assert (ch.within(0.0, 1.0).low, ch.within(0.0, 1.0).high) == (-1.0, 0.8)
    assert ch.within(-1.0, math.inf).low == -1.4  # no upper bound: no cut
