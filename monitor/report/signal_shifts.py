"""The retrieval signals of every event (docs/signals.md), this window against the baseline,
per retriever: what the app sent moved or not, read beside the judged measures, so a quality
drop comes with its likely cause (empties, scores, the query mix) or the statement that none
of them moved."""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.core import drift
from ragmon.core.signals import SIGNALS
from ragmon.report.compare import PSI_ALPHA, Group, group_hist, group_of
from ragmon.report.gather import Hists, WindowData
from ragmon.store import Histogram


@dataclass(frozen=True)
class SignalShift:
    """One signal of one retriever: its means, its PSI on the fixed bins, and whether it
    moved (PSI at least moderate, and rarer than `PSI_ALPHA` with no change)."""

    name: str
    base_mean: float
    cur_mean: float
    psi: float
    moved: bool

    def __str__(self) -> str:
        return f"{self.name} {self.base_mean:.3g} → {self.cur_mean:.3g} (PSI {self.psi:.2f})"


@dataclass(frozen=True)
class GroupSignals:
    """A retriever's signals in both windows: events received, empty share, each signal."""

    group: Group
    events: tuple[int, int]  # baseline, this window
    empty: tuple[float, float]  # share of events with no passage
    shifts: tuple[SignalShift, ...]

    @property
    def moved(self) -> list[SignalShift]:
        return [s for s in self.shifts if s.moved]

    def reading(self) -> str:
        """The moved signals in words, or that none moved."""
        return "; ".join(map(str, self.moved)) if self.moved else "none moved"


def _shift(name: str, base: Histogram, cur: Histogram) -> SignalShift:
    value = drift.psi(base.buckets, cur.buckets)
    p = drift.psi_pvalue(base.buckets, cur.buckets)
    moved = value >= drift.PSI_MODERATE and p < PSI_ALPHA
    return SignalShift(name, base.sum / base.count, cur.sum / cur.count, value, moved)


def group_signals(base: Hists, cur: Hists, group: Group) -> GroupSignals | None:
    """`group`'s signals in both windows (None: it has no events in one of them)."""
    results = [group_hist(h, "results", group, prefix="signal_") for h in (base, cur)]
    if not (results[0] and results[1]):
        return None
    shifts = []
    for s in SIGNALS:
        b, c = (group_hist(h, s.key, group, prefix="signal_") for h in (base, cur))
        if b and c:
            shifts.append(_shift(s.name, b, c))
    events = (results[0].count, results[1].count)
    empty = (results[0].buckets[0] / events[0], results[1].buckets[0] / events[1])
    return GroupSignals(group, events, empty, tuple(shifts))


def signal_changes(cur: WindowData, base: WindowData) -> dict[Group, GroupSignals]:
    """Every retriever with signals in both windows."""
    out = {}
    names = (w.hists.get("signal_results", {}) for w in (cur, base))
    for g in sorted({group_of(lbl) for series in names for lbl in series}):
        found = group_signals(base.hists, cur.hists, g)
        if found is not None:
            out[g] = found
    return out
