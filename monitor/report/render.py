"""Lay the report out: the ranked regressions first, then details, plots and worst events."""

from __future__ import annotations

from collections.abc import Callable

from ragmon.core import drift
from ragmon.core.pages import WORST_SORT, events_url
from ragmon.report.analyze import Report, fmt
from ragmon.report.compare import (
    CANNOT_TELL,
    MIN_EVENTS,
    MIN_QUERIES,
    NAMES,
    PSI_ALPHA,
    Group,
    Row,
    group_name,
)
from ragmon.report.coverage import coverage_section
from ragmon.report.document import Cell, Doc, Link
from ragmon.report.family import ALPHA, MIN_EFFECT, PRIMARY, PRIMARY_SHARE, WORSE_SHARE
from ragmon.report.judging import agreement_section, anchor_section, estimates_section
from ragmon.report.ops import JudgeOps
from ragmon.report.population import MIX_MIN_SHARE, SegmentMix
from ragmon.report.signal_shifts import GroupSignals
from ragmon.report.verdict import Verdict
from ragmon.report.worst import worst_section


def _ci(i: object, tell: bool = True) -> str:
    """`mean [low, high]`; `tell` False: the mean with "cannot tell" for its interval."""
    if i is None:
        return "n/a"
    if not tell:
        return f"{i.estimate:.3f} [cannot tell]"  # type: ignore[attr-defined]
    return f"{i.estimate:.3f} [{i.low:.3f}, {i.high:.3f}]"  # type: ignore[attr-defined]


def _change(row: Row) -> str:
    d = row.change
    return "n/a" if d is None else f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def _effect(row: Row) -> str:
    d = row.change
    if d is None:
        return "n/a"
    lo, hi = d.effect_interval
    return f"{d.effect:+.2f} SD [{lo:+.2f}, {hi:+.2f}]"


def _psi(row: Row) -> str:
    return "n/a" if row.psi is None else f"{row.psi:.3f} {row.psi_reading}"


def _ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    return f"{fmt(a, digits)} → {fmt(b, digits)}"


def regressions_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Biggest regressions", "regressions-title")
    if report.first_week:
        doc.p(
            "No baseline yet: the baseline window has no events, so nothing can be compared. "
            "This week's figures are below; next week's report compares against them."
        )
        return
    if not report.regressions:
        judged = len({r.group for r in report.rows if r.change is not None})
        if not judged:
            doc.p("No verdict: no retriever has enough data in both windows (see the note below).")
            return
        doc.p(
            f"No regression: no measure of the {judged} retriever(s) with enough data got worse "
            f"within segments beyond noise ({report.tests} comparisons, family-wise error "
            f"{ALPHA:.0%}, smallest change reported {MIN_EFFECT} standard deviations)."
        )
        return
    rows = []
    for i, r in enumerate(report.regressions, 1):
        h = r.headline
        rows.append(
            [
                str(i),
                group_name(r.group),
                NAMES[h.measure],
                fmt(h.base_mean),
                fmt(h.cur_mean),
                _change(h),
                f"{r.severity} ({_effect(h)})",
                f"{r.evidence} (p = {h.p:.2g})",
                r.look_first[0],
            ]
        )
    headers = ["#", "where", "measure", "baseline", "this week", "change within segments [95% CI]"]
    doc.table(headers + ["severity", "evidence", "look at first"], rows, "regressions")
    for i, r in enumerate(report.regressions, 1):
        also = ", ".join(f"{NAMES[o.measure]} {o.tested.estimate:+.3f}" for o in r.others)
        doc.p(f"{i}. {group_name(r.group)}" + (f": also {also}." if also else "."))
        doc.ul(r.look_first)
        if r.group in report.signals:
            doc.p(f"What the app sent, every event (signals): {report.signals[r.group].reading()}.")
        if r.opposite:
            doc.p("Moved the good way, read with the regression (not improvements):")
            doc.ul(r.opposite)


def verdicts_section(doc: Doc, report: Report) -> None:
    """One verdict per retriever, its measures read together (`ragmon.report.verdict`)."""
    if not report.verdicts:
        return
    doc.h(2, "Verdict per retriever", "verdicts")
    doc.p(
        "On change (this week against the baseline, every measure read together) and on level "
        "(this week's interval wholly past a line: Hit@K below 0.6, Harm@K above 0.3, the "
        "level alerts' lines). Each retriever links to its events in the explorer, worst first."
    )
    doc.table(
        ["where", "verdict", "level", "why"],
        [[_where(report, v.group), v.verdict, v.level or "ok", v.why] for v in _first(report)],
        "verdicts",
    )


