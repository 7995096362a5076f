"""Synthetic production traffic with a known truth, for the statistical simulations.

A query has a fixed ranking per retriever (as a deterministic retriever and the judgment cache
give): the retriever ranks a candidate pool by score = grade + noise * z, with z fixed per
(query, candidate), so a worse retriever (more noise) ranks the same queries worse and a
repeated query always gets the same grades. Each measure comes from `ragmon.core.measures.compute`.
Queries belong to segments with different pools (so segments differ in quality), and a share
of each day can come from three "trending" queries of that day, or from one topic of that day
asked in many wordings (each wording its own query key; the topic's passages, ranked as the
topic is or each wording a little differently). Each event carries its top-K passage ids (a
query's own candidates; a topic's for its wordings), as the per-day records do.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, MeasureParams, compute
from ragmon.core.window import Window
from ragmon.report.gather import Events, WindowData
from ragmon.store import Histogram

K = 10
APP, INDEX = "shop", "kb"
# Candidate grades per query, by segment: "easy" questions have more relevant passages.
POOLS: dict[str, tuple[int, ...]] = {
    "default": (3, 2, 1, 1, 1) + (0,) * 25,
    "howto": (3, 3, 2, 2, 1, 1, 1) + (0,) * 23,
    "billing": (2, 1, 1, 1) + (0,) * 26,
    "sharp": (3, 2, 2, 1, 1, 1) + (0,) * 14,  # a good retriever: nDCG@10 ~0.84, SD ~0.12
    "distracting": (3, 2, 2) + (1,) * 8 + (0,) * 19,  # many on-topic distractors: Harm@10 >= 0.27
}
BANK = 3000  # distinct rankings per (segment, noise): a query picks one by its hash
PARAMS = MeasureParams()
PASSAGES = True  # False: records without passage ids (clusters by query key only, as before)
WEIGHTED = True  # False: judged events keep no probability (the report's plain means, as before)


@lru_cache(maxsize=16)
def _z(segment: str) -> np.ndarray:
    """Each bank query's fixed standard-normal score noise per candidate (noise levels are
    paired: a worse retriever ranks the same query worse)."""
    rng = np.random.default_rng(zlib.crc32(segment.encode()))
    return rng.standard_normal((BANK, len(POOLS[segment])))


@lru_cache(maxsize=256)
def order(segment: str, noise: float) -> np.ndarray:
    """The candidates each bank query's ranking puts first (the top 2K, best first)."""
    pool = np.array(POOLS[segment], dtype=float)
    return np.argsort(-(pool + noise * _z(segment)), axis=1, kind="stable")[:, : 2 * K]


def _measures(grades: Sequence[int], segment: str) -> dict[str, float]:
    """Every measure of one ranking; the pooled ones against the query's whole candidate set (a
    warm pool: ragmon has seen every candidate of the query from some retriever)."""
    values = compute(list(grades), K, PARAMS, pool=POOLS[segment])
    return {m: np.nan if values[m] is None else float(values[m]) for m in HISTOGRAM_MEASURES}


@lru_cache(maxsize=256)
def bank(segment: str, noise: float) -> dict[str, np.ndarray]:
    """Each measure of `BANK` queries' rankings (NaN where undefined)."""
    grades = np.array(POOLS[segment])[order(segment, noise)]
    out = {m: np.empty(BANK) for m in HISTOGRAM_MEASURES}
    for i in range(BANK):
        values = _measures(grades[i].tolist(), segment)
        for m in HISTOGRAM_MEASURES:
            out[m][i] = values[m]
    return out


