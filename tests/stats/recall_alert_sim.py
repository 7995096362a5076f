"""False firings and detection delay of RagmonRecallLoss (the pooled RA-nWG@K of the last day
against the last 7 days), through the rules' arithmetic, on traffic whose questions repeat.

    nice python -m tests.stats.recall_alert_sim               # 40 series per rate
    nice python -m tests.stats.recall_alert_sim --series 8    # quicker

A series has `queries` recurring queries, each with its warm pooled RA-nWG@K (the ranking and
pool of `tests.stats.recall_sim`: a retriever ranking a segment's candidates of
`traffic.POOLS`). Questions arrive per minute (Poisson, at half the event rate, with a daily
cycle of +/- 50 %); each is one query asked 1 + Poisson(1) times, the repeats an exponential
hour apart on average, every ask with the same value. Counters (_count, _sum, _sum_squares of
`ragmon_retrieval_ra_nwg_pooled`) are sampled once a minute and evaluated every minute as
deploy/prometheus/rules/ does it (`evaluate`). Null: 8 days of warm-up (the rule's 7-day
baseline), then weeks that are counted. Power: from a random minute of the counted week, a
share `lost` of the queries loses every relevant passage (drawn per series); the delay until
the alert fires. `tests/stats/test_recall_alert_sim.py` checks `evaluate` against promtool.
"""

from __future__ import annotations

import argparse
import zlib
from dataclasses import dataclass

import numpy as np

from ragmon.core.measures import compute
from ragmon.settings import Settings
from tests.stats.alert_sim import REPEATS, _increase, firing_onsets, rule_minutes
from tests.stats.recall_sim import SEGMENTS, K, ranking
from tests.stats.traffic import POOLS, ask_times

DAY, WEEK = 1440, 7 * 1440
ALERT = "RagmonRecallLoss"
# The rule's constants (ragmon-recording.yml, ragmon:retrieval_ra_nwg_pooled:drop_threshold):
MARGIN = 0.05  # the smallest fall of the day's mean worth a page
RATES = (1, 5, 60)  # events a minute


@dataclass(frozen=True)
class Rule:
    z: float
    min_events: float
    for_minutes: int
    margin: float = MARGIN
    repeats: float = REPEATS

    @classmethod
    def of(cls, settings: Settings, margin: float = MARGIN, repeats: float = REPEATS) -> Rule:
        return cls(settings.alert_z, settings.alert_min_events, rule_minutes(ALERT), margin,
                   repeats)  # fmt: skip


def query_values(rng: np.random.Generator, queries: int, noise: float = 5.0):
    """Per query its pooled RA-nWG@K as usual and once it lost every relevant passage (NaN:
    undefined, not counted)."""
    normal, lost = np.full(queries, np.nan), np.full(queries, np.nan)
    for q in range(queries):
        grades = np.array(POOLS[SEGMENTS[int(rng.integers(0, len(SEGMENTS)))]])
        z = rng.standard_normal(len(grades))
        top, gone = ranking(grades, z, noise, False), ranking(grades, z, noise, True)
        pool = {i: int(grades[i]) for i in top + gone}
        for out, idx in ((normal, top), (lost, gone)):
            v = compute([int(grades[i]) for i in idx], K, pool=list(pool.values()))
            out[q] = np.nan if v["ra_nwg_pooled"] is None else v["ra_nwg_pooled"]
    return normal, lost


def counters(rng: np.random.Generator, per_minute: float, minutes: int, normal: np.ndarray,
             lost: np.ndarray, lost_at: int | None = None, share: float = 0.3):  # fmt: skip
    """Cumulative _count, _sum, _sum_squares at the end of each minute; from `lost_at`, a
    `share` of the queries has its `lost` value."""
    t = np.arange(minutes)
    cycle = 1 + 0.5 * np.sin(2 * np.pi * t / DAY)
    asked = rng.poisson(per_minute / 2 * cycle)
    first = np.repeat(t, asked)
    query = rng.integers(0, len(normal), size=len(first))
    m = 1 + rng.poisson(1.0, size=len(first))
    query = np.repeat(query, m)
    at = ask_times(rng, first, m)
    value = normal[query]
    if lost_at is not None:
        gone = rng.random(len(normal)) < share
        late = (at >= lost_at) & gone[query]
        value = np.where(late, lost[query], value)
    keep = (at < minutes) & ~np.isnan(value)
    minute, v = at[keep].astype(int), value[keep]
    n = np.bincount(minute, minlength=minutes)
    s = np.bincount(minute, weights=v, minlength=minutes)
    q = np.bincount(minute, weights=v * v, minlength=minutes)
    return np.cumsum(n).astype(float), np.cumsum(s), np.cumsum(q)


