"""What any detector can do against a fall of the hit rate within an hour: the level alerts' bound.

Hit@K is one Bernoulli event per query. A rule that fires at most `FIRINGS_PER_WEEK` times a
week on stationary traffic at the safe level p0 starts firing in a given hour with probability
at most `hour_alpha()` (the expected firings in an hour bound the probability of one), so the
probability that it fires within the hour after the level moves to p1 is at most the power of
the Neyman-Pearson test of p0 against p1 on that hour's events at that size (the events before
the change are alike under both, and any detector is one such test): `np_hour_power`. The
oracle CUSUM (it knows p0 and p1; the optimal sequential detector for the worst-case mean
delay, Lorden 1971, Moustakides 1986) shows what a detector that does not know when the change
came achieves: `cusum_threshold` sets its threshold by simulation for the same false-firing
rate, `cusum_delays` measures its delay. `python -m tests.stats.alert_sim --bound` prints both.
"""

from __future__ import annotations

import math

import numpy as np

FIRINGS_PER_WEEK = 0.5  # the level alerts' limit of false firings per series per week
WEEK_MINUTES = 7 * 1440


def hour_alpha(per_week: float = FIRINGS_PER_WEEK) -> float:
    """The largest probability of a firing in a given hour that `per_week` firings allow."""
    return per_week / (WEEK_MINUTES / 60)


def _log_factorials(top: int) -> np.ndarray:
    """log(k!) for k = 0..top."""
    return np.array([math.lgamma(k + 1) for k in range(top + 1)])


def _binom_pmf(n: int, p: float, log_fact: np.ndarray | None = None) -> np.ndarray:
    """P(X = x) for x = 0..n, X ~ Binomial(n, p), from log-gamma (no scipy)."""
    lf = _log_factorials(n) if log_fact is None else log_fact
    x = np.arange(n + 1)
    return np.exp(lf[n] - lf[x] - lf[n - x] + x * math.log(p) + (n - x) * math.log1p(-p))


def _most_powerful(llr: np.ndarray, w0: np.ndarray, w1: np.ndarray, alpha: float) -> float:
    """Power of the randomized likelihood-ratio test of size `alpha`: outcomes with log
    likelihood ratios `llr`, probabilities `w0` under H0 and `w1` under H1."""
    order = np.argsort(-llr, kind="stable")
    a0, a1 = w0[order], w1[order]
    # outcomes of equal ratio enter together (ties would otherwise depend on the order)
    keys = np.round(llr[order], 12)
    edges = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    g0, g1 = np.add.reduceat(a0, edges), np.add.reduceat(a1, edges)
    c0 = np.cumsum(g0)
    k = int(np.searchsorted(c0, alpha, side="right"))  # groups taken whole
    taken0 = float(c0[k - 1]) if k else 0.0
    power = float(g1[:k].sum())
    if k < len(g0) and g0[k] > 0:
        power += (alpha - taken0) / float(g0[k]) * float(g1[k])  # the boundary, randomized
    return power


def np_power_fixed(p0: float, p1: float, n: int, alpha: float) -> float:
    """Power of the most powerful test of size `alpha` of p0 against p1 on n Bernoulli events."""
    x = np.arange(n + 1)
    llr = x * math.log(p1 / p0) + (n - x) * math.log((1 - p1) / (1 - p0))
    return _most_powerful(llr, _binom_pmf(n, p0), _binom_pmf(n, p1), alpha)


def np_hour_power(p0: float, p1: float, mean_events: float, alpha: float) -> float:
    """Power of the most powerful test of size `alpha` of p0 against p1 on one hour of events,
    their number Poisson with mean `mean_events` (alike under both: the test reads the hits
    and the number together)."""
    top = int(mean_events + 12 * math.sqrt(mean_events) + 20)
    lf = _log_factorials(top)
    llrs, w0s, w1s = [], [], []
    for n in range(top + 1):
        x = np.arange(n + 1)
        llrs.append(x * math.log(p1 / p0) + (n - x) * math.log((1 - p1) / (1 - p0)))
        pn = math.exp(-mean_events + n * math.log(mean_events) - lf[n])
        w0s.append(pn * _binom_pmf(n, p0, lf))
        w1s.append(pn * _binom_pmf(n, p1, lf))
    return _most_powerful(np.concatenate(llrs), np.concatenate(w0s), np.concatenate(w1s), alpha)


