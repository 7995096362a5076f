"""Is people's sample a random draw of the judged events? The checks of `ragmon.core.draws` and
the estimates they withhold (`ragmon.core.reviews.estimates`)."""

from __future__ import annotations

import numpy as np
import pytest

from ragmon.core.corrected import GradedEvent
from ragmon.core.draws import identities, judge_values
from ragmon.core.measures import DEFAULT_PARAMS
from ragmon.core.reviews import estimates

K = 5


def _window(seed: int, events: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """(people's grades, the judge's), one row an event: grades of one event move together."""
    rng = np.random.default_rng(seed)
    latent = (
        1.0 - 0.25 * np.arange(K) + rng.normal(0, 0.8, (events, 1)) + rng.normal(0, 1, (events, K))
    )
    judge = latent + rng.normal(0, 0.6, (events, K))
    cut = np.array([0.6, 1.4, 2.2])
    return np.searchsorted(cut, latent), np.searchsorted(cut, judge)


def _events(human: np.ndarray, judge: np.ndarray, graded: set[int], ids: list[str] | None = None):
    ids = ids or ["m/p/v1"] * len(judge)
    return [
        GradedEvent(judge[i].tolist(), human[i].tolist() if i in graded else [None] * K, K,
                    judge_id=ids[i])
        for i in range(len(judge))
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_a_random_draw_is_estimated(seed: int) -> None:
    human, judge = _window(seed)
    graded = set(np.random.default_rng(seed + 10).choice(len(judge), 30, replace=False).tolist())
    got = estimates(_events(human, judge, graded), DEFAULT_PARAMS)
    for m, c in got.items():
        assert c.random_draw is True, (m, c.reason)
        assert c.estimate is not None, m


@pytest.mark.parametrize("seed", range(3))
def test_people_grading_only_events_that_look_bad_are_flagged(seed: int) -> None:
    # The estimates used to give a "corrected" nDCG with 11-12 % coverage here, and no warning.
    human, judge = _window(seed)
    mean = judge.mean(axis=1)
    bad = np.flatnonzero(mean < np.median(mean))
    graded = set(np.random.default_rng(seed).choice(bad, 30, replace=False).tolist())
    got = estimates(_events(human, judge, graded), DEFAULT_PARAMS)
    for m, c in got.items():
        assert c.random_draw is False and c.estimate is None and c.human_only is None, m
        assert c.reason is not None and c.reason.startswith("not a random draw: the judge's")
        assert c.judge_only is not None  # the judge's own mean is still shown


def test_grades_only_before_a_judge_change_are_flagged() -> None:
    human, judge = _window(4)
    later = np.minimum(judge + 1, 3)  # the new identity over-grades
    half = len(judge) // 2
    judged = np.concatenate([judge[:half], later[half:]])
    ids = ["m/p/v1"] * half + ["m/p/v2"] * (len(judge) - half)
    graded = set(np.random.default_rng(4).choice(half, 30, replace=False).tolist())
    got = estimates(_events(human, judged, graded, ids), DEFAULT_PARAMS)
    c = got["precision"]
    assert c.random_draw is False and c.estimate is None
    assert c.reason is not None and "the judge changed in the window" in c.reason
    assert "m/p/v2: 0% of graded, 50% of judged" in c.reason


def test_nothing_graded_is_not_judged_random_or_not() -> None:
    human, judge = _window(5, 50)
    got = estimates(_events(human, judge, set()), DEFAULT_PARAMS)
    assert all(c.random_draw is None and c.estimate is None for c in got.values())


def test_the_checks_p_values() -> None:
    same = np.array([0.0, 1.0] * 20)
    c = np.arange(40)
    assert judge_values(same, c, same, c + 40).p == pytest.approx(1.0)
    low, high = np.zeros(20), np.ones(40)
    assert judge_values(low, c[:20], high, c).p < 1e-6
    assert identities(["a"] * 30, ["a"] * 500).p == 1.0
    assert identities(["a"] * 30, ["a"] * 250 + ["b"] * 250).p < 1e-6
    assert identities(["a"] * 15 + ["b"] * 15, ["a"] * 250 + ["b"] * 250).p > 0.5