def evaluate(count: np.ndarray, total: np.ndarray, squares: np.ndarray, rule: Rule,
             step: int = 1) -> dict[str, np.ndarray]:  # fmt: skip
    """The recording rules and the condition at every sample: mean = increase(sum) /
    increase(count) over 1d and 7d; var7d = (increase(sum_squares[7d]) / n7d - mean7d^2) *
    n7d / (n7d - 1), at least 0; threshold = max(z * sqrt(REPEATS * var7d * (1 / n1d +
    1 / n7d)), MARGIN); condition: mean7d - mean1d > threshold and n1d >= min_events."""
    n1, n7 = _increase(count, DAY, step), _increase(count, WEEK, step)
    s1, s7 = _increase(total, DAY, step), _increase(total, WEEK, step)
    q7 = _increase(squares, WEEK, step)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1 = np.where(n1 > 0, s1 / n1, np.nan)
        mean7 = np.where(n7 > 0, s7 / n7, np.nan)
        var7 = np.maximum((q7 / n7 - mean7 * mean7) * n7 / (n7 - 1), 0.0)
        se = np.sqrt(rule.repeats * var7 * (1 / n1 + 1 / n7))
        threshold = np.maximum(rule.z * se, rule.margin)
        condition = (mean7 - mean1 > threshold) & (n1 >= rule.min_events)
    return {"mean1d": mean1, "mean7d": mean7, "var7d": var7, "threshold": threshold,
            "condition": condition}  # fmt: skip


def null_weeks(per_minute: float, rule: Rule, series: int, weeks: int, seed: int,
               queries: int = 300) -> tuple[int, int]:  # fmt: skip
    """(firings, series-weeks) of traffic with no change, after 8 days of warm-up."""
    fired = 0
    for i in range(series):
        rng = np.random.default_rng([seed, i, int(per_minute * 100)])
        normal, lost = query_values(rng, queries)
        c, s, q = counters(rng, per_minute, DAY + WEEK + weeks * WEEK, normal, lost)
        cond = evaluate(c, s, q, rule)["condition"][DAY + WEEK :]
        fired += len(firing_onsets(cond, rule.for_minutes))
    return fired, series * weeks


def delays(per_minute: float, rule: Rule, series: int, seed: int, share: float = 0.3,
           queries: int = 300) -> list[float]:  # fmt: skip
    """Minutes from the recall loss to the alert's first firing (inf: not within 2 days)."""
    out = []
    for i in range(series):
        rng = np.random.default_rng([seed, i, int(per_minute * 100), 1])
        normal, lost = query_values(rng, queries)
        start = DAY + WEEK + int(rng.integers(0, DAY))
        c, s, q = counters(rng, per_minute, start + 2 * DAY, normal, lost, start, share)
        onsets = firing_onsets(evaluate(c, s, q, rule)["condition"][start:], rule.for_minutes)
        out.append(float(onsets[0]) if len(onsets) else float("inf"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=40)
    ap.add_argument("--weeks", type=int, default=1)
    ap.add_argument("--seed", type=int, default=zlib.crc32(b"recall-alert"))
    ap.add_argument("--margin", type=float, default=MARGIN, help="the rule's, or another")
    ap.add_argument("--repeats", type=float, default=REPEATS, help="the rule's, or another")
    a = ap.parse_args(argv)
    rule = Rule.of(Settings(), a.margin, a.repeats)
    print(
        f"{ALERT}: {a.series} series per rate, z {rule.z:g}, margin {rule.margin:g}, repeats "
        f"factor {rule.repeats:g}, for {rule.for_minutes} m; questions asked 1 + Poisson(1) "
        "times\n"
    )
    print(
        "| events/min | false firings per series-week [95 % CI] | alerted within a day "
        "(30 % of queries lost) | median delay |"
    )
    print("| ---: | --- | ---: | ---: |")
    from scipy import stats

    for rate in RATES:
        fired, weeks = null_weeks(rate, rule, a.series, a.weeks, a.seed)
        lo = stats.chi2.ppf(0.025, 2 * fired) / 2 if fired else 0.0  # Garwood's exact interval
        hi = stats.chi2.ppf(0.975, 2 * fired + 2) / 2
        d = np.array(delays(rate, rule, a.series, a.seed))
        print(
            f"| {rate} | {fired / weeks:.2f} [{lo / weeks:.2f}, {hi / weeks:.2f}] | "
            f"{np.mean(d <= DAY):.0%} | {np.median(d) / 60:.1f} h |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
