"""False firings of the judge-free alerts on a week of dependent traffic, and how soon an index
outage fires the empty-result alerts and a change of score scale the top-score alert, through
the rules' arithmetic.

    nice python -m tests.stats.signal_alert_sim              # 20 series per case, 1 week
    nice python -m tests.stats.signal_alert_sim --series 4   # quicker
    nice python -m tests.stats.signal_alert_sim --rules before   # the rules before issue 46

Traffic is shaped as `tests.stats.traffic.Repeats`: questions arrive per minute (Poisson), each
asked 1 + Poisson(1) times about an hour apart, each ask retried 8 times within its minute with
probability 1 % (10 % when its answer is empty: one user retrying an empty query). Whether a
question's answer is empty, and its top score (N(10, 2^2)), belong to the question, so its asks
and retries repeat them; top scores follow a +/-5 % daily cycle. The counters are sampled once
a minute and evaluated every minute as deploy/prometheus/rules/ does it (groups
ragmon-signals and ragmon-signal-alerts; increase() over w minutes is the difference of the
samples w minutes apart, both ends included, as Prometheus 2.x reads aligned samples). A day
of traffic comes first (the rules' baseline window), then the week that is counted.
`tests/stats/test_signal_alert_sim.py` checks this arithmetic against promtool, minute by
minute, on one simulated outage; tests/test_signals_end_to_end.py runs the rules on the real
API's counters.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from tests.stats.traffic import Repeats, ask_times

DAY = 1440  # minutes
WEEK = 7 * DAY
# RagmonEmptyResultsHigh: 2 minutes with >= 60 events; RagmonEmptyResultsHighSlow: 15 minutes or
# an hour with >= 30 events, for series under 30 events a minute over the hour (ragmon-signals)
EMPTY_MARGIN = 0.05  # the window's share above the day's by at least 5 points
EMPTY_FAST = (2, 60, 5.5)  # window (minutes), events in it at least, z
EMPTY_SLOW = ((15, 30, 5.0), (60, 30, 5.0))
SLOW_BELOW = 1800  # events in the last hour under which the slow companion applies
STOP_BEFORE = 120  # RagmonSeriesStopped: events in the hour before the last 10 minutes
STOP_FOR = 5  # its `for`, minutes
SCORE_MEAN, SCORE_SD = 10.0, 2.0
CYCLE = 0.05  # top scores' daily cycle: x (1 + 0.05 sin(2 pi t / day))
REPEATS = Repeats()
EMPTY_RETRY = 0.1  # an empty answer's ask is retried `REPEATS.burst` times with this probability


@dataclass(frozen=True)
class Rules:
    """The parameters that changed with issue 46: empty results counted per event or per
    distinct query (`ragmon_signal_empty_queries_total`), the top-score test one- or two-sided."""

    distinct: bool = True
    shift_z: float = 7.0  # RagmonTopScoreShift: standard errors of the difference
    shift_margin: float = 0.10  # and this share of the day's mean
    two_sided: bool = True
    shift_for: int = 15  # minutes
    shift_min: int = 30  # RAGMON_ALERT_MIN_EVENTS


NOW = Rules()
BEFORE = Rules(distinct=False, shift_z=5.0, shift_margin=0.05, two_sided=False)


@dataclass(frozen=True)
class Case:
    rate: float  # events a minute
    empty: float  # share of questions answered empty


@dataclass
class Counters:
    """Cumulative counters sampled each minute (index 0: before any event)."""

    events: np.ndarray
    empty: np.ndarray  # empty events
    empty_queries: np.ndarray  # ragmon_signal_empty_queries_total: a question's first empty
    scored: np.ndarray  # events with a top score (not empty)
    score_sum: np.ndarray
    score_sumsq: np.ndarray


def simulate(case: Case, minutes: int, rng: np.random.Generator, outage_at: int | None = None,
             outage_share: float = 0.2, scale: float = 1.0, stop_at: int | None = None,
             cycle: float = CYCLE) -> Counters:  # fmt: skip
    """`minutes` of traffic; from `outage_at` a further `outage_share` of questions is answered
    empty and top scores are multiplied by `scale`; from `stop_at` no event comes."""
    rp = REPEATS
    first = np.repeat(np.arange(minutes), rng.poisson(case.rate / rp.mean_size(), minutes))
    first = first + rng.random(len(first))
    m = 1 + rng.poisson(1.0, len(first))
    q = np.repeat(np.arange(len(first)), m)
    t = ask_times(rng, first, m, rp.gap)
    u, z = rng.random(len(first))[q], rng.standard_normal(len(first))[q]
    late = t >= (outage_at if outage_at is not None else np.inf)
    empty = (u < case.empty) | (late & (u < case.empty + (1 - case.empty) * outage_share))
    retry = rng.random(len(t)) < np.where(empty, EMPTY_RETRY, rp.burst_p)
    n_each = 1 + rp.burst * retry
    t, q, z, empty, late = (np.repeat(x, n_each) for x in (t, q, z, empty, late))
    keep = t < (minutes if stop_at is None else min(minutes, stop_at))
    t, q, z, empty, late = t[keep], q[keep], z[keep], empty[keep], late[keep]
    score = (SCORE_MEAN + SCORE_SD * z) * (1 + cycle * np.sin(2 * np.pi * t / DAY))
    score = np.where(late, score * scale, score)
    minute = t.astype(int)
    # a question's first empty event: the one that grows the day's HyperLogLog of empty
    # queries (a question's asks span hours, rarely midnight)
    order = np.lexsort((t, q))
    e_idx = order[empty[order]]
    _, first_empty = np.unique(q[e_idx], return_index=True)

    def cum(idx: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        per = np.bincount(minute[idx], weights=None if w is None else w[idx], minlength=minutes)
        return np.concatenate([[0.0], np.cumsum(per, dtype=float)])

    everything, full = np.arange(len(t)), ~empty
    return Counters(cum(everything), cum(np.flatnonzero(empty)), cum(e_idx[first_empty]),
                    cum(np.flatnonzero(full)), cum(np.flatnonzero(full), score),
                    cum(np.flatnonzero(full), score * score))  # fmt: skip


def _increase(cum: np.ndarray, minutes: int, offset: int = 0) -> np.ndarray:
    out = np.full(len(cum), np.nan)
    lag = minutes + offset
    out[lag:] = cum[lag - offset : len(cum) - offset] - cum[: len(cum) - lag]
    return out


def _held(cond: np.ndarray, minutes: int) -> np.ndarray:
    """True where `cond` has held for `minutes` (an alert's `for`): that many evaluations
    before this one true too."""
    run = np.zeros(len(cond), dtype=int)
    for i, c in enumerate(cond):
        run[i] = run[i - 1] + 1 if c and i else int(c)
    return run > minutes


def _xlogx(o: np.ndarray, e: np.ndarray) -> np.ndarray:
    """o ln(o / e), 0 where o is 0: as the rules compute it (both clamped to 1e-9)."""
    o, e = np.maximum(o, 1e-9), np.maximum(e, 1e-9)
    return o * np.log(o / e)


def rise_z(a: np.ndarray, n: np.ndarray, day_a: np.ndarray, day_n: np.ndarray) -> np.ndarray:
    """The G-test (likelihood ratio) of the 2x2 table empty / not empty x the window (`a` of
    `n`) / the rest of the day (`day_a - a` of `day_n - n`), as a z: sqrt(G), G = 2 sum of
    o ln(o / e) over the four cells, e from the day's share. ragmon:signal_empty:rise_z."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = day_a / day_n
        rest_a, rest_n = day_a - a, day_n - n
        window = _xlogx(a, n * p) + _xlogx(n - a, n * (1 - p))
        rest = _xlogx(rest_a, rest_n * p) + _xlogx(rest_n - rest_a, rest_n * (1 - p))
        return np.sqrt(np.maximum(2 * (window + rest), 0))


def _empty_condition(c: Counters, window: int, floor: int, z: float, rules: Rules) -> np.ndarray:
    counted = c.empty_queries if rules.distinct else c.empty
    with np.errstate(divide="ignore", invalid="ignore"):
        n, a = _increase(c.events, window), _increase(counted, window)
        day_n, day_a = _increase(c.events, DAY), _increase(counted, DAY)
        rise = a / n - day_a / day_n
        fire = (rise > EMPTY_MARGIN) & (rise_z(a, n, day_a, day_n) > z) & (n >= floor)
        return np.nan_to_num(fire).astype(bool)


def empty_firing(c: Counters, rules: Rules = NOW) -> np.ndarray:
    """RagmonEmptyResultsHigh (its `for` is 0: the condition)."""
    return _empty_condition(c, *EMPTY_FAST, rules)


def empty_slow_firing(c: Counters, rules: Rules = NOW) -> np.ndarray:
    """RagmonEmptyResultsHighSlow (its `for` is 0: the condition)."""
    small = _increase(c.events, 60) < SLOW_BELOW
    return small & np.logical_or.reduce([_empty_condition(c, *w, rules) for w in EMPTY_SLOW])


def stopped_condition(c: Counters, rules: Rules = NOW) -> np.ndarray:
    return (_increase(c.events, 10) == 0) & (_increase(c.events, 60, offset=10) >= STOP_BEFORE)


def stopped_firing(c: Counters, rules: Rules = NOW) -> np.ndarray:
    return _held(stopped_condition(c), STOP_FOR)


def shift_condition(c: Counters, rules: Rules = NOW) -> np.ndarray:
    """RagmonTopScoreShift's condition (before: RagmonTopScoreDrop's, one-sided)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n1, nd = _increase(c.scored, 60), _increase(c.scored, DAY)
        mean1, meand = _increase(c.score_sum, 60) / n1, _increase(c.score_sum, DAY) / nd
        var = np.maximum((_increase(c.score_sumsq, DAY) / nd - meand**2) * nd / (nd - 1), 0)
        threshold = np.maximum(rules.shift_z * np.sqrt(var * (1 / n1 + 1 / nd)),
                               rules.shift_margin * abs(meand))  # fmt: skip
        moved = abs(mean1 - meand) if rules.two_sided else meand - mean1
        return np.nan_to_num((moved > threshold) & (n1 >= rules.shift_min)).astype(bool)


def shift_firing(c: Counters, rules: Rules = NOW) -> np.ndarray:
    return _held(shift_condition(c, rules), rules.shift_for)


def onsets(firing: np.ndarray) -> int:
    """Alerts that start firing (a firing run counts once)."""
    return int(np.sum(firing[1:] & ~firing[:-1]) + firing[0])


FIRING = {"RagmonEmptyResultsHigh": empty_firing, "RagmonEmptyResultsHighSlow": empty_slow_firing,
          "RagmonSeriesStopped": stopped_firing, "RagmonTopScoreShift": shift_firing}  # fmt: skip
ALERTS = tuple(FIRING)


def null_week(case: Case, series: int, seed: int, rules: Rules = NOW) -> dict[str, int]:
    """False firing onsets in the counted week, summed over `series` stationary series."""
    rng = np.random.default_rng(seed)
    out = dict.fromkeys(ALERTS, 0)
    for _ in range(series):
        c = simulate(case, DAY + WEEK, rng)
        for name, firing in FIRING.items():
            out[name] += onsets(firing(c, rules)[DAY + 1 :])
    return out


OUTAGE_WAIT = 180  # minutes an outage is followed


def _first(firing: np.ndarray) -> float:
    fired = np.flatnonzero(firing)
    return float(fired[0] + 1) if len(fired) else float("inf")


def outage_delay(case: Case, trials: int, seed: int,
                 rules: Rules = NOW) -> tuple[list[float], list[float]]:  # fmt: skip
    """Minutes from an outage (20 % more questions answered empty) to RagmonEmptyResultsHigh,
    and to the first of it and RagmonEmptyResultsHighSlow (inf: not within `OUTAGE_WAIT`)."""
    rng = np.random.default_rng(seed)
    fast, either = [], []
    for _ in range(trials):
        at = DAY + int(rng.integers(0, 60))
        c = simulate(case, at + OUTAGE_WAIT, rng, outage_at=at)
        f = empty_firing(c, rules)[at + 1 :]
        fast.append(_first(f))
        either.append(_first(f | empty_slow_firing(c, rules)[at + 1 :]))
    return fast, either


def shift_delay(case: Case, trials: int, seed: int, scale: float,
                rules: Rules = NOW) -> list[float]:  # fmt: skip
    """Minutes from top scores multiplied by `scale` to the top-score alert."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        at = DAY + int(rng.integers(0, DAY))
        c = simulate(case, at + OUTAGE_WAIT, rng, outage_at=at, outage_share=0.0, scale=scale)
        out.append(_first(shift_firing(c, rules)[at + 1 :]))
    return out


CASES = [Case(r, e) for r in (1, 2, 5, 10, 30, 60) for e in (0.0, 0.02, 0.1)]


def _minutes(delays: list[float]) -> str:
    """Median and max, or the share of trials that fired when some did not."""
    d = np.array(delays)
    if np.isinf(d).all():
        return "never | "
    fired = np.isfinite(d).mean()
    worst = f"{d.max():g}" if fired == 1 else f"{fired:.0%} fired"
    median = f"{np.median(d):g}" if fired > 0.5 else f"over {OUTAGE_WAIT // 60} h"
    return f"{median} | {worst}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.stats.signal_alert_sim", description=__doc__)
    p.add_argument("--series", type=int, default=20, help="stationary series per case")
    p.add_argument("--trials", type=int, default=50, help="outages per case")
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--rates", default="1,2,5,10,30,60", help="events a minute, the cases run")
    p.add_argument("--rules", choices=("now", "before"), default="now")
    args = p.parse_args(argv)
    rules = NOW if args.rules == "now" else BEFORE
    rates = {float(r) for r in args.rates.split(",")}
    print(f"dependent week, {args.series} series per case: false firing onsets; outage (+20 % "
          f"of questions empty) -> the first empty-result alert, and top scores x0.8 / x1.5 -> "
          f"the top-score alert, minutes (median | max of {args.trials}, or the share that "
          f"fired within {OUTAGE_WAIT})")  # fmt: skip
    print("| events/min | empty share | empty | empty, slow | stopped | top score "
          "| outage → empty: median | max | → empty or slow: median | max "
          "| x0.8: median | max | x1.5: median | max |")  # fmt: skip
    print("| --- " * 14 + "|")
    for i, case in enumerate(CASES):
        if case.rate not in rates:
            continue
        false = null_week(case, args.series, args.seed + i, rules)
        fast, either = outage_delay(case, args.trials, args.seed + 1000 + i, rules)
        shifts = (
            [
                _minutes(shift_delay(case, args.trials, args.seed + k * 2000 + i, x, rules))
                for k, x in ((1, 0.8), (2, 1.5))
            ]
            if case.empty == 0.02
            else ["| "] * 2
        )
        counts = " | ".join(str(false[a]) for a in ALERTS)
        print(f"| {case.rate:g} | {case.empty:.0%} | {counts} | {_minutes(fast)} | "
              f"{_minutes(either)} | {shifts[0]} | {shifts[1]} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
