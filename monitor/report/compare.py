"""This week against the baseline, per (app, index, retriever) and measure: means, intervals,
the within-segment change, and the distribution shift."""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ragmon.core import drift
from ragmon.core.measure_table import MEASURES as TABLE
from ragmon.core.measures import BUCKETS
from ragmon.report.family import settle
from ragmon.report.gather import MIN_EVENTS, MIN_QUERIES, Events, Group, Hists, WindowData
from ragmon.report.small_series import SpanWindows, segments
from ragmon.store import Histogram

# The measures the report compares (`report` in the measure table), with their display names.
# They form one Holm family per report, so adding one makes every verdict slightly stricter.
MEASURES = tuple(m.key for m in TABLE if m.report)
# Measured only on some deployments (UDCG needs RAGMON_UTILITY=on): no row when no data.
OPTIONAL = frozenset(m.key for m in TABLE if m.needs)
NAMES = {m.key: m.name for m in TABLE}
RANGE = {m.key: (m.lo, m.hi) for m in TABLE}  # an interval is cut to its measure's range
LOWER_IS_BETTER = frozenset(m.key for m in TABLE if m.better == "lower")
KEPT_SHARE = 0.98  # per-event records must cover this share of the histogram to be complete
PSI_ALPHA = 0.01  # a PSI reading counts only when noise this large is rarer than this
# Below this many question clusters in either window a cluster-robust interval has (almost) no
# degrees of freedom, or none at all (one cluster: width 0): the row says it cannot tell.
MIN_CLUSTERS = MIN_QUERIES
CANNOT_TELL = "cannot tell: too few question clusters"


def group_of(labels: Sequence[str]) -> Group:
    return (labels[0], labels[1], labels[2])


def group_name(g: Group) -> str:
    return "/".join(g)


@dataclass(frozen=True)
class Volume:
    """Events and distinct queries of one retriever in one window."""

    events: int = 0
    queries: int = 0

    @property
    def enough(self) -> bool:
        return self.events >= MIN_EVENTS and self.queries >= MIN_QUERIES

    def __str__(self) -> str:
        return f"{self.events} events, {self.queries} queries"


@dataclass
class Row:
    """One measure of one group: both windows, the change and the distribution shift."""

    group: Group
    measure: str
    base: drift.Interval | None = None
    cur: drift.Interval | None = None
    change: drift.Change | None = None
    p_adj: float | None = None
    psi: float | None = None
    psi_p: float | None = None  # chance of this PSI with no change (effective volumes)
    base_counts: list[int] | None = None
    cur_counts: list[int] | None = None
    source: str = ""  # "per-event records", "kept records (sample)" or "binned counts"
    weeks: int = 1  # weeks per window: more for a small series (`ragmon.report.small_series`)
    permutation: bool = False  # p from the exact permutation test (a small series' few events)
    status: str = "no data"  # regression | improvement | unchanged | too few events to tell |
    # CANNOT_TELL | no baseline yet | no data

    @property
    def worse(self) -> bool:
        """The within-segment change points the bad way for this measure."""
        if self.change is None:
            return False
        d = self.change.estimate
        return d > 0 if self.measure in LOWER_IS_BETTER else d < 0

    @property
    def tested(self) -> drift.Change:
        """The change of a row that was tested (both windows had enough data)."""
        if self.change is None:
            raise ValueError(f"{self.group} {self.measure}: not tested")
        return self.change

    @property
    def base_mean(self) -> float | None:
        return self.base.estimate if self.base else None

    @property
    def cur_mean(self) -> float | None:
        return self.cur.estimate if self.cur else None

    @property
    def p(self) -> float:
        """Holm-adjusted p-value (1 when untested)."""
        return 1.0 if self.p_adj is None else self.p_adj

    @property
    def psi_reading(self) -> str:
        """PSI's conventional level, or "within noise" when noise this large is not rare."""
        if self.psi is None:
            return "n/a"
        if self.psi_p is not None and self.psi_p >= PSI_ALPHA:
            return "within noise"
        return drift.psi_level(self.psi)


