"""Does paced, per-series sampling keep to the budget all day and keep every weekly mean
unbiased? A simulated week of traffic in 10-minute steps through `ragmon.core.sampling.plan`
(re-planned every 30 minutes: the service does it every minute, so its forecast errors are
corrected sooner) and `ragmon.core.weighted.hajek`.

    nice python -m tests.stats.sampling_sim              # 300 replications per case (~10 min)
    nice python -m tests.stats.sampling_sim --reps 50    # quicker, noisier

Model. Three series of 40, 5,000 and 500,000 events a week, busiest at 15:00 UTC and quietest
at 03:00 (traffic 0.4x to 1.6x its mean), with Poisson noise. An event's measure (an nDCG-like
value in [0, 1], sd about 0.28) is drawn from a Beta whose mean moves with the time of day:
0.10 above the series' mean at midnight, 0.10 below it at noon. Judging costs the same for every
event (10 passages at USD 0.00135). The budget is 5 % of what judging every event would cost on
an average day. A day of traffic before the week gives the forecast its first profile. Events
are judged by drain jobs of `JOB` events: the budget is checked before each job (so spend can
pass it by at most one job's calls), and an event chosen after the money is gone fails
unjudged (`budget_exhausted`), as in the service.

Cases. `cliff` is today's default: every event judged until the budget is gone (the weekly
mean is the plain mean of the judged events, the report's interval). `uniform` is
RAGMON_SAMPLE_RATE = 0.05, the budget's share, for every series. `paced` is the budget alone
(no target), `targeted` the recommended setting: RAGMON_TARGET_HALF_WIDTH = 0.03,
RAGMON_MIN_JUDGED_PER_DAY = 10 and the budget; `tight` asks +/- 0.01 of a budget of 0.5 %,
which cannot pay for it, so the budget holds every target back. Every case but `cliff` reports
the Hajek (weighted) mean and its 95 % interval for the week's events.

Prints per case: the most a day's spend passed the budget (in jobs' calls), the earliest
hour the budget ran out on any day, the share of days it ran out before 23:00; per series the
events judged per week, how often the interval held the true weekly mean, its mean
half-width, the mean error (bias), weeks with too few judged events for a verdict (< 30, the
weekly report's minimum) and weeks with no estimate at all. Then the cost of +/- 0.03 per
series: what the targets spent against the uniform rate that gives every series the same.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ragmon.core.drift import clustered_mean
from ragmon.core.sampling import HOURS, Policy, Traffic, plan
from ragmon.core.weighted import hajek, half_width, rate_for
from ragmon.report.compare import MIN_EVENTS

SERIES = {"small": 40, "medium": 5_000, "large": 500_000}  # events a week
MEAN = {"small": 0.55, "medium": 0.6, "large": 0.65}
SWING = 0.10  # the mean's swing with the time of day
KAPPA = 2.0  # Beta concentration: sd ~ sqrt(m (1 - m) / 3)
COST = 10 * 0.00135  # USD per judged event
STEP_S = 600
STEPS_PER_DAY = 86_400 // STEP_S
DAYS = 7
REPLAN = 3  # steps between plans: every 30 minutes (the service: every minute)
JOB = 50  # events a drain job judges between budget checks
BUDGET_SHARE = 0.05


@dataclass(frozen=True)
class Case:
    name: str
    budget: float  # USD a day
    rate: float = 1.0  # fixed rate (cliff, uniform)
    policy: Policy | None = None  # planned cases


def cases(budget: float) -> list[Case]:
    return [
        Case("cliff", budget),
        Case("uniform", budget, rate=BUDGET_SHARE),
        Case("paced", budget, policy=Policy(budget=budget)),
        Case("targeted", budget, policy=Policy(0.03, min_per_day=10, budget=budget)),
        Case("tight", budget / 10, policy=Policy(0.01, min_per_day=10, budget=budget / 10)),
    ]


def shape(t_s: np.ndarray | float) -> np.ndarray | float:
    """Traffic relative to its mean at time `t_s` (seconds): 1.6x at 15:00, 0.4x at 03:00."""
    return 1.0 + 0.6 * np.sin(2 * np.pi * ((np.asarray(t_s) / 3600.0) % 24 - 9.0) / 24)


def quality(series: str, t_s: np.ndarray) -> np.ndarray:
    """The mean measure at times `t_s`: highest at midnight, lowest at noon."""
    return MEAN[series] + SWING * np.cos(2 * np.pi * (t_s / 3600.0 % 24) / 24)


def daily_cost() -> float:
    return sum(SERIES.values()) / DAYS * COST


@dataclass
class Tally:
    covered: dict[str, list[bool]] = field(default_factory=dict)
    error: dict[str, list[float]] = field(default_factory=dict)
    half: dict[str, list[float]] = field(default_factory=dict)
    judged: dict[str, list[int]] = field(default_factory=dict)
    events: dict[str, list[int]] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    over_jobs: list[float] = field(default_factory=list)  # per day: (spend - budget) / job
    spend: list[float] = field(default_factory=list)  # per day: spend / budget
    runout_h: list[float] = field(default_factory=list)  # per day: hour it ran out (24: never)

    def add(self, key: str, name: str, value: object) -> None:
        getattr(self, key).setdefault(name, []).append(value)


def draw(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per series: events per step (the day before the week first), then every event's measure
    and a uniform draw deciding its sampling, in time order (the week's events only)."""
    steps = np.arange(-STEPS_PER_DAY, DAYS * STEPS_PER_DAY)
    mid = steps * STEP_S + STEP_S / 2
    out = {}
    for s, per_week in SERIES.items():
        counts = rng.poisson(per_week / (DAYS * STEPS_PER_DAY) * shape(mid))
        week = counts[STEPS_PER_DAY:]
        m = np.repeat(quality(s, mid[STEPS_PER_DAY:]), week)
        y = rng.beta(m * KAPPA, (1 - m) * KAPPA)
        out[s] = (counts, y, rng.random(len(y)))
    return out