@lru_cache(maxsize=65536)
def wording(
    segment: str, noise: float, topic: int, word: int, spread: float
) -> tuple[dict[str, float], tuple[int, ...]]:
    """One wording of a topic: its measures and its top-K candidates. The topic's ranking is a
    bank query's (`topic` picks it); with `spread`, each wording adds its own noise to the
    topic's scores (`spread` times the topic's), so wordings rank the same passages a little
    differently; with 0, every wording gets the topic's ranking."""
    row = topic * 2654435761 % (2**32) % BANK
    if not spread:
        top = order(segment, noise)[row]
    else:
        pool = np.array(POOLS[segment], dtype=float)
        z = np.random.default_rng([topic, word]).standard_normal(len(pool))
        score = pool + noise * (_z(segment)[row] + spread * z)
        top = np.argsort(-score, kind="stable")[: 2 * K]
    return _measures(np.array(POOLS[segment])[top].tolist(), segment), tuple(top[:K].tolist())


def noise_for_mean(segment: str, target: float, measure: str = "ndcg") -> float:
    """The ranking noise whose mean `measure` over the bank is `target` (bisection; the mean
    falls as the noise grows)."""
    lo, hi = 0.0, 40.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if np.nanmean(bank(segment, round(mid, 6))[measure]) > target:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 6)


@dataclass
class Stream:
    """One retriever's traffic in one window."""

    retriever: str
    per_week: int
    noise: float
    segments: dict[str, float] = field(default_factory=lambda: {"default": 1.0})
    trending: float = 0.0  # share of each day's events from that day's 3 trending queries
    repeat_pool: int = 20_000  # regular queries are drawn from this many (some repeat)
    paraphrased: float = 0.0  # share of each day's events asking that day's topic in other words
    wordings: int = 50  # distinct wordings of a paraphrased topic (each its own query key)
    spread: float = 0.0  # 0: every wording gets the topic's ranking; else each its own (`wording`)
    weekly: bool = False  # one paraphrased topic all week (a trending week), not one a day
    # planned sampling: the inclusion probability of an event whose nDCG is below the bank's
    # median, and of one at or above it (rates that follow quality, as rates that follow the
    # time of day do when quality does); the judged events keep it, the histograms weigh 1 / it
    judged: tuple[float, float] = (1.0, 1.0)
    # passage ids from a small knowledge base of this many documents (0: each query its own):
    # a query's candidates are documents of its topic's neighbourhood (`kb_ids`)
    kb: int = 0


PARAPHRASE = 30_000_000  # query ids from here on: a topic's wordings (topic * 1000 + wording)


def _query_ids(rng: np.random.Generator, s: Stream, day: int, n: int, salt: int) -> np.ndarray:
    """Query ids for one day: trending ones (shared by every retriever that day), wordings of
    the day's paraphrased topic (shared too), the rest drawn from the regular pool (the same
    pool in every window: questions recur)."""
    u = rng.random(n)
    trend = u < s.trending
    para = (u >= s.trending) & (u < s.trending + s.paraphrased)
    ids = rng.integers(0, s.repeat_pool, size=n)
    ids[trend] = 10_000_000 + salt * 1000 + day * 3 + rng.integers(0, 3, size=int(trend.sum()))
    topic = PARAPHRASE + salt * 10 + (0 if s.weekly else day)
    ids[para] = topic * 1000 + rng.integers(0, s.wordings, size=int(para.sum()))
    return ids


KB_TOPIC = 10  # documents per topic of a small knowledge base
KB_REACH = 30  # a query's candidates come from this many documents from its topic's first on


