"""The retrieval signals of every event (docs/signals.md), this window against the baseline,
per retriever: what the app sent moved or not, read beside the judged measures, so a quality
drop comes with its likely cause (empties, short results, scores, the query mix) or the
statement that none of them moved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragmon.core import drift
from ragmon.core.signals import SIGNALS
from ragmon.core.wire import field_parts
from ragmon.report.compare import PSI_ALPHA, Group, group_hist, group_of
from ragmon.report.gather import WindowData
from ragmon.store.fields import Name

SHORT = "Short results (M < K)"
DISTINCT = "Distinct queries (per event)"


@dataclass(frozen=True)
class SignalShift:
    """One signal of one retriever: its means (a share for `share` ones), its PSI on the fixed
    bins (for a share: its two bins, in and out), and whether it moved (PSI at least moderate,
    and rarer than `PSI_ALPHA` with no change)."""

    name: str
    base_mean: float
    cur_mean: float
    psi: float
    moved: bool
    share: bool = False

    def __str__(self) -> str:
        f = ".1%" if self.share else ".3g"
        return f"{self.name} {self.base_mean:{f}} → {self.cur_mean:{f}} (PSI {self.psi:.2f})"


@dataclass(frozen=True)
class GroupSignals:
    """A retriever's signals in both windows: events received, empty share, short share,
    distinct queries (None where the window's HyperLogLogs are no longer kept), each signal."""

    group: Group
    events: tuple[int, int]  # baseline, this window
    empty: tuple[float, float]  # share of events with no passage
    shifts: tuple[SignalShift, ...]
    short: tuple[float, float] = (0.0, 0.0)  # share of events with M < K (empty ones too)
    queries: tuple[int, int] | None = None  # distinct queries

    @property
    def moved(self) -> list[SignalShift]:
        return [s for s in self.shifts if s.moved]

    def reading(self) -> str:
        """The moved signals in words, or that none moved."""
        return "; ".join(map(str, self.moved)) if self.moved else "none moved"


def _shift(name: str, base: Sequence[float], cur: Sequence[float], means: tuple[float, float],
           share: bool = False) -> SignalShift:  # fmt: skip
    value = drift.psi(base, cur)
    p = drift.psi_pvalue(base, cur)
    moved = value >= drift.PSI_MODERATE and p < PSI_ALPHA
    return SignalShift(name, means[0], means[1], value, moved, share)


def _share_shift(name: str, counts: tuple[float, float], events: tuple[int, int]) -> SignalShift:
    """A share (`counts` of `events` in each window) as a signal of two bins."""
    base, cur = ([c, n - c] for c, n in zip(counts, events, strict=True))
    return _shift(name, base, cur, (counts[0] / events[0], counts[1] / events[1]), share=True)


def short_results(w: WindowData, group: Group) -> int:
    """The group's events with M < K in the window (the day counters INGEST writes)."""
    total = 0
    for key, value in w.counters.items():
        parts = field_parts(key)
        if parts[0] == Name.SIGNAL_SHORT and len(parts) == 5 and group_of(parts[1:4]) == group:
            total += int(value)
    return total


def group_signals(base: WindowData, cur: WindowData, group: Group) -> GroupSignals | None:
    """`group`'s signals in both windows (None: it has no events in one of them)."""
    results = [group_hist(w.hists, "results", group, prefix="signal_") for w in (base, cur)]
    if not (results[0] and results[1]):
        return None
    events = (results[0].count, results[1].count)
    shifts = []
    for s in SIGNALS:
        b, c = (group_hist(w.hists, s.key, group, prefix="signal_") for w in (base, cur))
        if b and c:
            shifts.append(_shift(s.name, b.buckets, c.buckets, (b.sum / b.count, c.sum / c.count)))
    short = (short_results(base, group), short_results(cur, group))
    shifts.append(_share_shift(SHORT, short, events))
    queries = (base.distinct_queries.get(group, 0), cur.distinct_queries.get(group, 0))
    known = all(queries)  # an event's window has at least 1 query: 0 is a window not kept
    if known:  # HyperLogLog estimates (0.81 %): never above the events
        shifts.append(_share_shift(DISTINCT, (min(queries[0], events[0]),
                                              min(queries[1], events[1])), events))  # fmt: skip
    empty = (results[0].buckets[0] / events[0], results[1].buckets[0] / events[1])
    return GroupSignals(group, events, empty, tuple(shifts),
                        (short[0] / events[0], short[1] / events[1]),
                        queries if known else None)  # fmt: skip


def signal_changes(cur: WindowData, base: WindowData) -> dict[Group, GroupSignals]:
    """Every retriever with signals in both windows."""
    out = {}
    names = (w.hists.get("signal_results", {}) for w in (cur, base))
    for g in sorted({group_of(lbl) for series in names for lbl in series}):
        found = group_signals(base, cur, g)
        if found is not None:
            out[g] = found
    return out