def _increments(hits: np.ndarray, p0: float, p1: float) -> np.ndarray:
    """Each event's log likelihood ratio of p1 against p0."""
    return np.where(hits, math.log(p1 / p0), math.log((1 - p1) / (1 - p0)))


def cusum_alarms(llr: np.ndarray, h: float, block: int = 1 << 16) -> tuple[list[int], float]:
    """Alarm indexes of the CUSUM S_t = max(0, S_{t-1} + llr_t), S_0 = 0, alarming when
    S_t >= h and restarting from 0, and the final S. Vectorized: within a stretch that starts
    at S0, S_t = Z_t - min(-S0, min_{s<=t} Z_s) with Z the running sum (Lindley)."""
    alarms: list[int] = []
    s0, start = 0.0, 0
    while start < len(llr):
        z = np.cumsum(llr[start : start + block])
        s = z - np.minimum(np.minimum.accumulate(z), -s0)
        over = np.flatnonzero(s >= h)
        if len(over):
            alarms.append(start + int(over[0]))
            s0, start = 0.0, start + int(over[0]) + 1
        else:
            s0, start = float(s[-1]), start + len(z)
    return alarms, s0


def _stationary(p0: float, p1: float, per_minute: float, weeks: float, seed: int) -> np.ndarray:
    """The increments of `weeks` of traffic at p0 (a Poisson number of events)."""
    rng = np.random.default_rng(seed)
    events = int(rng.poisson(per_minute * WEEK_MINUTES * weeks))
    return _increments(rng.random(events) < p0, p0, p1)


def cusum_false_firings(
    p0: float, p1: float, per_minute: float, h: float, weeks: float, seed: int
) -> float:
    """Firings per week of the CUSUM with threshold `h` on `weeks` of traffic at p0."""
    return len(cusum_alarms(_stationary(p0, p1, per_minute, weeks, seed), h)[0]) / weeks


def cusum_threshold(
    p0: float, p1: float, per_minute: float, weeks: float, seed: int,
    per_week: float = FIRINGS_PER_WEEK,
) -> tuple[float, float]:  # fmt: skip
    """The smallest threshold (to 0.01) whose CUSUM fires at most `per_week` times a week on
    `weeks` of simulated stationary traffic at p0, and that rate."""
    llr = _stationary(p0, p1, per_minute, weeks, seed)
    lo, hi = 0.0, 40.0
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        if len(cusum_alarms(llr, mid)[0]) / weeks <= per_week:
            hi = mid
        else:
            lo = mid
    return hi, len(cusum_alarms(llr, hi)[0]) / weeks


def cusum_delays(
    p0: float, p1: float, per_minute: float, h: float, trials: int, seed: int, hours: int = 24
) -> np.ndarray:
    """Minutes from the level moving from p0 to p1 to the CUSUM's alarm (inf: not within
    `hours`); the CUSUM starts each trial where a day of traffic at p0 left it."""
    rng = np.random.default_rng(seed)
    out = np.full(trials, np.inf)
    n_after = int(per_minute * 60 * hours)
    for i in range(trials):
        warm = _increments(rng.random(int(rng.poisson(per_minute * 1440))) < p0, p0, p1)
        s0 = cusum_alarms(warm, h)[1]
        z = np.cumsum(_increments(rng.random(n_after) < p1, p0, p1))
        s = z - np.minimum(np.minimum.accumulate(z), -s0)
        over = np.flatnonzero(s >= h)
        if len(over):  # the k-th event after the change arrives at a Gamma(k, rate) time
            out[i] = rng.gamma(int(over[0]) + 1, 1 / per_minute)
    return out
