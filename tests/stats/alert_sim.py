"""False firings and detection delay of the quality-drop alerts, through the rules' arithmetic.

    nice python -m tests.stats.alert_sim                # 40 series x 90 days per case
    nice python -m tests.stats.alert_sim --series 8     # quicker, noisier
    nice python -m tests.stats.alert_sim --levels       # the level alerts: 20 series x 4 weeks
    nice python -m tests.stats.alert_sim --repeated     # every level and drop alert on repeated
                                                        # questions and retries: 40 x 4 weeks
    nice python -m tests.stats.alert_sim --planned 10   # planned sampling: events weigh 10
    nice python -m tests.stats.alert_sim --bound        # what any detector can do (Hit@K)

Traffic arrives per minute (Poisson), each event's nDCG@K or T drawn from the synthetic
retriever of `tests.stats.traffic`. The counters (_count, _sum, _sum_squares) are sampled once a
minute and evaluated every minute exactly as deploy/prometheus/rules/ does it (see `evaluate`;
`tests/stats/test_alert_sim.py` checks this arithmetic against promtool on the same input).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ragmon.settings import Settings
from tests.stats import level_bound
from tests.stats.traffic import Repeats, bank, noise_for_mean, repeated_counters

RULES = (
    Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / "ragmon-alerts.yml"
)
DAY = 1440  # minutes
WEEK = 7 * DAY
# The quality alerts' variance factor for questions asked again with the same value (and
# retried): the rules multiply every variance of a mean by it (ragmon-recording.yml).
REPEATS = 4.0


@dataclass(frozen=True)
class Rule:
    """The tunables the rules read (exported by ragmon from its settings) and the rule's `for`."""

    margin: float
    z: float
    min_events: float
    for_minutes: int
    repeats: float = REPEATS

    @classmethod
    def of(
        cls, settings: Settings, measure: str, for_minutes: int | None = None,
        repeats: float = REPEATS,
    ) -> Rule:  # fmt: skip
        """The rule of `measure`'s drop alert: `for` from the rule file unless given."""
        margin = settings.alert_margin_ndcg if measure == "ndcg" else settings.alert_margin_t
        if for_minutes is None:
            for_minutes = rule_for_minutes(measure)
        return cls(margin, settings.alert_z, settings.alert_min_events, for_minutes, repeats)


def rule_minutes(name: str, field: str = "for") -> int:
    """A duration of an alert in deploy/prometheus/rules/ragmon-alerts.yml, in minutes (0 when
    the rule has no such field)."""
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                if field not in rule:
                    return 0
                value, unit = int(rule[field][:-1]), rule[field][-1]
                return value * {"m": 1, "h": 60}[unit]
    raise ValueError(f"no alert {name} in {RULES}")


def rule_for_minutes(measure: str) -> int:
    """The `for` of the measure's drop alert in deploy/prometheus/rules/ragmon-alerts.yml."""
    return rule_minutes({"ndcg": "RagmonQualityDropNDCG", "t": "RagmonQualityDropT"}[measure])


def _increase(cum: np.ndarray, minutes: int, step: int) -> np.ndarray:
    """increase()/delta() over `minutes` at every evaluation: samples every `step` minutes,
    both window ends included (Prometheus 2.x), so no extrapolation is needed."""
    lag = minutes // step
    out = np.full(len(cum), np.nan)
    out[lag:] = cum[lag:] - cum[:-lag]
    return out


