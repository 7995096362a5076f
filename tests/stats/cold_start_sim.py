"""A new busy series' first hour, simulated: the planner and the API's pacing as they run
(`ragmon.core.sampling.plan`, `Rates.pacer`, `ragmon.api.sampler.cold_cap`), on traffic shaped
like real traffic, many times (issue 43; figures in docs/sampling.md).

    .venv/bin/python -m tests.stats.cold_start_sim [--reps 300] [--seed 1]

Each replication: an old series of one app with two days of hourly traffic (a daily cycle,
0.5-5 events/s), then at a random time of day a new series of the same app at about 100
events/s (Poisson arrivals, the rate drifting +/-30 % and one retry burst of 3x for a minute).
The daily budget is 2-5 USD, an event costs 0.0005-0.003 USD to judge. Second by second:
each event takes its paced probability and is chosen with it; the plan is made every minute,
and 5 s after a series it does not know has sent (as `Sampler.refresh`), from the hourly
counts and each series' age. Reported: the new series' first-hour spend over its allowance
(the hour's share of the budget, 1/24, plus one planning interval's cap), the smallest
probability given, and the old series' planned rate after the hour over before.
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import replace

from ragmon.api.sampler import PLAN_S, READ_S, cold_cap
from ragmon.core.sampling import APP_MARK, HOURS, Policy, Rates, Traffic, plan
from ragmon.settings import Settings

OLD, NEW = "app|default|old|default", "app|default|new|default"


def replicate(rng: random.Random) -> dict[str, float]:
    budget = rng.uniform(2.0, 5.0)
    cost = rng.uniform(0.0005, 0.003)
    settings = Settings(daily_budget_usd=budget)
    start = rng.uniform(0, 23) * 3600  # seconds after midnight
    old_rate = rng.uniform(0.5, 5.0)
    hours: dict[str, list[float]] = {OLD: [], NEW: [0.0] * HOURS}
    for h in range(HOURS - 1, -1, -1):  # the old series' last two days, a daily cycle
        t = start - h * 3600
        hours[OLD].append(old_rate * 3600 * (1 + 0.5 * math.sin(2 * math.pi * t / 86400)))
    hours[OLD][-1] *= (start % 3600) / 3600
    born = start
    policy = Policy(settings.target_half_width, settings.min_judged_per_day, budget)

    def make_plan(now: float, spent: float) -> Rates:
        age = (now - born) / 3600
        series = {OLD: Traffic(hours[OLD], cost=cost)}
        if sum(hours[NEW]):
            series[NEW] = Traffic(hours[NEW], cost=cost, age_h=age)
        p = plan(series, policy, spent, now % 86400)
        return Rates(p.rates, 1.0, cold_cap(settings, cost))

    rates = make_plan(start, 0.0)
    before = rates.of(OLD)
    planned_at, spent_new, spent_all, lowest = start, 0.0, 0.0, 1.0
    seen: dict[str, tuple[int, float]] = {}
    interval = int(start // PLAN_S)
    drift = rng.uniform(0.7, 1.3)
    burst = rng.uniform(0, 3540)
    hour = int(start // 3600)
    for s in range(3600):
        now = start + s
        if int(now // 3600) != hour:  # a new hour: the counts move by one
            hour = int(now // 3600)
            for counts in hours.values():
                counts.pop(0)
                counts.append(0.0)
        if int(now // PLAN_S) != interval:  # as `Sampler._roll`
            interval = int(now // PLAN_S)
            seen = {k: v for k, v in seen.items() if k == NEW and NEW not in rates.by_series}
        unplanned = NEW not in rates.by_series and s > 0
        if now - planned_at >= (READ_S if unplanned else PLAN_S):
            rates, planned_at = make_plan(now, spent_all), now
        level = 100 * drift * (3 if burst <= s < burst + 60 else 1)
        arrivals = [(NEW, 1)] * _poisson(rng, level) + [(OLD, 1)] * _poisson(rng, old_rate)
        rng.shuffle(arrivals)
        pace = replace(rates, seen=seen).pacer()
        for series, _ in arrivals:
            p = pace(series, "app")
            lowest = min(lowest, p)
            for key in (series, APP_MARK + "app"):
                n, chosen = seen.get(key, (0, 0.0))
                seen[key] = (n + 1, chosen + p)
            if rng.random() < p:
                spent_all += cost
                if series == NEW:
                    spent_new += cost
            hours[series][-1] += 1
    after = make_plan(start + 3600, spent_all).of(OLD)
    cap = cold_cap(settings, cost) or 0.0
    allowance = budget / 24 + cap * cost
    return {"share": spent_new / allowance, "lowest": lowest, "old": after / before}


def _poisson(rng: random.Random, lam: float) -> int:
    if lam > 30:  # the normal approximation: this many draws a second
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    n, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p < limit:
            return n
        n += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    rows = [replicate(rng) for _ in range(args.reps)]
    shares = sorted(r["share"] for r in rows)
    olds = sorted(r["old"] for r in rows)

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    print(f"{args.reps} replications (seed {args.seed})")
    print(f"first-hour spend of the new series / allowance: median {q(shares, 0.5):.3f}, "
          f"p95 {q(shares, 0.95):.3f}, max {shares[-1]:.3f}; "
          f"within the allowance: {sum(s <= 1 for s in shares)}/{len(shares)}")  # fmt: skip
    print(f"smallest probability given: {min(r['lowest'] for r in rows):.3g}")
    print(f"old series' rate after / before: min {olds[0]:.3f}, median {q(olds, 0.5):.3f}, "
          f"max {olds[-1]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