def group_hist(
    hists: Hists, measure: str, group: Group, prefix: str = "retrieval_"
) -> Histogram | None:
    """The measure's histogram for a group, summed over its segments (`prefix` "signal_": a
    signal's, `ragmon.report.signal_shifts`)."""
    parts = list(segment_hists(hists, measure, group, prefix).values())
    if not parts:
        return None
    buckets = [sum(col) for col in zip(*(h.buckets for h in parts), strict=True)]
    sq = [h.sum_squares for h in parts]
    return Histogram(
        buckets,
        sum(h.sum for h in parts),
        sum(h.count for h in parts),
        None if None in sq else sum(x for x in sq if x is not None),
    )


def segment_hists(
    hists: Hists, measure: str, group: Group, prefix: str = "retrieval_"
) -> dict[str, Histogram]:
    series = hists.get(f"{prefix}{measure}", {})
    return {lbl[3]: h for lbl, h in series.items() if group_of(lbl) == group and h.count}


def groups_of(*windows: WindowData) -> list[Group]:
    seen: set[Group] = set()
    for w in windows:
        for name, series in w.hists.items():
            if name.startswith("retrieval_"):  # judged: the signals' groups are their own
                seen.update(group_of(lbl) for lbl, h in series.items() if h.count)
        seen.update(g for g, ev in w.events.items() if len(ev))
    return sorted(seen)


def _passages(events: Events) -> list[Sequence[Hashable]]:
    """Each event's top-K passage ids (none for records that do not carry them)."""
    return events.passages if len(events.passages) == len(events) else [()] * len(events)


@dataclass
class Coded:
    """Both windows' records of one group with shared integer codes for segments and question
    clusters (`drift.retrieval_clusters`: the same normalized query or strongly overlapping top-K
    passages)."""

    base: Events
    cur: Events
    seg_b: np.ndarray
    seg_c: np.ndarray
    clu_b: np.ndarray
    clu_c: np.ndarray
    segment_names: list[str]

    @classmethod
    def of(cls, base: Events, cur: Events) -> Coded:
        names, seg = np.unique(
            np.array(base.segments + cur.segments, dtype=str), return_inverse=True
        )
        clu = drift.retrieval_clusters(base.queries + cur.queries, _passages(base) + _passages(cur))
        n = len(base)
        return cls(base, cur, seg[:n], seg[n:], clu[:n], clu[n:], [str(x) for x in names])

    @property
    def clusters(self) -> tuple[int, int]:
        """Question clusters in the baseline and in this window."""
        return len(np.unique(self.clu_b)), len(np.unique(self.clu_c))

    def samples(self, measure: str) -> tuple[drift.Sample, drift.Sample]:
        out = []
        for ev, seg, clu in (
            (self.base, self.seg_b, self.clu_b),
            (self.cur, self.seg_c, self.clu_c),
        ):
            values = np.array(ev.values.get(measure, [np.nan] * len(ev)), dtype=float)
            ok = ~np.isnan(values)
            w = weights_of(ev)
            out.append(drift.Sample(values[ok], seg[ok], clu[ok], None if w is None else w[ok]))
        return out[0], out[1]


def weights_of(events: Events) -> np.ndarray | None:
    """Hajek's weights, 1 / each event's inclusion probability; None when every event was
    judged (equal weights give the plain mean, as for a fixed rate)."""
    if len(events.probs) != len(events) or all(p == 1.0 for p in events.probs):
        return None
    return 1.0 / np.array(events.probs, dtype=float)


def volume(events: Events | None) -> Volume:
    if events is None:
        return Volume()
    return Volume(len(events), len(set(events.queries)))


def _effective(interval: drift.Interval, sample: drift.Sample) -> float:
    """Events divided by the design effect of repeated questions and of unequal weights: the
    volume PSI's noise should be judged at."""
    values, w = sample.values, sample.w()
    n = float(w.sum() ** 2 / (w @ w)) if len(w) else 0.0  # Kish: n with equal weights
    iid = float(values.var(ddof=1)) / n if len(values) > 1 else 0.0
    clustered = interval.se**2
    return n * min(1.0, iid / clustered) if clustered > 0 else n


def _stands_for(sample: drift.Sample) -> float:
    """The events a window's records stand for: sum of 1 / inclusion probability."""
    return float(sample.weights.sum()) if sample.weights is not None else float(len(sample))


def _binned_cells(hists: Hists, measure: str, group: Group) -> dict[str, drift.Cell]:
    return {
        seg: drift.binned_moments(h.buckets, BUCKETS[measure], h.sum, h.sum_squares)
        for seg, h in segment_hists(hists, measure, group).items()
    }