def _hourly_spread(mean1: np.ndarray, n1: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """stddev_over_time(mean1h[7d:1h]) and avg_over_time(increase1h[7d:1h]) at every sample:
    the values at whole hours within the last 7 days (both ends included); an hour without
    events has no mean (it is skipped by the first, counted as 0 events by the second)."""
    per_hour = 60 // step
    hours = np.arange(0, len(mean1), per_hour)
    m, n = mean1[hours], n1[hours]
    has_m, has_n = ~np.isnan(m), ~np.isnan(n)

    def window_sums(x: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(x)])

    cm, cn = window_sums(has_m), window_sums(has_n)
    s1, s2 = window_sums(np.where(has_m, m, 0.0)), window_sums(np.where(has_m, m * m, 0.0))
    sn = window_sums(np.where(has_n, n, 0.0))
    idx = np.arange(len(mean1))
    last = idx // per_hour + 1  # one past the last whole hour at or before each sample
    first = np.maximum(0, -(-(idx - WEEK // step) // per_hour))  # the first hour >= t - 7d
    with np.errstate(divide="ignore", invalid="ignore"):
        k = cm[last] - cm[first]
        mu = (s1[last] - s1[first]) / k
        sd = np.sqrt(np.maximum((s2[last] - s2[first]) / k - mu * mu, 0.0))
        avg_n = (sn[last] - sn[first]) / (cn[last] - cn[first])
    return sd, avg_n


def _effective(n: np.ndarray, w2: np.ndarray | None) -> np.ndarray:
    """ragmon:retrieval_events:effective*: Kish's n^2 / sum(w^2) where below n (n: the sum of
    weights, _count), else n (every weight 1, or no weight-squares counter)."""
    if w2 is None:
        return n
    with np.errstate(divide="ignore", invalid="ignore"):
        kish = n * n / w2
    return np.where(kish < n, kish, n)


def evaluate(
    count: np.ndarray,
    total: np.ndarray,
    squares: np.ndarray,
    rule: Rule,
    step: int = 1,
    weight2: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The recording rules and the alert condition at every sample of cumulative counters.

    mean = delta(sum) / delta(count) (absent without events); var7d = (increase(sum_squares) /
    n7d - mean7d^2) * n7d / (n7d - 1), at least 0; dispersion = the spread of the last 7 days'
    hourly means over what repeated questions would give (the repeats factor R times
    independent events' variance), when above 1, else 1; threshold = max(margin, z *
    dispersion * sqrt(R * var7d * (1 / n1h + 1 / n7d))); condition: mean7d -
    mean1h > threshold and n1h >= min_events. `weight2`: the cumulative sum of squared weights
    (planned sampling: _count is then the sum of weights); n in the standard errors and the
    minimum is then the effective number of judged events (`_effective`).
    """
    n1, n7 = _increase(count, 60, step), _increase(count, WEEK, step)
    s1, s7 = _increase(total, 60, step), _increase(total, WEEK, step)
    q7 = _increase(squares, WEEK, step)
    w1 = w7 = None
    if weight2 is not None:
        w1, w7 = _increase(weight2, 60, step), _increase(weight2, WEEK, step)
    e1, e7 = _effective(n1, w1), _effective(n7, w7)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1 = np.where(n1 > 0, s1 / n1, np.nan)
        mean7 = np.where(n7 > 0, s7 / n7, np.nan)
        var7 = np.maximum((q7 / n7 - mean7 * mean7) * n7 / (n7 - 1), 0.0)
        sd_hourly, avg_n1 = _hourly_spread(mean1, e1, step)
        ratio = sd_hourly / np.sqrt(rule.repeats * var7 / avg_n1)
        dispersion = np.where(ratio > 1, ratio, 1.0)
        se = np.sqrt(rule.repeats * var7 * (1 / e1 + 1 / e7))
        threshold = np.maximum(rule.z * dispersion * se, rule.margin)
        condition = (mean7 - mean1 > threshold) & (e1 >= rule.min_events)
    return {"mean1h": mean1, "mean7d": mean7, "var7d": var7, "dispersion": dispersion,
            "threshold": threshold, "condition": condition}  # fmt: skip


LEVELS = {"harm": (0.3, "above"), "hit": (0.6, "below")}  # the lines of the level alerts
LEVEL_BANDS = {"harm": 0.0, "hit": 0.02}  # taken off the margin (ragmon-recording.yml)


def evaluate_level(
    count: np.ndarray, total: np.ndarray, squares: np.ndarray, measure: str, z: float,
    min_events: float, step: int = 1, weight2: np.ndarray | None = None,
    repeats: float = REPEATS,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The level alerts' recording rules and condition at every sample.

    var1h = (increase(sum_squares[1h]) / n1h - mean1h^2) * n1h / (n1h - 1), at least 0;
    margin = max(z * sqrt(R * var1h / n1h) - band, 0) (z standard errors of the hour's mean,
    its variance times the repeats factor R, less the measure's band: 0.02 for Hit@K, none for
    Harm@K); condition: the hourly mean is beyond the line by more than the margin (Harm@K
    above 0.3, Hit@K below 0.6) and n1h >= min_events.
    """
    line, side = LEVELS[measure]
    n1 = _increase(count, 60, step)
    s1, q1 = _increase(total, 60, step), _increase(squares, 60, step)
    e1 = _effective(n1, None if weight2 is None else _increase(weight2, 60, step))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1 = np.where(n1 > 0, s1 / n1, np.nan)
        var1 = np.maximum((q1 / n1 - mean1 * mean1) * n1 / (n1 - 1), 0.0)
        margin = np.maximum(z * np.sqrt(repeats * var1 / e1) - LEVEL_BANDS[measure], 0.0)
        beyond = mean1 - margin > line if side == "above" else mean1 + margin < line
        condition = beyond & (e1 >= min_events)
    return {"mean1h": mean1, "var1h": var1, "margin": margin, "condition": condition}


def firing(
    condition: np.ndarray, for_minutes: int, step: int = 1, lag: int = 1, keep_minutes: int = 0
) -> np.ndarray:
    """Whether the alert fires at each evaluation: its condition, read `lag` evaluations late
    (Prometheus runs the alert and recording groups independently, so the alerts may read the
    recorded values of the previous evaluation), has held at every evaluation for
    `for_minutes` (Prometheus' `for`); once firing, it keeps firing until the condition has
    been false for longer than `keep_minutes` (Prometheus' `keep_firing_for`)."""
    late = np.concatenate([[False] * lag, condition[: len(condition) - lag]])
    need = -(-for_minutes // step)  # evaluations after the first one that must still hold
    keep = keep_minutes // step
    out = np.zeros(len(late), bool)
    held = 0
    since = 0  # evaluations since the condition last held, while firing
    on = False
    for i, c in enumerate(late):
        held = held + 1 if c else 0
        if c:
            since = 0
            on = on or held > need
        elif on:
            since += 1
            on = since <= keep
        out[i] = on
    return out


def firing_onsets(
    condition: np.ndarray, for_minutes: int, step: int = 1, keep_minutes: int = 0
) -> np.ndarray:
    """Evaluation indexes where the alert starts firing."""
    f = firing(condition, for_minutes, step, keep_minutes=keep_minutes)
    return np.flatnonzero(f & ~np.concatenate([[False], f[:-1]]))


def minute_counters(
    rng: np.random.Generator, per_hour: float, minutes: int, values: np.ndarray,
    after: tuple[int, np.ndarray] | None = None, trending: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Cumulative _count, _sum and _sum_squares at the end of each minute; from minute
    `after[0]` on, values come from `after[1]` (a changed retriever). With `trending`, that
    share of each day's events repeats one of the day's 3 trending questions (same value)."""
    n = rng.poisson(per_hour / 60, size=minutes)
    minute = np.repeat(np.arange(minutes), n)
    draws = values[rng.integers(0, len(values), size=len(minute))]
    if after is not None:
        late = minute >= after[0]
        draws[late] = after[1][rng.integers(0, len(after[1]), size=int(late.sum()))]
    if trending:
        days = minutes // DAY + 1
        of_day = values[rng.integers(0, len(values), size=(days, 3))]
        pick = rng.random(len(minute)) < trending
        draws[pick] = of_day[minute[pick] // DAY, rng.integers(0, 3, size=int(pick.sum()))]
    s = np.bincount(minute, weights=draws, minlength=minutes)
    q = np.bincount(minute, weights=draws * draws, minlength=minutes)
    return np.cumsum(n).astype(float), np.cumsum(s), np.cumsum(q)


def counters(
    rng: np.random.Generator, per_minute: float, minutes: int, values: np.ndarray,
    after: tuple[int, np.ndarray] | None = None, repeats: Repeats | None = None,
    trending: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """`minute_counters` (independent events), or with `repeats`, `traffic.repeated_counters`
    (questions asked again and retried)."""
    if repeats is None:
        return minute_counters(rng, 60 * per_minute, minutes, values, after, trending)
    return repeated_counters(rng, per_minute, minutes, values, after, repeats)


def population(measure: str, target: float) -> np.ndarray:
    """Per-event values of a synthetic retriever whose mean `measure` is `target`."""
    segment = "default" if measure == "ndcg" else "billing"
    values = bank(segment, noise_for_mean(segment, target, measure))[measure]
    return values[~np.isnan(values)]


def level_population(measure: str, target: float) -> np.ndarray:
    """Per-event Harm@K or Hit@K of a synthetic retriever whose mean is `target` (Harm@10 from
    a pool rich in distractors, SD about 0.12; Hit@10 from the billing pool, SD about 0.49)."""
    segment = "distracting" if measure == "harm" else "billing"
    values = bank(segment, noise_for_mean(segment, target, measure))[measure]
    return values[~np.isnan(values)]


@dataclass(frozen=True)
class Weighing:
    """Planned sampling: each judged event weighs `weight` (judged at 1 / weight of the
    traffic: the rates simulated are of judged events) in _count, _sum and _sum_squares;
    `rules_see_squares`: the rules read ragmon_retrieval_weight_squares_total (else they take
    the sum of weights for the number judged, as before issue 35's fix)."""

    weight: float = 1.0
    rules_see_squares: bool = True

    def apply(
        self, c: np.ndarray, s: np.ndarray, q: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        w = self.weight
        squares = w * w * c if self.rules_see_squares else None
        return w * c, w * s, w * q, squares


def false_firings(
    measure: str, target: float, per_hour: float, rule: Rule, series: int, days: int, seed: int,
    trending: float = 0.0, weighing: Weighing = Weighing(), repeats: Repeats | None = None,
) -> tuple[int, float]:  # fmt: skip
    """(firings, series-days evaluated) of stationary traffic after a week of warm-up."""
    rng = np.random.default_rng(seed)
    values = population(measure, target)
    fired = 0
    for _ in range(series):
        minutes = WEEK + days * DAY
        c, s, q = counters(rng, per_hour / 60, minutes, values, None, repeats, trending)
        c, s, q, w2 = weighing.apply(c, s, q)
        cond = evaluate(c, s, q, rule, weight2=w2)["condition"][WEEK:]
        fired += len(firing_onsets(cond, rule.for_minutes))
    return fired, series * days


def detection_minutes(
    target: float, drop: float, per_hour: float, rule: Rule, trials: int, seed: int,
    measure: str = "ndcg", repeats: Repeats | None = None, hours: int = 6,
) -> list[float]:  # fmt: skip
    """Minutes from a true drop of the mean nDCG@K (or `measure`) to the alert firing (inf:
    not within `hours`)."""
    rng = np.random.default_rng(seed)
    before, after = population(measure, target), population(measure, target - drop)
    out = []
    for _ in range(trials):
        minutes = WEEK + hours * 60
        c, s, q = counters(rng, per_hour / 60, minutes, before, (WEEK, after), repeats)
        cond = evaluate(c, s, q, rule)["condition"]
        onsets = firing_onsets(cond[WEEK:], rule.for_minutes)
        out.append(float(onsets[0]) if len(onsets) else float("inf"))
    return out


LEVEL_ALERTS = {"harm": "RagmonHarmHigh", "hit": "RagmonHitRateLow"}
LEVEL_CASES = (  # (measure, level 0.02 on the safe side, 0.1 across the line)
    ("harm", 0.28, 0.40),
    ("hit", 0.62, 0.50),
)
LEVEL_RATES = (1, 5, 20)  # events a minute


def level_firings(
    measure: str, target: float, per_minute: float, settings: Settings, series: int,
    weeks: int, seed: int, weighing: Weighing = Weighing(), repeats: Repeats | None = None,
    factor: float = REPEATS,
) -> tuple[int, float]:  # fmt: skip
    """(firings, series-weeks evaluated) of a level alert on stationary traffic (after the
    first hour, which has no hourly mean yet); `factor`: the rules' repeats factor."""
    rng = np.random.default_rng(seed)
    values = level_population(measure, target)
    name = LEVEL_ALERTS[measure]
    for_m, keep = rule_minutes(name), rule_minutes(name, "keep_firing_for")
    fired = 0
    for _ in range(series):
        c, s, q = counters(rng, per_minute, 60 + weeks * WEEK, values, None, repeats)
        c, s, q, w2 = weighing.apply(c, s, q)
        z, least = settings.alert_z, settings.alert_min_events
        got = evaluate_level(c, s, q, measure, z, least, weight2=w2, repeats=factor)
        fired += len(firing_onsets(got["condition"][60:], for_m, keep_minutes=keep))
    return fired, float(series * weeks)


def level_delays(
    measure: str, safe: float, crossed: float, per_minute: float, settings: Settings,
    trials: int, seed: int, hours: int = 6, repeats: Repeats | None = None,
    factor: float = REPEATS,
) -> list[float]:  # fmt: skip
    """Minutes from the level moving from `safe` to `crossed` to the alert firing (inf: not
    within `hours`)."""
    rng = np.random.default_rng(seed)
    before, after = level_population(measure, safe), level_population(measure, crossed)
    name = LEVEL_ALERTS[measure]
    for_m, keep = rule_minutes(name), rule_minutes(name, "keep_firing_for")
    out = []
    for _ in range(trials):
        start = 2 * 60
        minutes = start + hours * 60
        c, s, q = counters(rng, per_minute, minutes, before, (start, after), repeats)
        z, least = settings.alert_z, settings.alert_min_events
        got = evaluate_level(c, s, q, measure, z, least, repeats=factor)
        onsets = firing_onsets(got["condition"][start:], for_m, keep_minutes=keep)
        out.append(float(onsets[0]) if len(onsets) else float("inf"))
    return out


def levels_main(settings: Settings, series: int, weeks: int, trials: int, seed: int) -> None:
    """Print the level alerts' false firings and detection delays."""
    print(
        f"level alerts: z {settings.alert_z}, min events {settings.alert_min_events}, "
        + ", ".join(
            f"{name} for {rule_minutes(name)}m keep {rule_minutes(name, 'keep_firing_for')}m"
            for name in LEVEL_ALERTS.values()
        )
    )
    print(
        f"{'level':30} {'/min':>4} {'firings':>7} {'series-weeks':>12} {'per week':>8}"
        f" {'crossed':>7} {'<= 1 h':>6} {'median':>6} {'slowest':>7}"
    )
    for i, (measure, safe, crossed) in enumerate(LEVEL_CASES):
        for j, rate in enumerate(LEVEL_RATES):
            fired, sw = level_firings(
                measure, safe, rate, settings, series, weeks, seed + 10 * i + j
            )
            delays = np.array(
                level_delays(
                    measure, safe, crossed, rate, settings, trials, seed + 100 + 10 * i + j
                )
            )
            finite = delays[np.isfinite(delays)]
            median = f"{np.median(delays):.0f}" if np.isfinite(np.median(delays)) else "-"
            slowest = f"{finite.max():.0f}" if len(finite) == len(delays) else "never" if not len(
                finite) else f">{6 * 60}"  # fmt: skip
            print(
                f"{measure + f' {safe} (line {LEVELS[measure][0]})':30} {rate:4d} {fired:7d} "
                f"{sw:12.0f} {fired / sw:8.3f} {crossed:7.2f} {np.mean(delays <= 60):6.0%} "
                f"{median:>6} {slowest:>7}",
                flush=True,
            )


REPEATED_RATES = (1, 5, 60)  # events a minute
REPEATED_CASES = (  # (alert, measure, level held, level after the change)
    ("RagmonQualityDropNDCG", "ndcg", 0.57, 0.47),
    ("RagmonQualityDropT", "t", -0.05, -0.45),
    ("RagmonHarmHigh", "harm", 0.28, 0.40),
    ("RagmonHitRateLow", "hit", 0.62, 0.50),
)


def poisson_interval(count: int, exposure: float) -> tuple[float, float]:
    """Garwood's exact 95 % interval of a Poisson rate (`count` events in `exposure`)."""
    from scipy import stats

    lo = stats.chi2.ppf(0.025, 2 * count) / 2 if count else 0.0
    return lo / exposure, stats.chi2.ppf(0.975, 2 * count + 2) / 2 / exposure


def repeated_case(
    alert: str, measure: str, held: float, changed: float, rate: float, settings: Settings,
    series: int, weeks: int, trials: int, seed: int, factor: float, repeats: Repeats,
) -> tuple[int, float, np.ndarray]:  # fmt: skip
    """(false firings, series-weeks, delays in minutes) of one alert at `rate` events a minute
    on `repeats` traffic, the rules' repeats factor `factor`."""
    if measure in LEVELS:
        fired, sw = level_firings(measure, held, rate, settings, series, weeks, seed,
                                  repeats=repeats, factor=factor)  # fmt: skip
        delays = level_delays(measure, held, changed, rate, settings, trials, seed + 1,
                              repeats=repeats, factor=factor)  # fmt: skip
        return fired, sw, np.array(delays)
    rule = Rule.of(settings, measure, repeats=factor)
    fired, days = false_firings(measure, held, 60 * rate, rule, series, 7 * weeks, seed,
                                repeats=repeats)  # fmt: skip
    delays = detection_minutes(held, held - changed, 60 * rate, rule, trials, seed + 1,
                               measure, repeats)  # fmt: skip
    return fired, days / 7, np.array(delays)


def repeated_main(
    settings: Settings, series: int, weeks: int, trials: int, seed: int, factor: float,
    gap: float,
) -> None:  # fmt: skip
    """Print every level and drop alert's false firings per series-week and detection delay
    on traffic whose questions repeat and are retried (`traffic.Repeats`)."""
    rep = Repeats(gap=gap)
    print(
        f"questions asked 1 + Poisson(1) times, {gap:g} min apart on average; {rep.burst_p:.0%} of "
        f"asks retried {rep.burst} times in their minute (E[M^2]/E[M] = "
        f"{rep.design_effect():.2f}); rules' repeats factor {factor:g}, z {settings.alert_z}; "
        f"{series} series x {weeks} weeks, {trials} changes per row\n"
    )
    print("| alert | events/min | false firings per series-week [95 % CI] | change | "
          "fired within 1 h / 6 h | median delay |")  # fmt: skip
    print("| --- | ---: | --- | --- | ---: | ---: |")
    for i, (alert, measure, held, changed) in enumerate(REPEATED_CASES):
        for j, rate in enumerate(REPEATED_RATES):
            fired, sw, d = repeated_case(alert, measure, held, changed, rate, settings, series,
                                         weeks, trials, seed + 10 * i + j, factor, rep)  # fmt: skip
            lo, hi = poisson_interval(fired, sw)
            median = np.median(d)
            print(
                f"| {alert} | {rate} | {fired / sw:.2f} [{lo:.2f}, {hi:.2f}] | {held:g} → "
                f"{changed:g} | {np.mean(d <= 60):.0%} / {np.mean(d <= 360):.0%} | "
                + (f"{median:.0f} min |" if np.isfinite(median) else "> 6 h |"),
                flush=True,
            )


def bound_main(weeks: float, trials: int, seed: int) -> None:
    """Print, per rate, what any detector can do against Hit@K's crossing (`level_bound`):
    the CUSUM's false firings on the weeks that set its threshold and on as many fresh ones."""
    (p0, p1) = [(safe, crossed) for m, safe, crossed in LEVEL_CASES if m == "hit"][0]
    alpha = level_bound.hour_alpha()
    print(
        f"Hit@K {p0} -> {p1}, at most {level_bound.FIRINGS_PER_WEEK} false firings per week "
        f"(a firing in a given hour at most {alpha:.5f}); CUSUM: {weeks:g} weeks to set its "
        f"threshold, {trials} crossings"
    )
    print(
        f"{'/min':>4} {'NP hour test <= 1 h':>19} {'CUSUM h':>7} {'per week':>8} {'fresh':>6}"
        f" {'<= 1 h':>6} {'median':>6} {'mean':>6}"
    )
    for j, rate in enumerate(LEVEL_RATES):
        power = level_bound.np_hour_power(p0, p1, 60 * rate, alpha)
        h, per_week = level_bound.cusum_threshold(p0, p1, rate, weeks, seed + j)
        fresh = level_bound.cusum_false_firings(p0, p1, rate, h, weeks, seed + 200 + j)
        delays = level_bound.cusum_delays(p0, p1, rate, h, trials, seed + 100 + j)
        print(
            f"{rate:4d} {power:19.1%} {h:7.2f} {per_week:8.3f} {fresh:6.3f}"
            f" {np.mean(delays <= 60):6.1%}"
            f" {np.median(delays):6.0f} {np.mean(delays):6.0f}",
            flush=True,
        )


def planned_main(
    settings: Settings, weight: float, series: int, days: int, weeks: int, seed: int
) -> None:
    """False firings with every judged event weighing `weight`: the rules as they are (the
    effective number of judged events) and as before (the sum of weights taken for it)."""
    print(f"planned sampling: each judged event weighs {weight:g} (judged at 1/{weight:g})")
    print(f"{'stationary traffic, judged events':44} {'rules':>8} {'firings':>7} {'per':>12}")
    for see in (True, False):
        how = "now" if see else "before"
        weighing = Weighing(weight, see)
        for i, (measure, target, rate) in enumerate((("ndcg", 0.57, 60), ("t", -0.05, 60))):
            rule = Rule.of(settings, measure)
            fired, sd = false_firings(
                measure, target, rate, rule, series, days, seed + i, weighing=weighing
            )
            name = f"drop {measure} ~{target} at {rate}/h"
            print(f"{name:44} {how:>8} {fired:7d} {30 * fired / sd:8.3f} / 30 d", flush=True)
        for j, (measure, safe, _) in enumerate(LEVEL_CASES):
            fired, sw = level_firings(
                measure, safe, 1, settings, series // 2, weeks, seed + 10 + j, weighing
            )
            name = f"level {measure} {safe} (line {LEVELS[measure][0]}) at 1/min"
            print(f"{name:44} {how:>8} {fired:7d} {fired / sw:8.3f} / week", flush=True)


CASES = (  # (measure, mean, events per hour, share of each day from 3 trending questions)
    ("ndcg", 0.57, 60, 0.0),
    ("ndcg", 0.57, 1000, 0.0),
    ("t", -0.05, 60, 0.0),
    ("t", -0.05, 1000, 0.0),
    ("ndcg", 0.57, 1000, 0.2),
    ("t", -0.05, 1000, 0.2),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=40, help="series per stationary case")
    parser.add_argument("--days", type=int, default=90, help="days evaluated per series")
    parser.add_argument("--trials", type=int, default=100, help="trials of the drop")
    parser.add_argument("--for-minutes", type=int, help="override the rules' `for`")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--levels", action="store_true", help="the level alerts only")
    parser.add_argument("--weeks", type=int, default=4, help="weeks per level-alert series")
    parser.add_argument(
        "--repeated",
        action="store_true",
        help="every level and drop alert on traffic whose questions repeat and are retried: "
        "false firings per series-week and detection delay at 1, 5 and 60 events a minute",
    )
    parser.add_argument(
        "--repeats", type=float, default=REPEATS, help="with --repeated: the rules' factor"
    )
    parser.add_argument(
        "--gap", type=float, default=60.0, help="with --repeated: minutes between asks"
    )
    parser.add_argument(
        "--bound",
        action="store_true",
        help="what any detector can do against Hit@K's crossing: the Neyman-Pearson test of "
        "the hour and the oracle CUSUM (its threshold set on series x weeks of traffic)",
    )
    parser.add_argument(
        "--planned",
        type=float,
        metavar="W",
        help="false firings only, with planned sampling: each judged event weighs W, read by "
        "the rules with the weight squares and (second line) without them, as before",
    )
    args = parser.parse_args(argv)
    s = Settings.from_env(dotenv=None)  # RAGMON_ALERT_* from the environment, else defaults
    if args.planned:
        planned_main(s, args.planned, args.series, args.days, args.weeks, args.seed)
        return 0
    if args.bound:
        bound_main(args.series * args.weeks, 10 * args.trials, args.seed)
        return 0
    if args.repeated:
        repeated_main(s, args.series, args.weeks, args.trials, args.seed, args.repeats, args.gap)
        return 0
    if args.levels:
        levels_main(s, args.series // 2, args.weeks, args.trials, args.seed)
        return 0
    print(
        f"margin nDCG {s.alert_margin_ndcg}, margin T {s.alert_margin_t}, z {s.alert_z}, "
        f"min events {s.alert_min_events}, for {Rule.of(s, 'ndcg', args.for_minutes).for_minutes}m"
    )
    print(f"{'stationary traffic':36} {'firings':>7} {'series-days':>11} {'per 30 days':>11}")
    for i, (measure, target, rate, trend) in enumerate(CASES):
        rule = Rule.of(s, measure, args.for_minutes)
        fired, days = false_firings(
            measure, target, rate, rule, args.series, args.days, args.seed + i, trend
        )
        name = f"{measure} ~{target} at {rate}/h" + (f", {trend:.0%} trending" if trend else "")
        print(f"{name:36} {fired:7d} {days:11d} {30 * fired / days:11.3f}", flush=True)
    rule = Rule.of(s, "ndcg", args.for_minutes)
    delays = np.array(detection_minutes(0.57, 0.05, 1000, rule, args.trials, args.seed + 10))
    finite = delays[np.isfinite(delays)]
    print(
        f"nDCG 0.57 -> 0.52 at 1000/h: fired within 2 h in {np.mean(delays <= 120):.0%} of "
        f"{len(delays)} trials"
        + (
            f"; median {np.median(finite):.0f} min, max {finite.max():.0f} min"
            if len(finite)
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
