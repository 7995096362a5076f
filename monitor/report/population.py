"""Did the traffic itself change? The segment mix, and where no segment is sent, the query
population (share of repeated questions, question length). Either can move a mean without any
retriever getting worse, so the report names them apart from regressions."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from ragmon.core import drift
from ragmon.report.compare import Coded, Group, group_name

MIX_MIN_SHARE = 0.05  # a segment's share must move at least this much to be called a mix shift
REPEAT_MIN_CHANGE = 0.10  # change in the share of repeated questions worth saying
LENGTH_MIN_CHANGE = 0.20  # relative change in mean question length worth saying
# The population's shifts are context for the verdicts, not verdicts: named only on strong
# evidence, apart from the regressions' family.
SHIFT_ALPHA = 0.01


@dataclass
class SegmentMix:
    """Each segment's share of a retriever's events in both windows, and whether it moved."""

    group: Group
    shares: list[tuple[str, float, float]]  # (segment, baseline share, current share)
    pvalue: float  # smallest per-segment p-value, Bonferroni over the segments
    moved: bool

    def moved_words(self) -> str:
        parts = [
            f"`{s}` {b:.0%} → {c:.0%}"
            for s, b, c in sorted(self.shares, key=lambda x: -abs(x[2] - x[1]))
            if abs(c - b) >= MIX_MIN_SHARE
        ]
        return ", ".join(parts[:3])


@dataclass
class QueryPopulation:
    """Cheap signs that a different kind of question arrives (useful with no segments)."""

    group: Group
    repeat_base: float  # share of events repeating an earlier question of the window
    repeat_cur: float  # (the larger window subsampled to the smaller's volume)
    length_base: float | None  # mean words per question
    length_cur: float | None
    length_p: float | None
    moved: list[str] = field(default_factory=list)


def segment_mix(group: Group, coded: Coded) -> SegmentMix | None:
    """The segment shares side by side; None when the retriever has a single segment."""
    names = coded.segment_names
    if len(names) < 2:
        return None
    nb, nc = len(coded.base), len(coded.cur)
    shares, pmin = [], 1.0
    zeros_b, zeros_c = np.zeros(nb, int), np.zeros(nc, int)
    moved = False
    for code, name in enumerate(names):
        ib = (coded.seg_b == code).astype(float)
        ic = (coded.seg_c == code).astype(float)
        b, c = float(ib.mean()), float(ic.mean())
        shares.append((name, b, c))
        if nb >= 2 and nc >= 2:
            ch = drift.segment_change(
                drift.Sample(ib, zeros_b, coded.clu_b), drift.Sample(ic, zeros_c, coded.clu_c)
            )
            pmin = min(pmin, ch.pvalue)
            if ch.pvalue * len(names) < SHIFT_ALPHA and abs(c - b) >= MIX_MIN_SHARE:
                moved = True
    return SegmentMix(group, shares, min(1.0, pmin * len(names)), moved)


def _repeat_share(queries: list[str]) -> float:
    return 1.0 - len(set(queries)) / len(queries) if queries else 0.0


def query_population(group: Group, coded: Coded) -> QueryPopulation:
    """Repeated-question share at equal volume and mean question length, week over week."""
    qb, qc = coded.base.queries, coded.cur.queries
    n = min(len(qb), len(qc))
    rng = np.random.default_rng(zlib.crc32(group_name(group).encode()))

    def at(queries: list[str]) -> list[str]:
        if len(queries) == n:
            return queries
        keep = np.sort(rng.choice(len(queries), size=n, replace=False))
        return [queries[i] for i in keep]

    pop = QueryPopulation(group, _repeat_share(at(qb)), _repeat_share(at(qc)), None, None, None)
    if abs(pop.repeat_cur - pop.repeat_base) >= REPEAT_MIN_CHANGE:
        pop.moved.append(
            f"repeated questions {pop.repeat_base:.0%} → {pop.repeat_cur:.0%} of events"
        )
    lb, lc = np.array(coded.base.lengths), np.array(coded.cur.lengths)
    ob, oc = ~np.isnan(lb), ~np.isnan(lc)
    if ob.sum() >= 2 and oc.sum() >= 2:
        ch = drift.segment_change(
            drift.Sample(lb[ob], np.zeros(int(ob.sum()), int), coded.clu_b[ob]),
            drift.Sample(lc[oc], np.zeros(int(oc.sum()), int), coded.clu_c[oc]),
        )
        pop.length_base, pop.length_cur = float(lb[ob].mean()), float(lc[oc].mean())
        pop.length_p = ch.pvalue
        rel = abs(ch.total) / pop.length_base if pop.length_base else 0.0
        if ch.pvalue < SHIFT_ALPHA and rel >= LENGTH_MIN_CHANGE:
            pop.moved.append(
                f"questions {pop.length_base:.1f} → {pop.length_cur:.1f} words on average"
            )
    return pop