def one_week(rng: np.random.Generator, case: Case, tally: Tally) -> None:
    """One replication: a day of traffic to learn from, then the week."""
    budget = case.budget
    drawn = draw(rng)
    hours = {s: [0.0] * HOURS for s in SERIES}
    judged: dict[str, list[tuple[np.ndarray, float]]] = {s: [] for s in SERIES}
    moments = {s: [0.0, 0.0, 0.0] for s in SERIES}  # weighted sum of 1, y, y^2 of the judged
    at = dict.fromkeys(SERIES, 0)  # the next event of each series
    rates = {s: case.rate for s in SERIES}
    spent, day_runout = 0.0, 24.0
    job = JOB * COST
    for i in range((DAYS + 1) * STEPS_PER_DAY):
        step = i - STEPS_PER_DAY
        now_s = (step * STEP_S) % 86_400
        if now_s == 0:
            if step > 0:
                tally.over_jobs.append((spent - budget) / job)
                tally.spend.append(spent / budget)
                tally.runout_h.append(day_runout)
            spent, day_runout = 0.0, 24.0
        if now_s % 3600 == 0:
            for s in SERIES:
                hours[s] = [*hours[s][1:], 0.0]
        if case.policy is not None and step >= 0 and step % REPLAN == 0:
            traffic = {s: Traffic(hours[s], _sd(moments[s]), COST) for s in SERIES}
            rates = plan(traffic, case.policy, spent, now_s).rates
        for s in SERIES:
            counts, y_all, u_all = drawn[s]
            n = int(counts[i])
            hours[s][-1] += n
            if step < 0 or n == 0:
                continue
            lo, at[s] = at[s], at[s] + n
            p = rates[s]
            if p <= 0:
                continue
            chosen = y_all[lo : lo + n][u_all[lo : lo + n] < p]
            if not len(chosen):
                continue
            # drain jobs of JOB events, the budget checked before each one
            jobs_allowed = math.ceil(max(0.0, budget - spent) / job)
            done = chosen[: jobs_allowed * JOB]
            if len(done) < len(chosen) and day_runout == 24.0:
                day_runout = now_s / 3600
            spent += len(done) * COST
            judged[s].append((done, p))
            moments[s][0] += len(done) / p
            moments[s][1] += float(done.sum()) / p
            moments[s][2] += float((done**2).sum()) / p
    tally.over_jobs.append((spent - budget) / job)
    tally.spend.append(spent / budget)
    tally.runout_h.append(day_runout)
    for s in SERIES:
        y_all = drawn[s][1]
        truth = float(y_all.mean())
        y = np.concatenate([v for v, _ in judged[s]] or [np.zeros(0)])
        probs = np.concatenate([np.full(len(v), p) for v, p in judged[s]] or [np.zeros(0)])
        tally.add("judged", s, len(y))
        tally.add("events", s, len(y_all))
        if len(y) < 2:
            tally.missing[s] = tally.missing.get(s, 0) + 1
            tally.add("covered", s, False)
            continue
        if case.policy is None and case.rate == 1.0:
            iv = clustered_mean(y, np.arange(len(y)))  # today's report: the plain mean
        else:
            iv = hajek(y, probs)
        tally.add("covered", s, iv.low <= truth <= iv.high)
        tally.add("error", s, iv.estimate - truth)
        tally.add("half", s, (iv.high - iv.low) / 2)