def kb_ids(owner: np.ndarray, top: np.ndarray, kb: int) -> np.ndarray:
    """Top-K passage ids in a knowledge base of `kb` documents: a query's topic is one of
    kb / KB_TOPIC; its candidate c is a document among the KB_REACH from its topic's first (a
    fixed draw per query and candidate), so questions of one topic, and of neighbouring topics,
    share documents as they do on a small knowledge base, but each ranks them its own way."""
    topic = owner[:, None] % (kb // KB_TOPIC)
    h = (owner[:, None] * 1_000_003 + top * 7919) * 2654435761 % (2**32)
    return (topic * KB_TOPIC + h % KB_REACH) % kb


def window_data(
    rng: np.random.Generator, window: Window, streams: Sequence[Stream], salt: int
) -> WindowData:
    """What the store would hold for these streams: histograms, counters and record columns.

    `salt` tells the windows apart (trending queries differ every day and every week)."""
    hists: dict[str, dict[tuple[str, ...], Histogram]] = {}
    counters: dict[str, float] = {}
    data = WindowData(window, hists, counters, days_with_data=len(window.days))
    for s in streams:
        ev = Events()
        per_day = rng.multinomial(s.per_week, [1 / 7] * 7)
        names = list(s.segments)
        shares = np.array([s.segments[x] for x in names])
        for day, n in enumerate(per_day):
            qids = _query_ids(rng, s, day, int(n), salt)
            # a query's segment is a property of the query (stable over windows) except when
            # the mix is drawn: the segment is drawn per event with the stream's shares
            seg_idx = rng.choice(len(names), size=int(n), p=shares / shares.sum())
            for seg_i in range(len(names)):
                pick = seg_idx == seg_i
                if not pick.any():
                    continue
                seg = names[seg_i]
                q = qids[pick]
                rows = (q * 2654435761 % (2**32)) % BANK
                values = bank(seg, s.noise)
                columns = {m: values[m][rows] for m in HISTOGRAM_MEASURES}
                # passage ids: a query's own candidates (a topic's, for its wordings)
                owner = np.where(q >= PARAPHRASE * 1000, q // 1000, q)
                top = order(seg, s.noise)[rows, :K]
                for i in np.flatnonzero(q >= PARAPHRASE * 1000):
                    got, top_i = wording(seg, s.noise, int(owner[i]), int(q[i] % 1000), s.spread)
                    for m in HISTOGRAM_MEASURES:
                        columns[m][i] = got[m]
                    top[i] = top_i
                pids = (
                    kb_ids(owner, top, s.kb) if s.kb else seg_i * 2**40 + owner[:, None] * 64 + top
                )
                prob, keep = np.ones(len(q)), np.ones(len(q), dtype=bool)
                if s.judged != (1.0, 1.0):  # (no draw otherwise: the other scenarios' seeds hold)
                    low = columns["ndcg"] < np.nanmedian(values["ndcg"])
                    prob = np.where(low, s.judged[0], s.judged[1])
                    keep = rng.random(len(q)) < prob
                q, pids, prob = q[keep], pids[keep], prob[keep]
                ev.segments += [seg] * len(q)
                ev.queries += [f"{seg}:{x}" for x in q.tolist()]
                ev.lengths += (5.0 + (q % 7)).tolist()
                ev.passages += [tuple(r) for r in pids.tolist()] if PASSAGES else [()] * len(q)
                ev.probs += prob.tolist() if WEIGHTED else [1.0] * len(q)
                for m in HISTOGRAM_MEASURES:
                    ev.values.setdefault(m, []).extend(columns[m][keep].tolist())
        data.events[(APP, INDEX, s.retriever)] = ev
        _fill_aggregates(data, s.retriever, ev)
    return data


def _fill_aggregates(data: WindowData, retriever: str, ev: Events) -> None:
    segs = np.array(ev.segments)
    for seg in sorted(set(ev.segments)):
        pick = segs == seg
        labels = (APP, INDEX, retriever, seg)
        n = int(pick.sum())
        data.counters["|".join(["events", *labels])] = n
        data.counters["|".join(["k_sum", *labels])] = n * K
        weights = 1.0 / np.array(ev.probs)[pick]
        for m in HISTOGRAM_MEASURES:
            v = np.array(ev.values[m])[pick]
            ok = ~np.isnan(v)
            v, w = v[ok], weights[ok]
            idx = np.searchsorted(np.array(BUCKETS[m]), v - 1e-12, side="left")
            if (w == 1.0).all():  # every event judged: counts, as in `fixed` mode
                counts = np.bincount(idx, minlength=len(BUCKETS[m]) + 1)
                hist = Histogram(counts.tolist(), float(v.sum()), len(v), float(np.dot(v, v)))
            else:  # `planned`: each judged event adds 1 / its probability (docs/sampling.md)
                counts = np.bincount(idx, weights=w, minlength=len(BUCKETS[m]) + 1)
                hist = Histogram(counts.tolist(), float(w @ v), float(w.sum()), float(w @ (v * v)))  # type: ignore[arg-type]
            data.hists.setdefault(f"retrieval_{m}", {})[labels] = hist


def ask_times(
    rng: np.random.Generator, first: np.ndarray, m: np.ndarray, gap: float = 60.0
) -> np.ndarray:
    """Each question's asks: the first at its minute, each further one an exponential `gap`
    minutes (on average) after the one before (`m`: how many asks each question has)."""
    gaps = rng.exponential(gap, size=int(m.sum()))
    start = np.repeat(np.cumsum(m) - m, m)  # index of each question's first ask
    gaps[start == np.arange(len(gaps))] = 0.0
    csum = np.cumsum(gaps)
    return np.repeat(first, m) + csum - csum[start]


@dataclass(frozen=True)
class Repeats:
    """Dependent traffic: each question is asked 1 + Poisson(1) times, `gap` minutes apart on
    average (`ask_times`), and each ask is retried `burst` times within its minute with
    probability `burst_p` (a user or a client retrying); every ask and retry carries the
    question's value."""

    burst_p: float = 0.01
    burst: int = 8
    gap: float = 60.0

    def mean_size(self) -> float:
        """Events per question, E[M]."""
        return 2.0 * (1 + self.burst_p * self.burst)

    def design_effect(self) -> float:
        """E[M^2] / E[M]: how much more a mean over whole questions varies than one over as
        many independent events (M = the sum over 1 + Poisson(1) asks of 1 + its retries)."""
        a1 = 1 + self.burst_p * self.burst
        a2 = 1 + self.burst_p * (2 * self.burst + self.burst**2)
        m2 = 2 * (a2 - a1 * a1) + 5 * a1 * a1  # E[m] Var(A) + E[m^2] E[A]^2
        return m2 / self.mean_size()


def repeated_counters(
    rng: np.random.Generator, per_minute: float, minutes: int, values: np.ndarray,
    after: tuple[int, np.ndarray] | None = None, repeats: Repeats = Repeats(),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Cumulative _count, _sum and _sum_squares at the end of each minute of `repeats`
    traffic at `per_minute` events a minute: questions arrive per minute (Poisson), each with a
    value drawn from `values`; from minute `after[0]` on, its asks carry its value drawn from
    `after[1]` instead (a changed retriever)."""
    t = np.arange(minutes)
    first = np.repeat(t, rng.poisson(per_minute / repeats.mean_size(), size=minutes))
    m = 1 + rng.poisson(1.0, size=len(first))
    question = np.repeat(np.arange(len(first)), m)
    at = ask_times(rng, first, m, repeats.gap)
    value = values[rng.integers(0, len(values), size=len(first))][question]
    if after is not None:
        late = after[1][rng.integers(0, len(after[1]), size=len(first))][question]
        value = np.where(at >= after[0], late, value)
    retries = np.where(rng.random(len(at)) < repeats.burst_p, repeats.burst, 0)
    at, value = np.repeat(at, 1 + retries), np.repeat(value, 1 + retries)
    keep = at < minutes
    minute, v = at[keep].astype(int), value[keep]
    n = np.bincount(minute, minlength=minutes)
    s = np.bincount(minute, weights=v, minlength=minutes)
    q = np.bincount(minute, weights=v * v, minlength=minutes)
    return np.cumsum(n).astype(float), np.cumsum(s), np.cumsum(q)
