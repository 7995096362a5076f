"""Small series: a change-point scan over the weeks whose records are kept, when one week is
too few.

A retriever below the weekly minimum (`compare.MIN_EVENTS` events from `compare.MIN_QUERIES`
questions in each window) never gets a one-week verdict. For such a retriever the report splits
its weeks of history (7-day blocks ending on the report's last day, as many as its records are
kept, at most `gather.SMALL_HISTORY_WEEKS`) in two at every week where
both sides hold `SMALL_MIN_EVENTS` events from `SMALL_MIN_QUERIES` questions, compares the weeks
after the split with the weeks before it, and keeps the split where the mean moves most; the p
of that largest move comes from re-assigning (question, week) blocks between the weeks
(`drift.changepoint_pvalue`), so it holds for the scan as a whole. Comparing the weeks since a
change with the weeks before it keeps a drop showing week after week until it recovers (a
baseline of the weeks just before this window would soon hold the dropped weeks), and the
more weeks precede a change, the surer its p: so the scan reads every week still kept. The
comparisons join the report's one Holm family (`tests/stats/report_sim.py`, the "tiny" and
"small" scenarios; `tests/stats/small_drop_sim.py`, weeks after a drop).

Spans apply to a 7-day report against the 7 days before it (the weekly report's default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ragmon.core.window import Window
from ragmon.report.gather import (
    Events,
    Group,
    WindowData,
    merge_counters,
    merge_hists,
)

SMALL_MIN_EVENTS = 8  # on each side of a split (2 a week over four weeks: the smallest compared)
# With fewer distinct questions per window no permutation p-value can be below 0.01:
# 2 / C(5 + 5, 5) = 0.008.
SMALL_MIN_QUERIES = 5


def merge_events(parts: Sequence[Events]) -> Events:
    """One group's records of several windows, as one window's columns."""
    out = Events()
    n = 0
    for ev in parts:
        out.segments += ev.segments
        out.queries += ev.queries
        out.lengths += ev.lengths
        out.passages += ev.passages
        out.probs += ev.probs
        for m, column in ev.values.items():
            out.values.setdefault(m, [float("nan")] * n).extend(column)
        n += len(ev)
        for column in out.values.values():
            column.extend([float("nan")] * (n - len(column)))
    return out


def merge_windows(parts: Sequence[WindowData], groups: Iterable[Group] | None = None) -> WindowData:
    """Consecutive windows as one: their histograms and counters summed, the records of
    `groups` (default: every group) joined."""
    window = Window(min(p.window.start for p in parts), max(p.window.end for p in parts))
    out = WindowData(window, merge_hists(p.hists for p in parts))
    out.counters = merge_counters(p.counters for p in parts)
    out.days_with_data = sum(p.days_with_data for p in parts)
    wanted = {g for p in parts for g in p.events} if groups is None else set(groups)
    for g in wanted:
        if any(g in p.events for p in parts):
            out.events[g] = merge_events([p.events[g] for p in parts if g in p.events])
    return out


class SpanWindows:
    """The weekly blocks split into a baseline (the weeks before a split) and a current
    window (the weeks from it on), merged: histograms once per split, one group's records when
    asked for."""

    def __init__(self, trend: Sequence[WindowData], cur: WindowData, base: WindowData) -> None:
        weekly = (
            len(trend) >= 2
            and trend[-1].window == cur.window
            and trend[-2].window == base.window
            and len(cur.window.days) == 7
        )
        self.trend = list(trend) if weekly else []
        self._cache: dict[int, tuple[WindowData, WindowData]] = {}

    def series(self, group: Group) -> tuple[Events, list[int]]:
        """The group's records of every week, and each record's week (0 the oldest)."""
        parts = [(i, p.events[group]) for i, p in enumerate(self.trend) if group in p.events]
        weeks = [i for i, ev in parts for _ in range(len(ev))]
        return merge_events([ev for _, ev in parts]), weeks

    def get(self, split: int, group: Group) -> tuple[WindowData, WindowData]:
        """(current, baseline): the weekly blocks from `split` on and the ones before it, with
        the records of `group` only."""
        halves = (self.trend[split:], self.trend[:split])
        if split not in self._cache:
            self._cache[split] = (merge_windows(halves[0], ()), merge_windows(halves[1], ()))
        out = []
        for merged, parts in zip(self._cache[split], halves, strict=True):
            one = replace(merged, events={})
            if any(group in p.events for p in parts):
                one.events[group] = merge_events(
                    [p.events[group] for p in parts if group in p.events]
                )
            out.append(one)
        return out[0], out[1]