def _first(report: Report) -> list[Verdict]:
    """The verdicts that need a person first: regressions, then poor levels, then the rest."""
    return sorted(report.verdicts, key=lambda v: (v.verdict != "regression", not v.level))


def _where(report: Report, g: Group) -> Cell:
    """The retriever's name, linked to its events worst first when the explorer is known."""
    if not report.explorer_url:
        return group_name(g)
    labels = dict(zip(("app", "index", "retriever"), g, strict=True))
    return Link(group_name(g), report.explorer_url.rstrip("/") + events_url(
        {**labels, "sort": WORST_SORT}))  # fmt: skip


def traffic_section(doc: Doc, report: Report) -> None:
    """Where the segment mix or the questions moved: shares side by side, and what the mix
    explains of each mean's change (every retriever's shares are in the measures section)."""
    moved = [p for p in report.population if p.moved]
    if not report.mix_shifts and not moved:
        return
    doc.h(2, "Did the traffic change?", "traffic")
    if report.mix_shifts:
        doc.p(
            "The segment mix moved. A mix shift moves a mean without any retriever getting "
            "worse, so regressions are judged within segments, at the baseline's mix; a segment "
            f"is called moved when its share changed by at least {MIX_MIN_SHARE:.0%} beyond noise."
        )
        rows = []
        for m in report.mix_shifts:
            for r in (r for r in report.rows if r.group == m.group and r.change):
                d = r.tested
                rows.append(
                    [group_name(m.group), _shares(m), NAMES[r.measure], f"{d.total:+.3f}",
                     f"{d.mix:+.3f}", f"{d.estimate:+.3f}", r.status]
                )  # fmt: skip
        doc.table(
            ["where", "segment shares (baseline → this week)", "measure", "total change"]
            + ["from the mix", "within segments", "status"],
            rows,
            "mix",
        )
    if moved:
        doc.p("The questions themselves changed (share of repeated questions, question length):")
        doc.ul([f"{group_name(p.group)}: " + "; ".join(p.moved) for p in moved])


def _shares(mix: SegmentMix) -> str:
    return ", ".join(f"`{s}` {b:.0%} → {c:.0%}" for s, b, c in mix.shares)


def measures_section(doc: Doc, report: Report) -> None:
    doc.h(2, "All measures, this week vs baseline", "measures")
    doc.p(
        "Means with 95% intervals that allow for repeated questions (cluster-robust by query, "
        "t reference; cut to the measure's range); the total change, and the change within "
        "segments at the baseline's segment mix, no question weighing more than "
        f"{drift.CAP:g} times the average one, which is what is tested; p is Holm-adjusted "
        f"over every comparison in this report, {NAMES[PRIMARY]} holding "
        f"{PRIMARY_SHARE:.0%} of the level and a change the bad way {WORSE_SHARE:.0%} of each "
        "comparison's; PSI on the fixed histogram "
        "bins (< 0.1 stable, 0.1-0.25 moderate, > 0.25 major), shown as 'within noise' when "
        f"a PSI this large has a chance of {PSI_ALPHA:.0%} "
        "or more with no change at this volume."
    )
    mixes = {m.group: m for m in report.mix}
    verdict = {v.group: v for v in report.verdicts}
    for g in sorted({r.group for r in report.rows}):
        vb, vc = report.volumes.get(g, (None, None))
        doc.h(3, group_name(g))
        v = verdict.get(g)
        said = f"Verdict: {v.verdict}. " if v else ""
        discounted = {id(r) for r, _ in v.discounted} if v else set()
        span = report.spans.get(g)
        if span is not None:
            doc.p(
                f"{said}Too few events in one week ({vb} → {vc}): the last {span.weeks} weeks "
                f"against the {span.base_weeks} before ({span.base} → {span.cur}), the weeks "
                "since the mean last changed against those before, back to the change before; "
                "p from a permutation test of that scan, segments pooled."
            )
        elif vb is not None:
            mix = mixes.get(g)
            segments = f" Segment shares: {_shares(mix)}." if mix else ""
            doc.p(f"{said}Baseline: {vb}; this week: {vc}.{segments}")
        rows = []
        for r in (r for r in report.rows if r.group == g):
            status = "not an improvement (see the verdict)" if id(r) in discounted else r.status
            tell = r.status != CANNOT_TELL
            total = f"{r.change.total:+.3f}" if r.change else "n/a"
            p = f"{r.p_adj:.2g}" if r.p_adj is not None else "n/a"
            rows.append(
                [NAMES[r.measure], _ci(r.base, tell), _ci(r.cur, tell), total, _change(r), p]
                + [_psi(r)]
                + [status]
            )
        doc.table(
            ["measure", "baseline", "this week", "total change", "within segments", "p (Holm)"]
            + ["PSI", "status"],
            rows,
        )


