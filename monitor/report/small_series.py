"""Small series: the last 2, 3 or 4 weeks against as many weeks before, when one week is too few.

A retriever with 2-12 events a week never has the weekly minimum (`compare.MIN_EVENTS` events
from `compare.MIN_QUERIES` questions in each window), so a one-week report could only ever say
"too few events to tell". For such a retriever the report widens both windows, a week at a
time, to the shortest span that meets the minimum; at four weeks, below it, it still compares
when each window has `SMALL_MIN_EVENTS` events from `SMALL_MIN_QUERIES` questions, with an exact
permutation test (`drift.permutation_pvalue`) instead of the t reference. Every series of at
least 2 events a week therefore gets a verdict within four weeks; the comparisons join the
report's one Holm family, so the false-alarm rate of the report is unchanged
(`tests/stats/report_sim.py`, the "tiny" scenarios).

The weeks come from the report's 8-week trend (`Dataset.trend`, 7-day blocks ending on the
report's last day), so spans apply to a 7-day report against the 7 days before it (the weekly
report's default), not to other windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ragmon.core.window import Window
from ragmon.report.gather import (
    SMALL_WEEKS,
    Events,
    Group,
    WindowData,
    merge_counters,
    merge_hists,
)

# weeks per window, tried in this order (the shortest that has enough)
SPANS = tuple(range(2, SMALL_WEEKS + 1))
SMALL_MIN_EVENTS = 8  # 2 events a week over four weeks: the smallest series compared
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
    """The current and baseline windows `weeks` long, merged from the trend's weekly blocks:
    histograms once per span, one group's records when asked for."""

    def __init__(self, trend: Sequence[WindowData], cur: WindowData, base: WindowData) -> None:
        weekly = (
            len(trend) >= 2
            and trend[-1].window == cur.window
            and trend[-2].window == base.window
            and len(cur.window.days) == 7
        )
        self.trend = list(trend) if weekly else []
        self._cache: dict[int, tuple[WindowData, WindowData]] = {}

    def available(self, weeks: int) -> bool:
        return len(self.trend) >= 2 * weeks

    def get(self, weeks: int, group: Group) -> tuple[WindowData, WindowData]:
        """(current, baseline): the last `weeks` weekly blocks and the `weeks` before them, with
        the records of `group` only."""
        blocks = self.trend[-2 * weeks :]
        if weeks not in self._cache:
            self._cache[weeks] = (
                merge_windows(blocks[weeks:], ()),
                merge_windows(blocks[:weeks], ()),
            )
        out = []
        for merged, parts in zip(self._cache[weeks], (blocks[weeks:], blocks[:weeks]), strict=True):
            one = replace(merged, events={})
            if any(group in p.events for p in parts):
                one.events[group] = merge_events(
                    [p.events[group] for p in parts if group in p.events]
                )
            out.append(one)
        return out[0], out[1]
