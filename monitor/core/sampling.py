"""How much of each series to judge: per-series precision targets, a daily minimum, and a budget
paced to last the UTC day. Pure functions; the service calls `plan` every minute with each
series' hourly traffic and the day's spend, and judges each event with its series' rate.

- **Target.** A series' rate is the smallest that pins its weekly mean to +/- `target_half_width`
  (`weighted.rate_for`: 1 / (1 + N h^2 / (z sd)^2), N its events in a week): the number judged
  grows with the precision wanted, not with traffic.
- **Minimum.** Every series gets at least `min_per_day` judged events a day (its rate is at
  least that over its events a day, at most 1), so a small series is never invisible.
- **Budget.** The rest of the day's traffic is forecast per hour from yesterday's same hours,
  scaled by how today's last hours compare with yesterday's (`rest_of_day`); the rates are then
  the largest that keep the forecast spend within what is left of the budget. Re-planned every
  minute, the forecast is corrected as the day goes. When the budget cannot pay for every
  target, every series keeps its minimum and the targets are scaled down together; when it
  cannot even pay for the minimums, they are scaled down together.
Without a target every series wants rate 1: the budget alone sets one rate for all.
With a fixed rate (RAGMON_SAMPLING=fixed) the plan is a forecast only: the rates stay, and the
pace and run-out say when the budget would stop the day's judging.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ragmon.core.weighted import rate_for

HOURS = 48  # hourly counts a series keeps: yesterday's profile and today's
LOOKBACK = 3  # hours of today compared with the same hours of yesterday
DEFAULT_SD = 0.3  # sd of one event's measure before a series has enough judged events
MIN_PROFILE = 20.0  # events yesterday's compared hours need before their shape is trusted
DAY_S = 86_400.0
MIN_AGE_H = 10 / 3600  # a series' traffic is never read over less than this
MIN_RATE = 1e-6  # no planned rate is lower: no event is stored with probability 0


@dataclass(frozen=True)
class Traffic:
    """One series as the planner sees it: events received per UTC hour over the `HOURS` hours
    ending with the current one (the last one so far), the standard deviation of one event's
    measure, and the forecast cost of judging one of its events (USD)."""

    hours: Sequence[float]
    sd: float = DEFAULT_SD
    cost: float = 0.0
    age_h: float | None = None  # hours since the series was first counted (None: long ago)

    def span(self, hours: float) -> float:
        """`hours`, or less for a series younger than that: its rate is its traffic over the
        time it has existed, never diluted by the hours before it (a new series' empty
        history read as a quiet series would judge it whole)."""
        if self.age_h is None:
            return hours
        return max(MIN_AGE_H, min(hours, self.age_h))

    def per_hour(self, frac: float) -> float:
        """Mean events per hour over the counts kept (the current hour counted as `frac`)."""
        span = self.span(len(self.hours) - 1 + max(frac, 1e-9))
        return sum(self.hours) / span if span > 0 else 0.0


@dataclass(frozen=True)
class Policy:
    target_half_width: float = 0.0  # 0: no target (judge as much as the budget allows)
    min_per_day: float = 0.0
    budget: float = 0.0  # USD per UTC day; 0: none
    reserve: float = 0.02  # share of the rest of the budget held back against forecast errors
    conf: float = 0.95
    # RAGMON_SAMPLING=fixed: every series at this rate whatever the budget, which then only
    # forecasts (pace, run-out: when the day's judging would stop)
    fixed: float | None = None


@dataclass(frozen=True)
class Plan:
    """Rates per series, the day's forecast spend at those rates and when the budget would run
    out (seconds after the day's midnight; None: not today)."""

    rates: dict[str, float]
    wanted: dict[str, float]  # what targets and minimums ask before the budget
    spent: float
    forecast_spend: float
    pace: float  # forecast_spend / budget (0 without a budget); 1 = the budget exactly
    runout_s: float | None
    limited: bool = False  # the budget holds some series below what it wants
    rest: dict[str, list[float]] = field(default_factory=dict)  # forecast events per hour left


def rest_of_day(hours: Sequence[float], now_s: float, age_h: float | None = None) -> list[float]:
    """Forecast events for the rest of the current hour, then each later hour of the UTC day.

    `hours` are the last `HOURS` hourly counts, the last one the current hour so far; `now_s`
    seconds since midnight; `age_h` the series' age (`Traffic.age_h`). Yesterday's counts for
    the same hours, times (today's last `LOOKBACK` hours + 1) / (the same hours yesterday + 1);
    when yesterday's compared hours hold fewer than `MIN_PROFILE` events, today's recent rate
    (over the time the series has existed), flat."""
    h = list(hours)[-HOURS:]
    h = [0.0] * (HOURS - len(h)) + h
    hour = int(now_s // 3600) % 24
    frac = (now_s % 3600) / 3600
    cur = HOURS - 1
    back = cur - 24
    today = h[cur] + sum(h[cur - LOOKBACK + 1 : cur])
    before = h[back] * frac + sum(h[back - LOOKBACK + 1 : back])
    later = 23 - hour
    if before >= MIN_PROFILE:
        ratio = (today + 1.0) / (before + 1.0)
        return [ratio * h[back] * (1 - frac)] + [ratio * h[back + j] for j in range(1, later + 1)]
    rate = today / Traffic(h, age_h=age_h).span(LOOKBACK - 1 + max(frac, 1e-9))
    return [rate * (1 - frac)] + [rate] * later


def wanted_rate(t: Traffic, policy: Policy, frac: float) -> float:
    """The rate a series asks for before the budget: its target's, at least its minimum's
    (the fixed rate, with one)."""
    if policy.fixed is not None:
        return policy.fixed
    per_day = 24 * t.per_hour(frac)
    target = (
        rate_for(t.sd, 7 * per_day, policy.target_half_width, policy.conf)
        if policy.target_half_width > 0
        else 1.0
    )
    return min(1.0, max(target, minimum_rate(per_day, policy.min_per_day)))


def minimum_rate(per_day: float, min_per_day: float) -> float:
    if min_per_day <= 0:
        return 0.0
    return 1.0 if per_day <= min_per_day else min_per_day / per_day


def plan(series: Mapping[str, Traffic], policy: Policy, spent: float, now_s: float) -> Plan:
    """The rates for the rest of the day (`now_s` seconds after midnight UTC, `spent` USD so
    far today)."""
    frac = (now_s % 3600) / 3600
    rest = {s: rest_of_day(t.hours, now_s, t.age_h) for s, t in series.items()}
    want = {s: wanted_rate(t, policy, frac) for s, t in series.items()}
    floor = {
        s: min(want[s], minimum_rate(24 * t.per_hour(frac), policy.min_per_day))
        for s, t in series.items()
    }
    cost_each = {s: sum(rest[s]) * t.cost for s, t in series.items()}

    def cost(rates: Mapping[str, float]) -> float:
        return sum(rates[s] * cost_each[s] for s in series)

    if policy.budget <= 0:
        return Plan(want, want, spent, spent + cost(want), 0.0, None, False, rest)
    left = max(0.0, policy.budget - spent) * (1.0 - policy.reserve)
    rates = dict(want) if policy.fixed is not None else _fit(want, floor, cost, left)
    forecast = spent + cost(rates)
    runout = _runout(series, rates, rest, policy.budget - spent, now_s)
    limited = any(rates[s] < want[s] - 1e-12 for s in series)
    return Plan(rates, want, spent, forecast, forecast / policy.budget, runout, limited, rest)


def _fit(
    want: Mapping[str, float],
    floor: Mapping[str, float],
    cost: Callable[[Mapping[str, float]], float],
    left: float,
) -> dict[str, float]:
    """The largest theta in [0, 1] with cost(max(floor, theta want)) <= left; below the floors'
    cost, the floors scaled down to fit."""
    if cost(want) <= left:
        return dict(want)
    base = cost(floor)
    if base >= left:
        k = left / base if base > 0 else 0.0
        return {s: max(MIN_RATE, floor[s] * k) for s in want}
    lo, hi = 0.0, 1.0
    for _ in range(40):  # theta to 1e-12
        mid = (lo + hi) / 2
        if cost({s: max(floor[s], mid * want[s]) for s in want}) <= left:
            lo = mid
        else:
            hi = mid
    return {s: max(floor[s], lo * want[s]) for s in want}


def _runout(
    series: Mapping[str, Traffic],
    rates: Mapping[str, float],
    rest: Mapping[str, list[float]],
    left: float,
    now_s: float,
) -> float | None:
    """When the spend at `rates` would reach `left`, by the hourly forecast (linear within an
    hour); None when not before midnight."""
    if left <= 0:
        return now_s
    hour_start = math.floor(now_s / 3600) * 3600
    spans = [(now_s, hour_start + 3600)]
    spans += [(hour_start + 3600 * j, hour_start + 3600 * (j + 1)) for j in range(1, 24)]
    acc = 0.0
    for i, (a, b) in enumerate(spans):
        if a >= DAY_S * (math.floor(now_s / DAY_S) + 1):
            break
        step = sum(
            rates[s] * t.cost * (rest[s][i] if i < len(rest[s]) else 0.0) for s, t in series.items()
        )
        if step > 0 and acc + step >= left:
            return a + (b - a) * (left - acc) / step
        acc += step
    return None


@dataclass(frozen=True)
class Rates:
    """The inclusion probability of a new event by its series (`app|index|retriever|segment`),
    `default` for a series the plan does not know yet (until the next plan, seconds).

    Paced: within one planning interval a series may have about `cap` events chosen (its app
    `2 * cap`), whatever its traffic turns out to be. `seen` holds this interval's events so
    far, by series and by app (`APP_MARK` + app): how many, and the sum of their probabilities
    (the events expected to be chosen). Once that sum reaches the cap, the n-th event's
    probability is at most `cap / n^2`, so a new busy series' first seconds, before any plan
    has seen it, cost about the cap and one event more, never its traffic; a quiet series of a
    busy app keeps its rate while the app's chosen events are few. `cap` None: not paced."""

    by_series: Mapping[str, float] = field(default_factory=dict)
    default: float = 1.0
    cap: float | None = None
    seen: Mapping[str, tuple[int, float]] = field(default_factory=dict)

    def of(self, series: str) -> float:
        return self.by_series.get(series, self.default)

    def pacer(self) -> Callable[[str, str], float]:
        """The probability of each next event of a request, by series and app, in order."""
        if self.cap is None:
            return lambda series, app: self.of(series)
        cap, seen = self.cap, dict(self.seen)

        def paced(key: str, rate: float, limit: float) -> float:
            n, chosen = seen.get(key, (0, 0.0))
            return rate if chosen < limit else min(rate, limit / (n + 1) ** 2)

        def next_rate(series: str, app: str) -> float:
            rate = self.of(series)
            p = paced(APP_MARK + app, paced(series, rate, cap), 2 * cap)
            p = max(p, min(rate, MIN_RATE))
            for key in (series, APP_MARK + app):
                count_chosen(seen, key, 1, p)
            return p

        return next_rate


APP_MARK = "app:"  # `Rates.seen`'s per-app counts, beside the series' (`app|...`)
K = TypeVar("K")


def count_chosen(seen: dict[K, tuple[int, float]], key: K, n: int, p: float) -> None:
    """Add `n` events whose probabilities sum to `p` to `seen[key]` (`Rates.seen`'s pairs)."""
    had, chosen = seen.get(key, (0, 0.0))
    seen[key] = (had + n, chosen + p)