def signals_section(doc: Doc, report: Report) -> None:
    """Per retriever, the signals of every event (no judge) against the baseline."""
    if not report.signals:
        return
    doc.h(2, "What the app sent: signals of every event", "signals")
    doc.p(
        "Counted on every accepted event, judged or not (docs/signals.md). A signal moved when "
        f"its PSI on the fixed bins is at least {drift.PSI_MODERATE} and a PSI this large has a "
        f"chance below {PSI_ALPHA:.0%} with no change; means are shown beside it. Short "
        "results (M < K) and distinct queries per event are shares, read as two bins each; "
        "distinct queries are HyperLogLog estimates (0.81 %), kept 15 days (— when a window's "
        "are gone)."
    )

    def queries(s: GroupSignals) -> str:
        return f"{s.queries[0]} → {s.queries[1]}" if s.queries else "—"

    doc.table(
        ["where", "events", "empty results", "short results (M < K)", "distinct queries",
         "moved (baseline → this week)"],
        [
            [group_name(g), f"{s.events[0]} → {s.events[1]}",
             f"{s.empty[0]:.1%} → {s.empty[1]:.1%}", f"{s.short[0]:.1%} → {s.short[1]:.1%}",
             queries(s), s.reading()]
            for g, s in sorted(report.signals.items())
        ],
        "signals-table",
    )  # fmt: skip


def ops_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Volume, K and the K/N̂_p regime", "ops")
    rows = []
    for o in report.ops:
        vr = o.volume_ratio
        rows.append(
            [
                group_name(o.group),
                f"{o.base.events} → {o.cur.events}" + (f" (×{vr:.2f})" if vr else ""),
                _ratio(o.base.k_mean, o.cur.k_mean, 1) + (" changed" if o.k_changed else ""),
                _ratio(o.base.below_share, o.cur.below_share),
                o.cur.regime + (f" (was {o.base.regime})" if o.regime_changed else ""),
            ]
        )
    doc.table(["where", "events", "mean K", "share K/N̂_p ≤ 1", "regime this week"], rows)
    doc.h(2, "Grade mix of the judge's labels", "grades")
    rows = []
    for o in report.ops:
        bt, ct = sum(o.base.grades), sum(o.cur.grades)
        cells = [
            f"{(b / bt if bt else 0):.2f} → {(c / ct if ct else 0):.2f}"
            for b, c in zip(o.base.grades, o.cur.grades, strict=True)
        ]
        psi = o.grade_psi
        rows.append([group_name(o.group), *cells, f"{fmt(psi)} {_level(psi)}"])
    doc.table(["where", "grade 0", "grade 1", "grade 2", "grade 3", "PSI"], rows)


def _level(psi: float | None) -> str:
    from ragmon.core.drift import psi_level

    return psi_level(psi) if psi is not None else ""


def _judge_cells(label: str, get: Callable[[JudgeOps], str], b: JudgeOps, c: JudgeOps) -> list[str]:
    return [label, get(b), get(c)]


def _spend(j: JudgeOps) -> str:
    if j.cost_usd:
        return f"${j.total_cost:.4f} (" + ", ".join(
            f"{m} ${v:.4f}" for m, v in j.cost_usd.items()
        ) + ")"  # fmt: skip
    if j.lexical_only:
        return "$0: the lexical judge runs locally and costs nothing"
    if j.known_only:
        return "$0: every grade was sent by the app, the judge was not needed"
    if j.tokens:
        return "$0 recorded: the model has no price (set RAGMON_PRICES)"
    return "no judge calls recorded" if j.sources else "not recorded"


def _sources(j: JudgeOps) -> str:
    total = sum(j.sources.values())
    if not total:
        return "not recorded"
    words = {"judge": "graded by the judge", "cache": "from the judgment cache",
             "known": "sent by the app (known)"}  # fmt: skip
    return ", ".join(
        f"{n / total:.0%} {words.get(src, src)}"
        for src, n in sorted(j.sources.items(), key=lambda x: -x[1])
    )


def _models(j: JudgeOps) -> str:
    if not j.models:
        return "none" if j.sources else "not recorded"
    total = sum(j.models.values())
    return ", ".join(f"`{m}` ({n / total:.0%})" for m, n in sorted(j.models.items()))


