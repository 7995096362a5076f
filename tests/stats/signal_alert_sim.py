"""False firings of the judge-free alerts on a stationary week, and how soon an index outage
fires the empty-result alert, through the rules' arithmetic.

    nice python -m tests.stats.signal_alert_sim              # 20 series per case, 1 week
    nice python -m tests.stats.signal_alert_sim --series 4   # quicker

Traffic arrives per minute (Poisson at each case's rate), each event empty with the case's
probability and, when not, with a top score drawn from N(10, 2^2). The counters are sampled
once a minute and evaluated every minute as deploy/prometheus/rules/ does it (group
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

DAY = 1440  # minutes
WEEK = 7 * DAY
# RagmonEmptyResultsHigh: 2 minutes with >= 60 events; RagmonEmptyResultsHighSlow: 15 minutes or
# an hour with >= 30 events, for series under 30 events a minute over the hour (ragmon-signals)
EMPTY_MARGIN = 0.05  # the window's share above the day's by at least 5 points
EMPTY_FAST = (2, 60, 5.5)  # window (minutes), events in it at least, z
EMPTY_SLOW = ((15, 30, 5.5), (60, 30, 5.5))
SLOW_BELOW = 1800  # events in the last hour under which the slow companion applies
STOP_BEFORE = 120  # RagmonSeriesStopped: events in the hour before the last 10 minutes
STOP_FOR, DROP_FOR = 5, 15  # the alerts' `for`, minutes
DROP_Z, DROP_MIN, DROP_MARGIN = 5.0, 30, 0.05  # RagmonTopScoreDrop (z, RAGMON_ALERT_MIN_EVENTS)
SCORE_MEAN, SCORE_SD = 10.0, 2.0


@dataclass(frozen=True)
class Case:
    rate: float  # events a minute
    empty: float  # share of empty results


@dataclass
class Counters:
    """Cumulative counters sampled each minute (index 0: before any event)."""

    events: np.ndarray
    empty: np.ndarray
    scored: np.ndarray  # events with a top score (not empty)
    score_sum: np.ndarray
    score_sumsq: np.ndarray


def simulate(case: Case, minutes: int, rng: np.random.Generator, outage_at: int | None = None,
             outage_share: float = 0.2, score_after: float = SCORE_MEAN,
             stop_at: int | None = None) -> Counters:  # fmt: skip
    """`minutes` of traffic; from `outage_at` a further `outage_share` of queries is empty and
    the top scores' mean is `score_after`; from `stop_at` no event comes."""
    n = rng.poisson(case.rate, minutes)
    if stop_at is not None:
        n[stop_at:] = 0
    p = np.full(minutes, case.empty)
    mean = np.full(minutes, SCORE_MEAN)
    if outage_at is not None:
        p[outage_at:] = case.empty + (1 - case.empty) * outage_share
        mean[outage_at:] = score_after
    e = rng.binomial(n, p)
    m = n - e
    # the sum and the sum of squares of m normal draws, exactly: Σz ~ N(0, m) and
    # Σ(z - z̄)² ~ χ²(m - 1), independent
    s = rng.normal(0.0, np.sqrt(np.maximum(m, 1))) * (m > 0)
    w = rng.chisquare(np.maximum(m - 1, 1)) * (m > 1)
    zsq = np.where(m > 0, s * s / np.maximum(m, 1) + w, 0.0)
    total = m * mean + SCORE_SD * s
    squares = m * mean**2 + 2 * mean * SCORE_SD * s + SCORE_SD**2 * zsq

    def cum(x: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(x, dtype=float)])

    return Counters(cum(n), cum(e), cum(m), cum(total), cum(squares))


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