def _sd(m: list[float]) -> float:
    """The weighted sd of a series' judged values so far (the prior until 30 are judged)."""
    w, s1, s2 = m
    if w <= 0:
        return 0.3
    mean = s1 / w
    return math.sqrt(max(1e-6, s2 / w - mean * mean))


def run(case: Case, reps: int, seed: int) -> Tally:
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(reps):
        one_week(rng, case, tally)
    return tally


def report(case: Case, tally: Tally, seconds: float) -> list[str]:
    over = max(tally.over_jobs)
    early = min(tally.runout_h)
    before_23 = float(np.mean(np.array(tally.runout_h) < 23))
    lines = [
        f"{case.name} (USD {case.budget:.2f}/day): spend/budget {np.mean(tally.spend):.1%} "
        f"a day, at most "
        f"{max(0.0, over):.2f} job over; earliest run-out "
        f"{'never' if early >= 24 else f'{early:05.2f} h'}; days run out before 23:00 "
        f"{before_23:.1%} ({seconds:.0f} s)"
    ]
    for s in SERIES:
        n = np.array(tally.judged[s])
        cov = float(np.mean(tally.covered[s]))
        half = float(np.mean(tally.half.get(s, [math.nan])))
        bias = float(np.mean(tally.error.get(s, [math.nan])))
        few = float(np.mean(n < MIN_EVENTS))
        whole = float(np.mean(np.array(tally.events[s]) < MIN_EVENTS))
        lines.append(
            f"  {s:<7} judged/week {n.mean():9.1f}  coverage {cov:6.1%}  +/- {half:.4f}  "
            f"bias {bias:+.4f}  weeks < {MIN_EVENTS} judged {few:.1%} (< {MIN_EVENTS} events "
            f"{whole:.1%})  "
            f"no estimate {tally.missing.get(s, 0)}"
        )
    return lines


def uniform_for(target: float, series: list[str], sd: float = 0.28) -> tuple[float, float]:
    """The uniform rate that gives each of `series` +/- `target` over a week (or judges it
    whole when it cannot), and its weekly cost over all the traffic."""
    rate = max(rate_for(sd, SERIES[s], target) for s in series)
    return rate, rate * sum(SERIES.values()) * COST


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="replications per case")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--only", help="the cases whose name contains this")
    args = parser.parse_args(argv)
    budget = BUDGET_SHARE * daily_cost()
    print(
        f"budget USD {budget:.2f}/day (5 % of judging all: {daily_cost():.2f}); "
        f"{args.reps} replications; a job = {JOB} events",
        flush=True,
    )
    targeted_cost = None
    for i, case in enumerate(cases(budget)):
        if args.only and args.only not in case.name:
            continue
        start = time.perf_counter()
        tally = run(case, args.reps, args.seed + i)
        for line in report(case, tally, time.perf_counter() - start):
            print(line, flush=True)
        if case.name == "targeted":
            targeted_cost = sum(np.mean(tally.judged[s]) for s in SERIES) * COST
    if targeted_cost:
        print(f"+/- 0.03 per series per week: the targets cost USD {targeted_cost:.2f}/week")
        for names in (list(SERIES), ["medium", "large"]):
            rate, cost = uniform_for(0.03, names)
            print(
                f"  a uniform rate giving {', '.join(names)} the same: {rate:.1%}, "
                f"USD {cost:.2f}/week ({cost / targeted_cost:.0f}x)"
            )
    for s, n in SERIES.items():
        r = rate_for(0.28, n, 0.03)
        print(f"  {s:<7} target rate {r:.2%} (+/- {half_width(0.28, n, r):.3f} at sd 0.28)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
