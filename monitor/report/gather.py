"""Read what the workers keep in Redis for the report's days (through `ragmon.store` only)."""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES
from ragmon.core.signals import SIGNALS
from ragmon.core.window import Window
from ragmon.core.wire import SEP, event_ref
from ragmon.store import Histogram, Store
from ragmon.store.records import StoredEvent

TREND_WEEKS = 8  # weeks of the trend plot
# A small series (`ragmon.report.small_series`) is scanned over every week whose per-event
# records are still kept (RAGMON_RESULT_TTL_DAYS), at most this many: the report then reads
# that many weeks of histograms, and of the records of the small series' apps.
SMALL_HISTORY_WEEKS = 16
MIN_EVENTS = 30  # events a retriever needs in each window before any verdict
MIN_QUERIES = 10  # distinct queries a retriever needs in each window before any verdict
WORST_N = 10  # events listed per drill-down table
HIST_BOUNDS: dict[str, Sequence[float]] = {
    **{f"retrieval_{m}": BUCKETS[m] for m in HISTOGRAM_MEASURES},
    **{f"signal_{s.key}": s.buckets for s in SIGNALS},  # every event's, judged or not
}

Hists = dict[str, dict[tuple[str, ...], Histogram]]
Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """Progress lines on stderr (stdout stays clean for scripts)."""
    print(f"ragmon report: {message}", file=sys.stderr, flush=True)


Group = tuple[str, str, str]  # (app, index, retriever)


@dataclass
class Events:
    """One group's per-event records in a window, as columns (one entry per event)."""

    segments: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # query key; the event id when unknown
    lengths: list[float] = field(default_factory=list)  # words in the query; NaN when unknown
    passages: list[Sequence[Hashable]] = field(default_factory=list)  # top-K ids; () if unknown
    values: dict[str, list[float]] = field(default_factory=dict)  # NaN where not computed
    probs: list[float] = field(default_factory=list)  # inclusion probability (1.0: all judged)

    def __len__(self) -> int:
        return len(self.segments)

    def add(self, record: dict) -> None:
        n = len(self.segments)
        self.segments.append(record["labels"]["segment"])
        self.queries.append(record.get("q") or record["id"])
        self.passages.append(tuple(record.get("pids") or ()))
        ql = record.get("ql")
        self.lengths.append(float(ql) if ql is not None else math.nan)
        self.probs.append(float(record.get("ip") or 1.0))
        for measure, v in record["m"].items():
            column = self.values.setdefault(measure, [math.nan] * n)
            column.append(float(v) if v is not None else math.nan)
        for column in self.values.values():
            if len(column) == n:
                column.append(math.nan)


@dataclass
class WindowData:
    """Histograms and counters summed over a window's days, and its per-event records reduced
    as they are read (a busy week has hundreds of thousands): columns per (app, index,
    retriever), where the grades came from, and the candidates for the worst-events tables."""

    window: Window
    hists: Hists = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    events: dict[Group, Events] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)  # grades by source (judge, cache, known)
    judges: dict[str, int] = field(default_factory=dict)  # judge or cache grades by judge identity
    worst_ndcg: list[dict] = field(default_factory=list)
    worst_harm: list[dict] = field(default_factory=list)
    records: int = 0
    days_with_data: int = 0
    # distinct queries per group over the window, every event's (the union of the days'
    # HyperLogLogs; current and baseline windows only, 0 where none is kept)
    distinct_queries: dict[Group, int] = field(default_factory=dict)

    def add_records(self, records: list[dict]) -> None:
        """Fold one day's compact per-event records into the columns and worst candidates."""
        for e in records:
            self.events.setdefault(_group(e), Events()).add(e)
            for src, n in (e.get("src") or {}).items():
                self.sources[src] = self.sources.get(src, 0) + n
                if src != "known" and e.get("jm"):
                    self.judges[e["jm"]] = self.judges.get(e["jm"], 0) + n
        self.records += len(records)
        ndcg = [e for e in records if e["m"].get("ndcg") is not None]
        harm = [e for e in records if e["m"].get("harm") is not None]
        self.worst_ndcg = heapq.nsmallest(
            WORST_N, self.worst_ndcg + ndcg, key=lambda e: (e["m"]["ndcg"], e["ts"])
        )
        self.worst_harm = heapq.nsmallest(
            WORST_N, self.worst_harm + harm, key=lambda e: (-e["m"]["harm"], e["ts"])
        )


@dataclass
class Dataset:
    """Everything the analysis needs; `trend` holds 7-day blocks, oldest first, last = current:
    the plot's last `TREND_WEEKS`, and with a small series the weeks its records are kept."""

    current: WindowData
    baseline: WindowData
    trend: list[WindowData]
    store_text: bool
    result_ttl_days: float
    explorer_url: str | None = None  # RAGMON_EXPLORER_URL: the worst events link there


def merge_hists(parts: Iterable[Hists]) -> Hists:
    """Sum histograms of the same name and labels (bucket by bucket; the sum of squares stays
    only where every part recorded it)."""
    acc: dict[str, dict[tuple[str, ...], Histogram]] = {}
    for hists in parts:
        for name, series in hists.items():
            for labels, h in series.items():
                cur = acc.setdefault(name, {}).get(labels)
                if cur is None:
                    acc[name][labels] = h
                    continue
                sq = None
                if cur.sum_squares is not None and h.sum_squares is not None:
                    sq = cur.sum_squares + h.sum_squares
                acc[name][labels] = Histogram(
                    [a + b for a, b in zip(cur.buckets, h.buckets, strict=True)],
                    cur.sum + h.sum,
                    cur.count + h.count,
                    sq,
                )
    return acc