def _binned_interval(cells: dict[str, drift.Cell]) -> drift.Interval:
    n = sum(c[0] for c in cells.values())
    mean = sum(c[0] * c[1] for c in cells.values()) / n
    ss = sum((c[0] - 1) * c[2] + c[0] * (c[1] - mean) ** 2 for c in cells.values())
    se = (ss / max(1, n - 1) / n) ** 0.5
    half = drift.t_ppf(0.975, max(1, n - 1)) * se
    return drift.Interval(mean, mean - half, mean + half, n, n, max(1, n - 1))


def _window_interval(
    events: Events | None,
    measure: str,
    hists: Hists,
    group: Group,
    clusters: np.ndarray | None = None,
) -> drift.Interval | None:
    """One window's mean and interval; `clusters`: the events' cluster codes when known (the
    codes shared with the other window), else found from this window alone."""
    if events is not None and len(events):
        values = np.array(events.values.get(measure, []), dtype=float)
        ok = ~np.isnan(values)
        if ok.sum():
            if clusters is None:
                clusters = drift.retrieval_clusters(events.queries, _passages(events))
            w = weights_of(events)
            return drift.clustered_mean(
                values[ok], clusters[ok], weights=None if w is None else w[ok]
            )
        return None
    cells = _binned_cells(hists, measure, group)
    return _binned_interval(cells) if cells else None


def compare_measure(
    coded: Coded | None, cur: WindowData, base: WindowData, group: Group, measure: str
) -> Row:
    """Means with intervals, the within-segment change and PSI on the fixed bins."""
    row = Row(group, measure)
    hb, hc = group_hist(base.hists, measure, group), group_hist(cur.hists, measure, group)
    if hb is not None:
        row.base_counts = list(hb.buckets)
    if hc is not None:
        row.cur_counts = list(hc.buckets)
    row.base = _window_interval(
        base.events.get(group), measure, base.hists, group, coded.clu_b if coded else None
    )
    row.cur = _window_interval(
        cur.events.get(group), measure, cur.hists, group, coded.clu_c if coded else None
    )
    if row.base is None or row.cur is None or min(row.base.n, row.cur.n) < 2:
        return _in_range(row)
    if coded is not None:
        sb, sc = coded.samples(measure)
        row.change = drift.segment_change(sb, sc, cap=drift.CAP)
        nb_eff, nc_eff = _effective(row.base, sb), _effective(row.cur, sc)
        # a weighted histogram counts the events its judged ones stand for: so do the records
        full = all(
            h is not None and _stands_for(s) >= KEPT_SHARE * h.count
            for h, s in ((hb, sb), (hc, sc))
        )
        row.source = "per-event records" if full else "kept records (sample)"
    else:
        cb, cc = _binned_cells(base.hists, measure, group), _binned_cells(cur.hists, measure, group)
        if not cb or not cc:
            return _in_range(row)
        row.change = drift.binned_change(cb, cc)
        nb_eff, nc_eff = float(row.base.n), float(row.cur.n)
        row.source = "binned counts"
    if hb is not None and hc is not None and hb.count and hc.count:
        row.psi = drift.psi(hb.buckets, hc.buckets)
        row.psi_p = drift.psi_pvalue(hb.buckets, hc.buckets, nb_eff, nc_eff)
    return _in_range(row)


def _in_range(row: Row) -> Row:
    """Intervals cut to the measure's range (a t interval on few clusters can reach past it)."""
    lo, hi = RANGE[row.measure]
    row.base = row.base.within(lo, hi) if row.base else None
    row.cur = row.cur.within(lo, hi) if row.cur else None
    row.change = row.change.within(lo, hi) if row.change else None
    return row


@dataclass(frozen=True)
class Span:
    """A small series compared over its last `weeks` weeks against the `base_weeks` before them
    (the split of its headline measure), with those windows' volumes."""

    weeks: int
    base: Volume
    cur: Volume
    base_weeks: int = 0
    permutation: bool = True  # p from the change-point scan's permutation test


