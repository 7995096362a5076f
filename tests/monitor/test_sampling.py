"""The sampling planner and the weighted means (`ragmon.core.sampling`, `ragmon.core.weighted`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragmon.core.sampling import (
    HOURS,
    MIN_RATE,
    Policy,
    Traffic,
    minimum_rate,
    plan,
    rest_of_day,
)
from ragmon.core.weighted import effective_n, hajek, half_width, horvitz_thompson, rate_for

# ---- weighted means ---------------------------------------------------------------------------


def test_hajek_by_hand() -> None:
    # weights 1, 2, 4: (1*0.2 + 2*0.5 + 4*0.8) / 7
    got = hajek([0.2, 0.5, 0.8], [1.0, 0.5, 0.25])
    assert got.estimate == pytest.approx(4.4 / 7)
    assert got.n == 3
    assert horvitz_thompson([0.2, 0.5, 0.8], [1.0, 0.5, 0.25], population=7) == pytest.approx(
        4.4 / 7
    )
    assert effective_n([1.0, 0.5, 0.25]) == pytest.approx(49 / 21)


def test_equal_probabilities_give_the_plain_mean() -> None:
    y = [0.1, 0.4, 0.9, 0.3]
    assert hajek(y, [0.3] * 4).estimate == pytest.approx(np.mean(y))


def test_judged_whole_is_known_exactly_for_these_events_only() -> None:
    got = hajek([0.1, 0.7, 0.4], [1.0, 1.0, 1.0], finite=True)
    assert got.low == got.high == pytest.approx(0.4)
    process = hajek([0.1, 0.7, 0.4], [1.0, 1.0, 1.0])
    assert process.high - process.low > 0.5
    # the plain t interval when every event was judged
    assert process.se == pytest.approx(np.std([0.1, 0.7, 0.4], ddof=1) / math.sqrt(3))


def test_hajek_variance_by_hand() -> None:
    y, p = np.array([0.0, 1.0]), np.array([0.5, 0.25])
    w = 1 / p
    m = (w @ y) / w.sum()
    var = np.sum((1 - p) * (w * (y - m)) ** 2) / w.sum() ** 2
    got = hajek(y, p, finite=True)
    assert got.se == pytest.approx(math.sqrt(var), rel=1e-6)


def test_clusters_widen_repeated_values() -> None:
    rng = np.random.default_rng(3)
    y = np.repeat(rng.random(20), 10)
    p = np.full(200, 0.5)
    alone = hajek(y, p)
    grouped = hajek(y, p, clusters=np.repeat(np.arange(20), 10))
    assert grouped.high - grouped.low > 2 * (alone.high - alone.low)
    assert grouped.clusters == 20


def test_hajek_is_unbiased_under_unequal_probabilities() -> None:
    # good events judged always, poor ones at 0.1: the plain mean is far off, the weighted not
    rng = np.random.default_rng(7)
    y = rng.random(200_000)
    p = np.where(y > 0.5, 1.0, 0.1)
    keep = rng.random(len(y)) < p
    assert abs(y[keep].mean() - y.mean()) > 0.1
    got = hajek(y[keep], p[keep])
    assert got.low <= y.mean() <= got.high
    assert abs(got.estimate - y.mean()) < 0.005


@pytest.mark.parametrize("bad", [[0.0, 1.0], [0.5, 1.5], [-0.1, 1.0]])
def test_probabilities_must_be_in_range(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="inclusion probabilities"):
        hajek([0.1, 0.2], bad)


def test_rate_for_inverts_half_width() -> None:
    for n, h in ((500_000, 0.03), (5_000, 0.01), (1_000, 0.03)):
        r = rate_for(0.25, n, h)
        assert half_width(0.25, n, r) == pytest.approx(h, rel=1e-9)
    assert rate_for(0.25, 100, 0.0) == 1.0
    assert rate_for(0.25, 40, 0.03) == 1.0  # too small to reach it: judged whole
    assert half_width(0.25, 40, 1.0) == pytest.approx(1.96 * 0.25 / math.sqrt(40), rel=1e-4)
    # the figure: 1,000 judged of 500,000 pin a mean of sd 0.16 to about +/- 0.01
    assert half_width(0.16, 500_000, 1000 / 500_000) == pytest.approx(0.0099, abs=2e-4)


# ---- the planner ------------------------------------------------------------------------------


def flat(per_hour: float, sd: float = 0.3, cost: float = 1.0, now_s: float = 0.0) -> Traffic:
    frac = (now_s % 3600) / 3600
    return Traffic([per_hour] * (HOURS - 1) + [per_hour * frac], sd, cost)


def test_rest_of_day_flat() -> None:
    rest = rest_of_day([100.0] * 47 + [50.0], 6.5 * 3600)
    assert len(rest) == 18  # the rest of 06:00-07:00, then 07:00 .. 23:00
    assert rest[0] == pytest.approx(50.0, rel=0.02)
    assert sum(rest) == pytest.approx(1750.0, rel=0.02)


def test_rest_of_day_follows_yesterdays_shape_scaled_by_today() -> None:
    shape = [10.0 * (1 + h) for h in range(24)]  # quiet nights, busy evenings
    now_h = 8
    hours = shape + [2 * x for x in shape[: now_h + 1]]  # today runs at twice yesterday
    hours = hours[-HOURS:]
    hours[-1] = 2 * shape[now_h] * 0.0 + 1e-9  # the current hour has just begun
    rest = rest_of_day(hours, now_h * 3600.0)
    assert sum(rest) == pytest.approx(2 * sum(shape[now_h:]), rel=0.05)


def test_rest_of_day_without_history_uses_the_recent_rate() -> None:
    hours = [0.0] * 45 + [60.0, 60.0, 30.0]
    rest = rest_of_day(hours, 20.5 * 3600)
    assert sum(rest) == pytest.approx(60.0 * 3.5, rel=0.01)


def test_minimum_rate() -> None:
    assert minimum_rate(5.7, 10) == 1.0
    assert minimum_rate(1000, 10) == pytest.approx(0.01)
    assert minimum_rate(1000, 0) == 0.0


def test_no_budget_targets_only() -> None:
    series = {"big": flat(3000), "mid": flat(30), "small": flat(0.24)}
    p = plan(series, Policy(target_half_width=0.03, min_per_day=10), spent=0.0, now_s=3600)
    week = {s: 168 * t.per_hour(0.0) for s, t in series.items()}
    for s in ("big", "mid"):
        assert half_width(0.3, week[s], p.rates[s]) == pytest.approx(0.03, rel=1e-6)
    assert p.rates["small"] == 1.0  # 5.8 events a day < 10: all of them
    assert p.runout_s is None and not p.limited


def test_budget_sets_one_rate_without_a_target() -> None:
    series = {"a": flat(1000), "b": flat(10)}
    # the day's traffic is 24 * 1010 events at 1 USD each; a budget of 5 % of it
    budget = 0.05 * 24 * 1010
    p = plan(series, Policy(budget=budget, reserve=0.0), spent=0.0, now_s=0.0)
    assert p.rates["a"] == pytest.approx(p.rates["b"])
    assert p.rates["a"] == pytest.approx(0.05, rel=0.01)
    assert p.pace == pytest.approx(1.0, rel=0.01)
    assert p.runout_s is None or p.runout_s > 0.99 * 86_400  # spent to the last minute
    assert p.limited


def test_the_pace_is_corrected_as_the_day_goes() -> None:
    series = {"a": flat(1000, now_s=12 * 3600)}
    budget = 0.05 * 24 * 1000
    ahead = plan(series, Policy(budget=budget, reserve=0.0), spent=0.75 * budget, now_s=12 * 3600)
    behind = plan(series, Policy(budget=budget, reserve=0.0), spent=0.25 * budget, now_s=12 * 3600)
    assert ahead.rates["a"] == pytest.approx(0.025, rel=0.01)  # a quarter left for half a day
    assert behind.rates["a"] == pytest.approx(0.075, rel=0.01)


def test_minimums_come_before_targets() -> None:
    series = {"big": flat(10_000), "small": flat(1)}
    policy = Policy(target_half_width=0.005, min_per_day=24, budget=100.0, reserve=0.0)
    p = plan(series, policy, spent=0.0, now_s=0.0)
    assert p.rates["small"] == 1.0
    assert p.limited and p.rates["big"] < p.wanted["big"]
    assert sum(p.rates[s] * sum(p.rest[s]) for s in series) == pytest.approx(100.0, rel=1e-6)


def test_minimums_scaled_when_the_budget_cannot_pay_them() -> None:
    series = {"a": flat(100), "b": flat(100)}
    policy = Policy(min_per_day=240, budget=24.0, reserve=0.0)
    p = plan(series, policy, spent=0.0, now_s=0.0)
    # minimum rate 0.1 each = 480 USD a day; 24 USD pays a twentieth of it
    assert p.rates["a"] == pytest.approx(0.005) and p.rates["b"] == pytest.approx(0.005)


def test_runout_at_current_rates() -> None:
    series = {"a": flat(100)}
    p = plan(series, Policy(budget=2400.0), spent=1200.0, now_s=12 * 3600)
    assert p.runout_s is None  # all of it fits: 1200 left for 1200 events
    gone = plan(series, Policy(budget=1000.0), spent=1000.0, now_s=12 * 3600)
    # the budget is spent: the lowest rate, never 0 (no event stored with probability 0)
    assert gone.rates["a"] == MIN_RATE > 0 and gone.runout_s == 12 * 3600


def test_a_fixed_rate_is_kept_and_its_cliff_forecast() -> None:
    """RAGMON_SAMPLING=fixed: the budget does not lower the rate; the plan says when the day's
    judging would stop (100 events an hour at 1 USD, half judged, 600 USD left at noon: 12 h of
    traffic cost 600 at the full rate, 1,200 at this one, so the budget runs out 6 h later)."""
    series = {"a": flat(100), "b": flat(100)}
    policy = Policy(budget=1200.0, reserve=0.0, fixed=0.5)
    p = plan(series, policy, spent=600.0, now_s=12 * 3600)
    assert p.rates == {"a": 0.5, "b": 0.5} and not p.limited
    assert p.pace == pytest.approx((600 + 1200) / 1200)
    assert p.runout_s == pytest.approx(18 * 3600)
    assert plan(series, Policy(fixed=0.5), spent=0.0, now_s=0.0).pace == 0.0  # no budget