def judge_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Who graded, and what it cost", "judge")
    b, c = report.judge_base, report.judge_cur

    def ratio(j: JudgeOps) -> str:
        if j.hit_ratio is None:
            return "not recorded"
        return f"{j.hit_ratio:.1%} ({j.cache_hits} hits, {j.cache_misses} misses)"

    def tokens(j: JudgeOps) -> str:
        if j.tokens is None:
            return "none" if j.lexical_only or j.known_only else "not recorded"
        return ", ".join(f"{k}: {int(v)}" for k, v in sorted(j.tokens.items()))

    doc.table(
        ["", "baseline", "this week"],
        [
            _judge_cells("grades", _sources, b, c),
            _judge_cells("judge (model/prompt/mode)", _models, b, c),
            _judge_cells("spend", _spend, b, c),
            _judge_cells("cache hit ratio", ratio, b, c),
            _judge_cells("tokens", tokens, b, c),
        ],
    )


def methods_section(doc: Doc) -> None:
    doc.h(2, "How to read this report", "methods")
    doc.ul(
        [
            f"A retriever is judged only with at least {MIN_EVENTS} events from {MIN_QUERIES} "
            "distinct queries in each window. A retriever below that in one week is compared "
            "over the weeks kept: the weeks since its mean last changed against those before, "
            "back to the change before (each with at least 8 events from 5 queries), the "
            "p-value from a permutation test of the whole scan; below that the report says "
            "'too few events to tell' with the counts.",
            "A regression is a measure whose change within segments, at the baseline's segment "
            "mix, points the bad way (Harm@K up, every other measure down), with a "
            f"Holm-adjusted p-value below {ALPHA} over all comparisons in the report "
            f"({NAMES[PRIMARY]}, where a drop shows first, holding {PRIMARY_SHARE:.0%} of the "
            f"level, the other measures the rest; a change the bad way {WORSE_SHARE:.0%} of each "
            "comparison's, the good way the rest) and a "
            f"change of at least {MIN_EFFECT} standard deviations of one event. A change that "
            "only the segment mix explains is a mix shift, not a regression.",
            "Each retriever has one verdict, its measures read together: any regression makes "
            "it a regression. Harm@K counts near misses (on-topic passages that do not answer): "
            "when P@K, nDCG@K or Hit@K fall with it, its fall means the near misses became "
            "off-topic passages, part of a collapse, and is never listed as an improvement.",
            "Intervals and p-values allow for repeated questions: the standard errors are "
            "cluster-robust by query (a question asked in both weeks is one cluster) and the "
            "reference is Student's t with the effective number of query clusters as degrees "
            "of freedom.",
            "Evidence: p is how often a stable deployment would show, somewhere in this report, "
            "a change at least this large. It is not the probability that the change is real. "
            "Very strong evidence: p < 0.001; strong: < 0.01; some: < 0.05.",
            "Severity comes from the effect size with its 95% interval, in standard deviations "
            "of one event: major when the whole interval is beyond 0.5, moderate beyond 0.2, "
            "else minor.",
            "Per-day data are keyed by the UTC day of each event's timestamp, so late events land "
            "on the right day.",
        ]
    )


def build(report: Report, plots: dict[str, str]) -> Doc:
    doc = Doc(report.title)
    doc.p(
        f"This week {report.current.start} to {report.current.end} against the baseline "
        f"{report.baseline.start} to {report.baseline.end} (UTC days): {report.events_cur} "
        f"events this week, {report.events_base} in the baseline. Generated "
        f"{report.generated_at:%Y-%m-%d %H:%M} UTC."
    )
    verdicts_section(doc, report)
    regressions_section(doc, report)
    for note in report.notes:
        doc.p(f"Note: {note}.")
    traffic_section(doc, report)
    if report.improvements:
        doc.h(2, "Improvements", "improvements")
        doc.p(
            "Retrievers whose verdict is an improvement: no measure got worse, and a fall of "
            "Harm@K is listed only when P@K, nDCG@K and Hit@K did not fall with it."
        )
        doc.table(
            ["where", "measure", "baseline", "this week", "change [95% CI]"],
            [
                [
                    group_name(r.group),
                    NAMES[r.measure],
                    fmt(r.base_mean),
                    fmt(r.cur_mean),
                    _change(r),
                ]
                for r in report.improvements
            ],
        )
    doc.h(2, "Plots", "plots")
    for alt, png in plots.items():
        doc.img(png, alt)
    measures_section(doc, report)
    signals_section(doc, report)
    ops_section(doc, report)
    coverage_section(doc, report.judged)
    judge_section(doc, report)
    agreement_section(doc, report.agreement)
    estimates_section(doc, report.current, report.estimates)
    anchor_section(doc, report.anchor_runs, report.current)
    worst_section(doc, report)
    methods_section(doc)
    return doc