def _empty_condition(c: Counters, window: int, floor: int, z: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        n, a = _increase(c.events, window), _increase(c.empty, window)
        day_n, day_a = _increase(c.events, DAY), _increase(c.empty, DAY)
        rise = a / n - day_a / day_n
        fire = (rise > EMPTY_MARGIN) & (rise_z(a, n, day_a, day_n) > z) & (n >= floor)
        return np.nan_to_num(fire).astype(bool)


def empty_firing(c: Counters) -> np.ndarray:
    """RagmonEmptyResultsHigh (its `for` is 0: the condition)."""
    return _empty_condition(c, *EMPTY_FAST)


def empty_slow_firing(c: Counters) -> np.ndarray:
    """RagmonEmptyResultsHighSlow (its `for` is 0: the condition)."""
    small = _increase(c.events, 60) < SLOW_BELOW
    return small & np.logical_or.reduce([_empty_condition(c, *w) for w in EMPTY_SLOW])


def stopped_condition(c: Counters) -> np.ndarray:
    return (_increase(c.events, 10) == 0) & (_increase(c.events, 60, offset=10) >= STOP_BEFORE)


def stopped_firing(c: Counters) -> np.ndarray:
    return _held(stopped_condition(c), STOP_FOR)


def drop_condition(c: Counters) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        n1, nd = _increase(c.scored, 60), _increase(c.scored, DAY)
        mean1, meand = _increase(c.score_sum, 60) / n1, _increase(c.score_sum, DAY) / nd
        var = np.maximum((_increase(c.score_sumsq, DAY) / nd - meand**2) * nd / (nd - 1), 0)
        threshold = np.maximum(DROP_Z * np.sqrt(var * (1 / n1 + 1 / nd)), DROP_MARGIN * abs(meand))
        return np.nan_to_num((mean1 < meand - threshold) & (n1 >= DROP_MIN)).astype(bool)


def drop_firing(c: Counters) -> np.ndarray:
    return _held(drop_condition(c), DROP_FOR)


def onsets(firing: np.ndarray) -> int:
    """Alerts that start firing (a firing run counts once)."""
    return int(np.sum(firing[1:] & ~firing[:-1]) + firing[0])


ALERTS = ("RagmonEmptyResultsHigh", "RagmonEmptyResultsHighSlow", "RagmonSeriesStopped",
          "RagmonTopScoreDrop")  # fmt: skip


def null_week(case: Case, series: int, seed: int) -> dict[str, int]:
    """False firing onsets in the counted week, summed over `series` stationary series."""
    rng = np.random.default_rng(seed)
    out = dict.fromkeys(ALERTS, 0)
    for _ in range(series):
        c = simulate(case, DAY + WEEK, rng)
        firing = (empty_firing(c), empty_slow_firing(c), stopped_firing(c), drop_firing(c))
        for name, f in zip(ALERTS, firing, strict=True):
            out[name] += onsets(f[DAY + 1 :])
    return out


OUTAGE_WAIT = 180  # minutes an outage is followed


def outage_delay(case: Case, trials: int, seed: int) -> tuple[list[float], list[float]]:
    """Minutes from an outage (20 % more queries empty) to RagmonEmptyResultsHigh, and to the
    first of it and RagmonEmptyResultsHighSlow (inf: not within `OUTAGE_WAIT`), per trial."""
    rng = np.random.default_rng(seed)
    fast, either = [], []
    for _ in range(trials):
        at = DAY + int(rng.integers(0, 60))
        c = simulate(case, at + OUTAGE_WAIT, rng, outage_at=at)
        f = empty_firing(c)[at + 1 :]
        for out, firing in ((fast, f), (either, f | empty_slow_firing(c)[at + 1 :])):
            fired = np.flatnonzero(firing)
            out.append(float(fired[0] + 1) if len(fired) else float("inf"))
    return fast, either


CASES = [Case(r, e) for r in (1, 2, 5, 10, 30, 60) for e in (0.0, 0.02, 0.1)]


def _minutes(delays: list[float]) -> str:
    """Median and max, or the share of trials that fired when some did not."""
    d = np.array(delays)
    if np.isinf(d).all():
        return "never | "
    fired = np.isfinite(d).mean()
    worst = f"{d.max():g}" if fired == 1 else f"{fired:.0%} fired"
    median = f"{np.median(d):g}" if fired >= 0.5 else f"over {OUTAGE_WAIT // 60} h"
    return f"{median} | {worst}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.stats.signal_alert_sim", description=__doc__)
    p.add_argument("--series", type=int, default=20, help="stationary series per case")
    p.add_argument("--trials", type=int, default=50, help="outages per case")
    p.add_argument("--seed", type=int, default=38)
    args = p.parse_args(argv)
    print(f"stationary week, {args.series} series per case: false firing onsets; outage "
          f"(+20 % of queries empty) -> the first empty-result alert, minutes (median | max "
          f"of {args.trials}, or the share that fired within {OUTAGE_WAIT})")  # fmt: skip
    print("| events/min | empty share | empty | empty, slow | stopped | top score "
          "| outage → empty: median | max | → empty or slow: median | max |")  # fmt: skip
    print("| --- " * 10 + "|")
    for i, case in enumerate(CASES):
        false = null_week(case, args.series, args.seed + i)
        fast, either = outage_delay(case, args.trials, args.seed + 1000 + i)
        counts = " | ".join(str(false[a]) for a in ALERTS)
        print(f"| {case.rate:g} | {case.empty:.0%} | {counts} | {_minutes(fast)} | "
              f"{_minutes(either)} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
