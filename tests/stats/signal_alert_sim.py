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
EMPTY_Z, EMPTY_MARGIN, EMPTY_MIN = 7.0, 0.05, 60  # RagmonEmptyResultsHigh (ragmon-signals)
STOP_BEFORE = 120  # RagmonSeriesStopped: events in the hour before the last 10 minutes
STOP_FOR, DROP_FOR = 5, 15  # the alerts' `for`, minutes
DROP_Z, DROP_MIN, DROP_MARGIN = 3.5, 30, 0.05  # RagmonTopScoreDrop (RAGMON_ALERT_Z, _MIN_EVENTS)
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


def empty_firing(c: Counters) -> np.ndarray:
    """RagmonEmptyResultsHigh (its `for` is 0: the condition)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n2, n1d = _increase(c.events, 2), _increase(c.events, DAY)
        share2 = _increase(c.empty, 2) / np.where(n2 > 0, n2, np.nan)
        share1d = _increase(c.empty, DAY) / np.where(n1d > 0, n1d, np.nan)
        se = np.sqrt(share1d * (1 - share1d) * (1 / n2 + 1 / n1d))
        threshold = np.maximum(EMPTY_Z * se, EMPTY_MARGIN)
        return np.nan_to_num((share2 > share1d + threshold) & (n2 >= EMPTY_MIN)).astype(bool)


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


def null_week(case: Case, series: int, seed: int) -> dict[str, int]:
    """False firing onsets in the counted week, summed over `series` stationary series."""
    rng = np.random.default_rng(seed)
    out = {"RagmonEmptyResultsHigh": 0, "RagmonSeriesStopped": 0, "RagmonTopScoreDrop": 0}
    for _ in range(series):
        c = simulate(case, DAY + WEEK, rng)
        for name, firing in (("RagmonEmptyResultsHigh", empty_firing(c)),
                             ("RagmonSeriesStopped", stopped_firing(c)),
                             ("RagmonTopScoreDrop", drop_firing(c))):  # fmt: skip
            out[name] += onsets(firing[DAY + 1 :])
    return out


def outage_delay(case: Case, trials: int, seed: int) -> list[float]:
    """Minutes from an outage (20 % more queries empty) to the empty-result alert firing
    (inf: not within an hour), per trial."""
    rng = np.random.default_rng(seed)
    delays = []
    for _ in range(trials):
        at = DAY + int(rng.integers(0, 60))
        fired = np.flatnonzero(empty_firing(simulate(case, at + 60, rng, outage_at=at))[at + 1 :])
        delays.append(float(fired[0] + 1) if len(fired) else float("inf"))
    return delays


CASES = [Case(r, e) for r in (1, 5, 10, 30, 60) for e in (0.0, 0.02, 0.1)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.stats.signal_alert_sim", description=__doc__)
    p.add_argument("--series", type=int, default=20, help="stationary series per case")
    p.add_argument("--trials", type=int, default=50, help="outages per case")
    p.add_argument("--seed", type=int, default=38)
    args = p.parse_args(argv)
    print(f"stationary week, {args.series} series per case: false firing onsets "
          f"(empty / stopped / top score); outage (+20 % empty) -> empty alert, minutes "
          f"(median, max of {args.trials}; inf: none within an hour)")  # fmt: skip
    print("| events/min | empty share | empty | stopped | top score | outage: median | max |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, case in enumerate(CASES):
        false = null_week(case, args.series, args.seed + i)
        delays = outage_delay(case, args.trials, args.seed + 1000 + i)
        print(f"| {case.rate:g} | {case.empty:.0%} | {false['RagmonEmptyResultsHigh']} | "
              f"{false['RagmonSeriesStopped']} | {false['RagmonTopScoreDrop']} | "
              f"{np.median(delays):g} | {max(delays):g} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
