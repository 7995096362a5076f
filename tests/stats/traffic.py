"""Synthetic production traffic with a known truth, for the statistical simulations.

A query has a fixed ranking per retriever (as a deterministic retriever and the judgment cache
give): the retriever ranks a candidate pool by score = grade + noise * z, with z fixed per
(query, candidate), so a worse retriever (more noise) ranks the same queries worse and a
repeated query always gets the same grades. Each measure comes from `ragmon.core.measures.compute`.
Queries belong to segments with different pools (so segments differ in quality), and a share
of each day can come from three "trending" queries of that day.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, MeasureParams, compute
from ragmon.report.gather import Events, WindowData
from ragmon.report.window import Window
from ragmon.store import Histogram

K = 10
APP, INDEX = "shop", "kb"
# Candidate grades per query, by segment: "easy" questions have more relevant passages.
POOLS: dict[str, tuple[int, ...]] = {
    "default": (3, 2, 1, 1, 1) + (0,) * 25,
    "howto": (3, 3, 2, 2, 1, 1, 1) + (0,) * 23,
    "billing": (2, 1, 1, 1) + (0,) * 26,
    "sharp": (3, 2, 2, 1, 1, 1) + (0,) * 14,  # a good retriever: nDCG@10 ~0.84, SD ~0.12
}
BANK = 3000  # distinct rankings per (segment, noise): a query picks one by its hash
PARAMS = MeasureParams()


@lru_cache(maxsize=256)
def bank(segment: str, noise: float) -> dict[str, np.ndarray]:
    """Each measure of `BANK` queries' rankings (NaN where undefined)."""
    pool = np.array(POOLS[segment], dtype=float)
    rng = np.random.default_rng(zlib.crc32(segment.encode()))
    z = rng.standard_normal((BANK, len(pool)))  # fixed per query: noise levels are paired
    order = np.argsort(-(pool + noise * z), axis=1, kind="stable")[:, : 2 * K]
    grades = pool[order].astype(int)
    out = {m: np.empty(BANK) for m in HISTOGRAM_MEASURES}
    for i in range(BANK):
        values = compute(grades[i].tolist(), K, PARAMS)
        for m in HISTOGRAM_MEASURES:
            v = values[m]
            out[m][i] = np.nan if v is None else v
    return out


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


def _query_ids(rng: np.random.Generator, s: Stream, day: int, n: int, salt: int) -> np.ndarray:
    """Query ids for one day: trending ones (shared by every retriever that day), the rest
    drawn from the regular pool (the same pool in every window: questions recur)."""
    trend = rng.random(n) < s.trending
    ids = rng.integers(0, s.repeat_pool, size=n)
    ids[trend] = 10_000_000 + salt * 1000 + day * 3 + rng.integers(0, 3, size=int(trend.sum()))
    return ids


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
                ev.segments += [seg] * len(q)
                ev.queries += [f"{seg}:{x}" for x in q.tolist()]
                ev.lengths += (5.0 + (q % 7)).tolist()
                for m in HISTOGRAM_MEASURES:
                    ev.values.setdefault(m, []).extend(values[m][rows].tolist())
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
        for m in HISTOGRAM_MEASURES:
            v = np.array(ev.values[m])[pick]
            v = v[~np.isnan(v)]
            idx = np.searchsorted(np.array(BUCKETS[m]), v - 1e-12, side="left")
            counts = np.bincount(idx, minlength=len(BUCKETS[m]) + 1)
            data.hists.setdefault(f"retrieval_{m}", {})[labels] = Histogram(
                counts.tolist(), float(v.sum()), len(v), float(np.dot(v, v))
            )