def merge_counters(parts: Iterable[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for counters in parts:
        for k, v in counters.items():
            out[k] = out.get(k, 0) + v
    return out


class _DayCache:
    """Each day is read once even when windows overlap (trend weeks, current, baseline)."""

    def __init__(self, store: Store, progress: Progress) -> None:
        self.store = store
        self.progress = progress
        self.hists: dict[str, Hists] = {}
        self.counters: dict[str, dict[str, float]] = {}

    def window(
        self, window: Window, with_events: bool, keep: set[Group] | None = None
    ) -> WindowData:
        """One window's data; records only `with_events`, and then only `keep`'s if given."""
        data = WindowData(window)
        hists, counters = [], []
        for day in window.days:
            if day not in self.hists:
                self.hists[day] = self.store.histograms(HIST_BOUNDS, day=day)
                self.counters[day] = self.store.counters(day=day)
            hists.append(self.hists[day])
            counters.append(self.counters[day])
            if any(name.startswith("retrieval_") for name in self.hists[day]):
                data.days_with_data += 1  # judged data
            if with_events:
                apps = None if keep is None else {g[0] for g in keep}
                records = self.store.day_events(day, only=apps)
                if keep is not None:
                    records = [e for e in records if _group(e) in keep]
                data.add_records(records)
        data.hists = merge_hists(hists)
        data.counters = merge_counters(counters)
        return data


def gather(
    store: Store, current: Window, baseline: Window, progress: Progress = stderr_progress
) -> Dataset:
    """Read the current and baseline windows (with per-event records) and the weekly blocks
    of the trend (`history_weeks` with a small series, else `TREND_WEEKS`)."""
    cache = _DayCache(store, progress)
    progress(f"reading {current.label} ({len(current.days)} days)")
    cur = cache.window(current, with_events=True)
    progress(f"  {cur.records} per-event records, {cur.days_with_data} days with data")
    progress(f"reading baseline {baseline.label} ({len(baseline.days)} days)")
    base = cache.window(baseline, with_events=True)
    progress(f"  {base.records} per-event records, {base.days_with_data} days with data")
    # a small series is compared over the trend's weeks (small_series): the weekly blocks carry
    # its records
    for w in (cur, base):
        w.distinct_queries = _distinct_queries(store, w)
    small = _small_groups(cur, base) if _weekly(current, baseline) else set()
    s = store.settings
    weeks = history_weeks(s.result_ttl_days) if small else TREND_WEEKS
    trend = []
    for back in range(weeks - 1, -1, -1):
        block = Window(current.end, current.end).shifted(-back)
        block = Window(block.end.fromordinal(block.end.toordinal() - 6), block.end)
        if block == current and small:
            trend.append(cur)
        elif block == baseline and small:
            trend.append(base)
        else:
            with_events = bool(small)
            trend.append(cache.window(block, with_events, keep=small))
    progress(f"read {len(cache.hists)} days of histograms for the {weeks}-week trend")
    return Dataset(cur, base, trend, s.store_text, s.result_ttl_days, s.explorer_url)


def _distinct_queries(store: Store, w: WindowData) -> dict[Group, int]:
    """Each group's distinct queries over the window's days, all its segments together."""
    series: dict[Group, list[str]] = {}
    for labels in w.hists.get("signal_results", {}):
        series.setdefault((labels[0], labels[1], labels[2]), []).append(SEP.join(labels))
    return {g: store.distinct_queries_over(w.window.days, names) for g, names in series.items()}


def _group(record: dict) -> Group:
    lb = record["labels"]
    return (lb["app"], lb["index"], lb["retriever"])


def history_weeks(result_ttl_days: float) -> int:
    """Weeks a small series is scanned over: those its records are kept for, at least the
    trend's, at most `SMALL_HISTORY_WEEKS`."""
    return max(TREND_WEEKS, min(SMALL_HISTORY_WEEKS, math.ceil(result_ttl_days / 7)))


def _weekly(current: Window, baseline: Window) -> bool:
    """A 7-day report against the 7 days before it (small series are widened only then)."""
    return len(current.days) == 7 and baseline == current.shifted(-1)


def _small_groups(cur: WindowData, base: WindowData) -> set[Group]:
    """Groups below the weekly minimum of records in either window (`report.compare`)."""
    out = set()
    for g in set(cur.events) | set(base.events):
        for w in (cur, base):
            ev = w.events.get(g)
            n = len(ev) if ev is not None else 0
            if n < MIN_EVENTS or len(set(ev.queries if ev is not None else ())) < MIN_QUERIES:
                out.add(g)
    return out


def record_ref(record: dict) -> str:
    """The `event_ref` of a per-day compact record (event ids are scoped by app)."""
    return event_ref(record["labels"]["app"], record["id"])


def load_event_details(store: Store, refs: list[str]) -> dict[str, StoredEvent | None]:
    """Stored payloads (query, passages; text only when retained) of a few events by ref."""
    if not refs:
        return {}
    return dict(zip(refs, store.load_events(refs), strict=True))