def _span_rows(g: Group, spans: SpanWindows) -> tuple[Span, list[Row]] | None:
    """A group too small for one week, over the trend's weeks: each measure's weeks since it
    last changed against the weeks before, back to the change before (`drift.changepoint_pvalue`
    over `small_series.segments`); None when no segment has the small minimum."""
    events, weeks = spans.series(g)
    total = len(spans.trend)
    found = segments(events.queries, weeks, total)
    if not found:
        return None
    clusters = drift.retrieval_clusters(events.queries, _passages(events))
    w_all = weights_of(events)
    week_of = np.array(weeks)
    seed = zlib.crc32(group_name(g).encode())  # one draw for all its measures
    rows, span = [], None
    halves: dict[tuple[int, int], tuple[WindowData, WindowData, Coded | None]] = {}
    for m in MEASURES:
        values = np.array(events.values.get(m, [np.nan] * len(events)), dtype=float)
        ok = ~np.isnan(values)
        (start, stop), p = drift.changepoint_pvalue(
            values[ok], clusters[ok], week_of[ok], found, seed=seed,
            weights=None if w_all is None else w_all[ok],
        )  # fmt: skip
        # a change that lasts: its weeks against those before; one that ended: the weeks since
        # its end against its own
        split, since = (start, 0) if stop >= total else (stop, start)
        if (split, since) not in halves:
            cur, base = spans.get(split, g, since)
            eb, ec = base.events.get(g), cur.events.get(g)
            halves[split, since] = (cur, base, Coded.of(eb, ec) if eb and ec else None)
        cur, base, coded = halves[split, since]
        if coded is None:
            continue
        eb, ec = coded.base, coded.cur
        row = compare_measure(coded, cur, base, g, m)
        if m in OPTIONAL and row.base is None and row.cur is None:
            continue
        row.weeks, row.permutation = total - split, True
        if row.change is not None:
            sb, sc = coded.samples(m)
            # few events: segments pooled (the plain change), p from the scan
            plain = drift.segment_change(sb, sc, min_cell=max(len(sb), len(sc)) + 1)
            row.change = replace(plain, pvalue=p)
            _in_range(row)
        if span is None:  # the headline measure's split describes the series
            span = Span(total - split, volume(eb), volume(ec), split - since)
        rows.append(row)
    return (span, rows) if span is not None else None


@dataclass
class Compared:
    """Every row, the volumes that decided whether a group could be judged at all, and the
    coded records of the groups that have them in both windows."""

    rows: list[Row]
    volumes: dict[Group, tuple[Volume, Volume]]
    coded: dict[Group, Coded]
    spans: dict[Group, Span] = field(default_factory=dict)  # small series over several weeks


def compare_all(cur: WindowData, base: WindowData, trend: Sequence[WindowData] = ()) -> Compared:
    """Every (group, measure) row with Holm-adjusted p-values and a status. `trend`: the
    weekly blocks a small series is compared over when one week has too few events."""
    rows: list[Row] = []
    volumes: dict[Group, tuple[Volume, Volume]] = {}
    codes: dict[Group, Coded] = {}
    spans = SpanWindows(trend, cur, base)
    widened: dict[Group, Span] = {}
    for g in groups_of(cur, base):
        eb, ec = base.events.get(g), cur.events.get(g)
        vb, vc = volume(eb), volume(ec)
        hb = group_hist(base.hists, "ndcg", g)
        hc = group_hist(cur.hists, "ndcg", g)
        if not len(eb or ()) and hb is not None:  # no records: counts from the histograms
            vb = Volume(hb.count, hb.count)
        if not len(ec or ()) and hc is not None:
            vc = Volume(hc.count, hc.count)
        volumes[g] = (vb, vc)
        if not (vb.enough and vc.enough):
            found = _span_rows(g, spans)
            if found is not None:
                widened[g] = found[0]
                rows += found[1]
                continue
        coded = None
        if eb is not None and ec is not None and len(eb) and len(ec):
            coded = codes[g] = Coded.of(eb, ec)
        for m in MEASURES:
            row = compare_measure(coded, cur, base, g, m)
            if m in OPTIONAL and row.base is None and row.cur is None:
                continue
            if not vb.events:
                row.status = "no baseline yet"
                row.change = None
            elif not vc.events:
                row.status = "no data"
                row.change = None
            elif not (vb.enough and vc.enough):
                row.status = "too few events to tell"
                row.change = None
            elif coded is not None and min(coded.clusters) < MIN_CLUSTERS:
                row.status = CANNOT_TELL
                row.change = None
            rows.append(row)
    settle([r for r in rows if r.change is not None])
    return Compared(rows, volumes, codes, widened)
