"""Small series: a change-point scan over the weeks whose records are kept, when one week is
too few.

A retriever below the weekly minimum (`compare.MIN_EVENTS` events from `compare.MIN_QUERIES`
questions in each window) never gets a one-week verdict. For such a retriever the report scans
its weeks of history (7-day blocks ending on the report's last day, as many as its records are
kept, at most `gather.SMALL_HISTORY_WEEKS`) for the segment of weeks whose mean differs most
from the rest (`segments`): a change that lasts to this week, or one that ended. It compares
the weeks since the last change with the weeks before, back to the change before: a lasting
drop against the weeks before it, a drop that ended by the weeks since against the drop's. The
p of the largest lasting change comes from re-assigning (question, week) blocks between the
weeks (`drift.changepoint_pvalue`), so it holds for the scan as a whole. So a drop shows week
after week until it recovers, and not after (a baseline of the weeks just before this window
would soon hold the dropped weeks; a scan of lasting changes alone kept comparing the drop and
its end with the weeks before), and the more weeks precede a change, the surer its p: so the
scan reads every week still kept. The
comparisons join the report's one Holm family (`tests/stats/report_sim.py`, the "tiny" and
"small" scenarios; `tests/stats/small_drop_sim.py`, weeks after a drop).

Spans apply to a 7-day report against the 7 days before it (the weekly report's default).
"""

from __future__ import annotations

from collections.abc import Sequence

from ragmon.core.window import Window
from ragmon.report.gather import (
    Events,
    Group,
    Hists,
    WindowData,
    merge_hists,
)

SMALL_MIN_EVENTS = 8  # on each side of a split (2 a week over four weeks: the smallest compared)
# With fewer distinct questions per window no permutation p-value can be below 0.01:
# 2 / C(5 + 5, 5) = 0.008.
SMALL_MIN_QUERIES = 5


def segments(queries: Sequence[str], weeks: Sequence[int], total: int) -> list[tuple[int, int]]:
    """The segments (start, end) of `total` weeks a series' scan compares with its other weeks:
    a change that lasts, (s, total), with the weeks before s and from s on each holding
    `SMALL_MIN_EVENTS` events from `SMALL_MIN_QUERIES` questions; and a change that ended,
    (a, b), with the weeks before a, from a up to b and from b on each holding them."""
    events = [0] * total
    asked: list[set[str]] = [set() for _ in range(total)]
    for q, w in zip(queries, weeks, strict=True):
        events[w] += 1
        asked[w].add(q)

    def enough(lo: int, hi: int) -> bool:
        distinct = set().union(*asked[lo:hi])
        return sum(events[lo:hi]) >= SMALL_MIN_EVENTS and len(distinct) >= SMALL_MIN_QUERIES

    before = [enough(0, s) for s in range(total)]
    after = [enough(s, total) for s in range(total)]
    out = [(s, total) for s in range(1, total) if before[s] and after[s]]
    out += [(a, b) for a in range(1, total) for b in range(a + 1, total)
            if before[a] and after[b] and enough(a, b)]  # fmt: skip
    return out


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


class SpanWindows:
    """The weekly blocks split into a baseline (weeks up to a split) and a current window (the
    weeks from it on), merged for one group at a time: its histograms and records."""

    def __init__(self, trend: Sequence[WindowData], cur: WindowData, base: WindowData) -> None:
        weekly = (
            len(trend) >= 2
            and trend[-1].window == cur.window
            and trend[-2].window == base.window
            and len(cur.window.days) == 7
        )
        self.trend = list(trend) if weekly else []
        self._hists: dict[Group, list[Hists]] | None = None  # each group's, week by week

    def series(self, group: Group) -> tuple[Events, list[int]]:
        """The group's records of every week, and each record's week (0 the oldest)."""
        parts = [(i, p.events[group]) for i, p in enumerate(self.trend) if group in p.events]
        weeks = [i for i, ev in parts for _ in range(len(ev))]
        return merge_events([ev for _, ev in parts]), weeks

    def _group_hists(self, group: Group) -> list[Hists]:
        """The group's histograms in each week (indexed once for every group: a scan compares
        many spans of weeks, and merging every group's each time was most of its cost)."""
        if self._hists is None:
            self._hists = {}
            for i, week in enumerate(self.trend):
                for name, series in week.hists.items():
                    for labels, h in series.items():
                        g = (labels[0], labels[1], labels[2])
                        weeks = self._hists.setdefault(g, [{} for _ in self.trend])
                        weeks[i].setdefault(name, {})[labels] = h
        return self._hists.get(group, [{} for _ in self.trend])

    def get(self, split: int, group: Group, since: int = 0) -> tuple[WindowData, WindowData]:
        """(current, baseline): the weekly blocks from `split` on and the ones from `since` up
        to it, with the histograms and records of `group` only."""
        hists = self._group_hists(group)
        out = []
        for lo, hi in ((split, len(self.trend)), (since, split)):
            parts = self.trend[lo:hi]
            window = Window(parts[0].window.start, parts[-1].window.end)
            one = WindowData(window, merge_hists(hists[lo:hi]))
            one.days_with_data = sum(p.days_with_data for p in parts)
            if any(group in p.events for p in parts):
                one.events[group] = merge_events(
                    [p.events[group] for p in parts if group in p.events]
                )
            out.append(one)
        return out[0], out[1]
