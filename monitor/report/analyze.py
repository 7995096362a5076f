"""Turn gathered data into findings: ranked regressions with hints, the worst events."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ragmon.core import drift
from ragmon.core.agreement import Agreement
from ragmon.core.window import Window
from ragmon.report.compare import (
    CANNOT_TELL,
    MEASURES,
    MIN_CLUSTERS,
    MIN_EVENTS,
    MIN_QUERIES,
    NAMES,
    Group,
    Row,
    Span,
    Volume,
    compare_all,
    group_hist,
    group_name,
    groups_of,
    segment_hists,
)
from ragmon.report.coverage import Judged, judged_shares, received_events
from ragmon.report.gather import TREND_WEEKS, Dataset, WindowData
from ragmon.report.ops import JudgeOps, OpsRow, group_ops, judge_ops
from ragmon.report.population import QueryPopulation, SegmentMix, query_population, segment_mix
from ragmon.report.signal_shifts import GroupSignals, signal_changes
from ragmon.report.verdict import Verdict, verdicts

if TYPE_CHECKING:
    from ragmon.oversight import SeriesEstimates
    from ragmon.store.records import StoredEvent

SEGMENT_SHARE = 0.6  # one segment carrying this share of a drop is named as the place to look


@dataclass
class Regression:
    """One group that got worse: its biggest change first, the others after."""

    group: Group
    headline: Row
    others: list[Row]
    severity: str
    evidence: str
    look_first: list[str]
    opposite: list[str] = field(default_factory=list)  # good-way moves read with the regression


@dataclass
class Report:
    current: Window
    baseline: Window
    generated_at: datetime
    rows: list[Row]
    regressions: list[Regression]
    improvements: list[Row]
    ops: list[OpsRow]
    judge_base: JudgeOps
    judge_cur: JudgeOps
    worst_ndcg: list[dict]
    worst_harm: list[dict]
    trend: dict[str, dict[Group, list[float | None]]]
    trend_labels: list[str]
    store_text: bool
    result_ttl_days: float
    explorer_url: str | None = None
    volumes: dict[Group, tuple[Volume, Volume]] = field(default_factory=dict)
    mix: list[SegmentMix] = field(default_factory=list)
    population: list[QueryPopulation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)  # one per retriever
    details: dict[str, StoredEvent | None] = field(default_factory=dict)
    # the judge against people (`ragmon.oversight`): (app, judge, reference) -> agreement
    agreement: dict[tuple[str, str, str], Agreement] = field(default_factory=dict)
    estimates: list[SeriesEstimates] = field(default_factory=list)  # this window's, per series
    anchor_runs: list[dict] = field(default_factory=list)  # the anchor set's re-judgings
    judged: list[Judged] = field(default_factory=list)  # this window's judged share per group
    spans: dict[Group, Span] = field(default_factory=dict)  # small series over several weeks
    signals: dict[Group, GroupSignals] = field(default_factory=dict)  # every event's, no judge

    @property
    def tests(self) -> int:
        return sum(1 for r in self.rows if r.change is not None)

    @property
    def events_cur(self) -> int:
        return sum(o.cur.events for o in self.ops)

    @property
    def events_base(self) -> int:
        return sum(o.base.events for o in self.ops)

    @property
    def first_week(self) -> bool:
        """No baseline at all: ragmon has no event of the baseline window."""
        return not any(b.events for b, _ in self.volumes.values())

    @property
    def too_few(self) -> list[Group]:
        """Groups with data in both windows but too few events or queries to judge, even over
        several weeks."""
        return [g for g, (b, c) in self.volumes.items() if b.events and c.events and not (
            b.enough and c.enough) and g not in self.spans]  # fmt: skip

    @property
    def cannot_tell(self) -> list[Group]:
        """Groups whose events the clustering joined into too few questions to judge."""
        return sorted({r.group for r in self.rows if r.status == CANNOT_TELL})

    @property
    def mix_shifts(self) -> list[SegmentMix]:
        return [m for m in self.mix if m.moved]

    @property
    def title(self) -> str:
        return f"ragmon drift report {self.current.label}"


def fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _segment_hint(row: Row, cur: WindowData, base: WindowData) -> str | None:
    """Name the segment that carries most of the within-segment change, or say it is spread."""
    hc = segment_hists(cur.hists, row.measure, row.group)
    hb = segment_hists(base.hists, row.measure, row.group)
    both = sorted(set(hc) & set(hb))
    if len(both) < 2:
        return None
    total = sum(hb[s].count for s in both)
    contrib = {}
    for s in both:
        change = hc[s].sum / hc[s].count - hb[s].sum / hb[s].count
        contrib[s] = (change * hb[s].count / total, change)
    bad = {s: c for s, c in contrib.items() if (c[0] > 0) == (row.tested.estimate > 0)}
    whole = sum(c[0] for c in bad.values())
    if not bad or whole == 0:
        return None
    top = max(bad, key=lambda s: abs(bad[s][0]))
    name = NAMES[row.measure]
    if abs(bad[top][0]) >= SEGMENT_SHARE * abs(whole):
        mb = hb[top].sum / hb[top].count
        return (
            f"segment `{top}` carries most of it: {name} {mb:.3f} → {mb + bad[top][1]:.3f} "
            f"({hc[top].count} events): look at what changed for these queries"
        )
    return (
        f"the change is spread over {len(bad)} of {len(both)} segments, not one query class: "
        "suspect the retriever or the index itself"
    )


# A measure against the pooled ideal and the same measure against the event's own pool.
POOLED = {"ndcg_pooled": "ndcg", "ra_nwg_pooled": "ra_nwg", "n_recall4_pooled": "n_recall4"}
HELD = 0.25  # the per-event twin "held" when it moved at most this share of the pooled fall


def _held(pooled: Row, own: Row | None) -> bool:
    """The per-event twin did not regress, or fell by a small share of the pooled measure's
    fall (a powerful test also finds the small ranking change that comes with lost passages)."""
    if own is None:
        return True
    return abs(own.tested.estimate) <= HELD * abs(pooled.tested.estimate)


def _recall_hint(regressed: dict[str, Row]) -> str | None:
    """A pooled measure fell while its per-event twin held: the top K is as good as the
    event's own candidates allow, but those candidates lost passages ragmon has seen answer the
    same questions before (from this retriever or another): recall, not ranking."""
    fell = [
        m for m, own in POOLED.items() if m in regressed and _held(regressed[m], regressed.get(own))
    ]
    if not fell:
        return None
    names = " and ".join(f"{NAMES[m]} fell while {NAMES[POOLED[m]]} held" for m in fell)
    return (
        f"{names}: relevant passages seen before for the same questions are no longer "
        "retrieved (recall loss): check the index (missing documents, a narrower candidate "
        "set, a filter)"
    )


def _hints(
    reg_rows: list[Row],
    ops: OpsRow | None,
    cur: WindowData,
    base: WindowData,
    judge_shift: bool,
    models_changed: bool,
    traffic: list[str],
) -> list[str]:
    """Where a person should look first, most specific first (at most four)."""
    head = reg_rows[0]
    by = {r.measure: r for r in reg_rows}
    hints = []
    if models_changed:
        hints.append(
            "the judge identity (model, prompt or mode) changed between the windows: grades may "
            "not be comparable"
        )
    elif judge_shift:
        hints.append(
            "the judge's grade mix shifted for every retriever: check the judge (model, prompt, "
            "cache) before the retrievers"
        )
    if ops is not None and ops.k_changed:
        hints.append(
            f"K changed from {ops.base.k_mean:.1f} to {ops.cur.k_mean:.1f} per event: the app's "
            "prompt size changed, and P@K, Harm@K and T move with K even when the retriever did not"
        )
    recall = _recall_hint(by)
    if recall:
        hints.append(recall)
    seg = _segment_hint(head, cur, base)
    if seg and seg.startswith("segment"):
        hints.append(seg)
    if "hit" in by:
        hints.append(
            "relevant passages are no longer retrieved at all (Hit@K fell): check the index "
            "(rebuild, missing documents, embedding model)"
        )
    elif head.measure in ("ndcg", "precision", "t", "f_e"):
        hints.append(
            "relevant passages are still found but rank lower (Hit@K held): check the ranking "
            "(scoring, reranker, boosts, chunking)"
        )
    if "harm" in by:
        hints.append(
            "more on-topic distractors (grade 1) in the prompt: check chunking and the reranker"
        )
    if seg and not seg.startswith("segment"):
        hints.append(seg)
    hints += traffic
    if ops is not None and ops.volume_ratio and not 0.67 <= ops.volume_ratio <= 1.5:
        hints.append(f"traffic volume ×{ops.volume_ratio:.2f}: a new kind of query may be arriving")
    hints = hints[:4]
    hints.append("the worst events of the week, below")
    return hints


def _trend(data: Dataset, groups: list[Group]) -> dict[str, dict[Group, list[float | None]]]:
    out: dict[str, dict[Group, list[float | None]]] = {}
    for m in MEASURES:
        out[m] = {}
        for g in groups:
            means: list[float | None] = []
            for block in data.trend[-TREND_WEEKS:]:
                h = group_hist(block.hists, m, g)
                means.append(h.sum / h.count if h is not None and h.count else None)
            out[m][g] = means
    return out


def _traffic_hints(mix: SegmentMix | None, pop: QueryPopulation | None) -> list[str]:
    out = []
    if mix is not None and mix.moved:
        out.append(
            f"the segment mix moved too ({mix.moved_words()}): the change shown is within "
            "segments, at the baseline's mix"
        )
    if pop is not None and pop.moved:
        out.append("the questions changed (" + "; ".join(pop.moved) + ")")
    return out


def _notes(report: Report, cur: WindowData, base: WindowData) -> list[str]:
    notes = []
    if not cur.days_with_data:
        notes.append(f"no data in the current window {cur.window.label}")
    jb, jc = report.judge_base.models, report.judge_cur.models
    if jb and jc and set(jb) != set(jc):  # grades of two identities are never mixed: say so
        notes.append(
            "the judge identity (model/prompt/mode) changed: the baseline was graded by "
            + ", ".join(f"`{m}`" for m in sorted(jb)) + ", this week by "
            + ", ".join(f"`{m}`" for m in sorted(jc))
            + "; a change of the measures may be the judge's, not the retriever's"
        )  # fmt: skip
    if report.first_week:
        notes.append(
            f"no baseline yet: the baseline window {base.window.label} has no events (the first "
            "week of monitoring, or older than the data kept); this week's figures are shown and "
            "comparisons start with next week's report"
        )
    if report.too_few:
        names = ", ".join(
            f"{group_name(g)} ({report.volumes[g][0]} → {report.volumes[g][1]})"
            for g in report.too_few
        )
        notes.append(
            f"too few events to tell for {names}: a verdict needs at least {MIN_EVENTS} events "
            f"from {MIN_QUERIES} distinct queries in each window"
        )
    if report.cannot_tell:
        names = ", ".join(group_name(g) for g in report.cannot_tell)
        notes.append(
            f"cannot tell for {names}: its events form fewer than {MIN_CLUSTERS} question "
            "clusters in a window (events that share their query or most of their top-K "
            "passages count as one question), too few for an interval"
        )
    if report.spans:
        names = ", ".join(
            f"{group_name(g)}: the last {s.weeks} weeks against the {s.base_weeks} before "
            f"({s.base} → {s.cur})"
            for g, s in report.spans.items()
        )
        notes.append(
            f"fewer than {MIN_EVENTS} events from {MIN_QUERIES} queries in one week, compared "
            "over the weeks kept: the weeks since the mean last changed against those before, "
            f"back to the change before (p from a permutation test of the whole scan): {names}"
        )
    sources = {r.source for r in report.rows if r.change is not None}
    if "kept records (sample)" in sources:
        notes.append(
            "some retrievers had more events than the per-day records keep (50,000 a day): they "
            "are compared on the kept records, the newest of each day"
        )
    if "binned counts" in sources:
        notes.append(
            "some retrievers have no per-event records: they are compared on their binned "
            "counts, each event counted as its own query"
        )
    return notes


def analyze(data: Dataset, now: datetime | None = None) -> Report:
    """Compare the windows, rank the regressions and pick the events to drill into."""
    cur, base = data.current, data.baseline
    compared = compare_all(cur, base, data.trend)
    rows = compared.rows
    groups = groups_of(cur, base)
    ops = [OpsRow(g, group_ops(base, g), group_ops(cur, g)) for g in groups]
    ops_by = {o.group: o for o in ops}
    jb, jc = judge_ops(base), judge_ops(cur)
    grade_psis = [o.grade_psi for o in ops if o.grade_psi is not None]
    judge_shift = len(grade_psis) >= 2 and min(grade_psis) >= drift.PSI_MODERATE
    models_changed = bool(jb.models and jc.models and set(jb.models) != set(jc.models))
    mixes = {g: segment_mix(g, c) for g, c in compared.coded.items()}
    pops = {g: query_population(g, c) for g, c in compared.coded.items()}
    for g, (vb, vc) in compared.volumes.items():
        if vb.enough and vc.enough:
            continue
        # too few events to tell: their shares are shown, but no shift of the traffic is named
        # (a handful of events moves a share by chance, and nothing is compared to explain)
        mix = mixes.get(g)
        if mix is not None:
            mixes[g] = replace(mix, moved=False)
        if g in pops:
            pops[g] = replace(pops[g], moved=[])
    regressions = []
    judged = verdicts(rows, ops_by)
    for v in judged:
        g, bad = v.group, v.regressed
        if not bad:
            continue
        head = bad[0]
        traffic = _traffic_hints(mixes.get(g), pops.get(g))
        regressions.append(
            Regression(
                g,
                head,
                bad[1:],
                drift.severity(head.tested),
                drift.evidence(head.p),
                _hints(bad, ops_by.get(g), cur, base, judge_shift, models_changed, traffic),
                [why for _, why in v.discounted],
            )
        )
    rank = {"major": 0, "moderate": 1, "minor": 2}
    regressions.sort(key=lambda r: (rank[r.severity], -abs(r.headline.tested.effect)))
    improvements = sorted(  # only retrievers whose verdict is an improvement: never a collapse
        (r for v in judged for r in v.improved), key=lambda r: -abs(r.tested.effect)
    )
    report = Report(
        current=cur.window,
        baseline=base.window,
        generated_at=now or datetime.now(UTC),
        rows=rows,
        regressions=regressions,
        improvements=improvements,
        ops=ops,
        judge_base=jb,
        judge_cur=jc,
        worst_ndcg=cur.worst_ndcg,
        worst_harm=cur.worst_harm,
        trend=_trend(data, groups),
        trend_labels=[b.window.label for b in data.trend[-TREND_WEEKS:]],
        store_text=data.store_text,
        result_ttl_days=data.result_ttl_days,
        explorer_url=data.explorer_url,
        volumes=compared.volumes,
        mix=[m for m in mixes.values() if m is not None],
        population=list(pops.values()),
        verdicts=judged,
        judged=judged_shares(cur.events, received_events(cur)),
        spans=compared.spans,
        signals=signal_changes(cur, base),
    )
    report.notes = _notes(report, cur, base)
    return report


def summary_line(report: Report) -> str:
    """One line for a chat message or a log."""
    n = len(report.regressions)
    head = f"{report.title}: {report.events_cur} events vs {report.events_base} in the baseline; "
    poor = [f"{group_name(v.group)} ({v.level.removeprefix('poor level: ')})"
            for v in report.verdicts if v.level]  # fmt: skip
    levels = f"; poor level: {'; '.join(poor)}" if poor else ""
    if report.first_week:
        return head + "no baseline yet (comparisons start next week)" + levels + "."
    tail = levels
    if report.mix_shifts:
        tail = "; segment mix moved for " + ", ".join(
            f"{group_name(m.group)} ({m.moved_words()})" for m in report.mix_shifts
        )
    if report.too_few:
        tail += f"; too few events to tell for {len(report.too_few)} retriever(s)"
    if report.cannot_tell:
        tail += (
            f"; cannot tell for {len(report.cannot_tell)} retriever(s) (too few question clusters)"
        )
    if not n:
        return head + "no regression" + tail + "."
    r = report.regressions[0]
    d = r.headline.tested
    return (
        head
        + (
            f"{n} regression{'s' if n > 1 else ''}; worst: {group_name(r.group)} "
            f"{NAMES[r.headline.measure]} {fmt(r.headline.base_mean)} → "
            f"{fmt(r.headline.cur_mean)} ({d.estimate:+.3f} within segments, {r.evidence}, "
            f"{r.severity})"
        )
        + tail
        + "."
    )
