"""Lay the report out: the ranked regressions first, then details, plots and worst events."""

from __future__ import annotations

from collections.abc import Callable

from monitor.report.analyze import Report, fmt
from monitor.report.compare import ALPHA, MIN_EFFECT, NAMES, Row, group_name
from monitor.report.document import Doc
from monitor.report.gather import record_ref
from monitor.report.ops import JudgeOps

TEXT_PREVIEW = 160
_METHOD = {
    "bootstrap": "bootstrap over events",
    "normal": "normal (CLT) from events",
    "normal-binned": "normal from binned counts",
    "wilson": "exact counts (Wilson)",
}


def _ci(i: object) -> str:
    if i is None:
        return "n/a"
    return f"{i.estimate:.3f} [{i.low:.3f}, {i.high:.3f}]"  # type: ignore[attr-defined]


def _change(row: Row) -> str:
    d = row.diff
    return "n/a" if d is None else f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def _psi(row: Row) -> str:
    if row.psi is None:
        return "n/a"
    noise = row.psi_noise or 0.0
    tail = " (within noise)" if row.psi < 2 * noise else ""
    return f"{row.psi:.3f} {row.psi_level}{tail}"


def _ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    return f"{fmt(a, digits)} → {fmt(b, digits)}"


def regressions_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Biggest regressions", "regressions-title")
    if not report.regressions:
        doc.p(
            f"No regression: no measure of any retriever got worse beyond noise "
            f"({report.tests} comparisons, family-wise error {ALPHA:.0%}, smallest change "
            f"reported {MIN_EFFECT} standard deviations)."
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
                f"{r.severity} (PSI {fmt(h.psi, 2)})",
                f"{r.sure} (p = {h.p_adj:.2g})",
                r.look_first[0],
            ]
        )
    headers = ["#", "where", "measure", "baseline", "this week", "change [95% CI]", "shift"]
    doc.table(headers + ["how sure", "look at first"], rows, "regressions")
    for i, r in enumerate(report.regressions, 1):
        also = ", ".join(f"{NAMES[o.measure]} {o.tested.estimate:+.3f}" for o in r.others)
        doc.p(f"{i}. {group_name(r.group)}" + (f": also {also}." if also else "."))
        doc.ul(r.look_first)


def measures_section(doc: Doc, report: Report) -> None:
    doc.h(2, "All measures, this week vs baseline", "measures")
    doc.p(
        "Means with 95% confidence intervals (the method is in the last column); the change is "
        "this week minus baseline with a Welch interval; p is Holm-adjusted over every "
        "comparison in this report; PSI on the fixed histogram bins (< 0.1 stable, 0.1-0.25 "
        "moderate, > 0.25 major; 'within noise' when below twice what PSI reads with no change at "
        "this volume); KS on the per-event values."
    )
    groups = sorted({r.group for r in report.rows})
    for g in groups:
        doc.h(3, group_name(g))
        rows = []
        for r in (r for r in report.rows if r.group == g):
            ks = f"{r.ks.statistic:.3f} (p {r.ks.pvalue:.2g})" if r.ks else "n/a"
            method = _METHOD.get(r.cur.method if r.cur else "", "n/a")
            p = f"{r.p_adj:.2g}" if r.p_adj is not None else "n/a"
            rows.append(
                [NAMES[r.measure], _ci(r.base), _ci(r.cur), _change(r), p, _psi(r), ks, method]
                + [r.status]
            )
        doc.table(
            ["measure", "baseline", "this week", "change", "p (Holm)", "PSI", "KS D (p)"]
            + ["CI method", "status"],
            rows,
        )


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
    from monitor.drift import psi_level

    return psi_level(psi) if psi is not None else ""


def _judge_cells(label: str, get: Callable[[JudgeOps], str], b: JudgeOps, c: JudgeOps) -> list[str]:
    return [label, get(b), get(c)]


def judge_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Judge cost and cache", "judge")
    b, c = report.judge_base, report.judge_cur

    def cost(j: JudgeOps) -> str:
        if j.cost_usd is None:
            return "not recorded"
        return (
            f"${j.total_cost:.4f} ("
            + ", ".join(f"{m} ${v:.4f}" for m, v in j.cost_usd.items())
            + ")"
        )

    def ratio(j: JudgeOps) -> str:
        if j.hit_ratio is None:
            return "not recorded"
        return f"{j.hit_ratio:.1%} ({j.cache_hits} hits, {j.cache_misses} misses)"

    def tokens(j: JudgeOps) -> str:
        if j.tokens is None:
            return "not recorded"
        return ", ".join(f"{k}: {int(v)}" for k, v in sorted(j.tokens.items()))

    doc.table(
        ["", "baseline", "this week"],
        [
            _judge_cells("spend", cost, b, c),
            _judge_cells("cache hit ratio", ratio, b, c),
            _judge_cells("tokens", tokens, b, c),
        ],
    )


def _passages(e: dict) -> str:
    return " ".join(
        f"{p}:{g if g is not None else '?'}" for p, g in zip(e["pids"], e["grades"], strict=False)
    )


def worst_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Worst events of the week", "worst")
    if not report.store_text:
        doc.p(
            "Text retention is off (RAGMON_STORE_TEXT=false): only hashes of queries and "
            "passages are kept, so the events show ids and grades only."
        )
    else:
        doc.p(
            f"Query and passage text are shown while the event is retained "
            f"(RAGMON_RESULT_TTL_DAYS = {report.result_ttl_days:g})."
        )
    for title, events in (
        ("Lowest nDCG@K", report.worst_ndcg),
        ("Highest Harm@K", report.worst_harm),
    ):
        doc.h(3, title)
        rows = []
        for e in events:
            lb = e["labels"]
            rows.append(
                [
                    e["id"],
                    e["ts"],
                    f"{lb['retriever']} / {lb['segment']}",
                    fmt(e["m"].get("ndcg")),
                    fmt(e["m"].get("harm")),
                    str(e["k"]),
                    _passages(e),
                    _query(report.details.get(record_ref(e)), report.store_text),
                ]
            )
        doc.table(
            [
                "event",
                "time",
                "retriever / segment",
                "nDCG",
                "Harm",
                "K",
                "top-K passages (id:grade)",
                "query",
            ],
            rows,
        )
        texts = [t for e in events[:3] for t in _texts(e, report.details.get(record_ref(e)))]
        doc.ul(texts)


def _query(payload: dict | None, store_text: bool) -> str:
    if payload is None:
        return "expired (past RAGMON_RESULT_TTL_DAYS)"
    q = payload.get("query")
    if isinstance(q, str):
        return q
    return "not retained (hash only)" if not store_text else "not retained"


def _texts(e: dict, payload: dict | None) -> list[str]:
    if payload is None or not isinstance(payload.get("query"), str):
        return []
    out = []
    grades = dict(zip(e["pids"], e["grades"], strict=False))
    for p in payload.get("passages", [])[: e["k"]]:
        text = p.get("text")
        if isinstance(text, str):
            short = text if len(text) <= TEXT_PREVIEW else text[:TEXT_PREVIEW] + "…"
            out.append(f"{e['id']} · {p['id']} (grade {grades.get(p['id'], '?')}): {short}")
    return out


def methods_section(doc: Doc) -> None:
    doc.h(2, "How to read this report", "methods")
    doc.ul(
        [
            "A regression is a measure whose change points the bad way (Harm@K up, every other "
            f"measure down), with a Holm-adjusted p-value below {ALPHA} over all comparisons "
            f"in the report, and a change of at least {MIN_EFFECT} pooled standard deviations.",
            "How sure: almost certainly real (p < 0.001), very likely real (< 0.01), likely real "
            "(< 0.05), possibly real (< 0.2), else indistinguishable from noise.",
            "Shift: major when PSI > 0.25 or the change is at least half a standard deviation; "
            "moderate when PSI ≥ 0.1 or at least 0.2 SD; else minor.",
            "Confidence intervals: percentile bootstrap over events (1000 resamples, seeded) "
            "when the per-event values are kept and n ≤ 5000; normal (CLT) for larger n; Wilson "
            "for Hit@K; normal with the spread from the bin mid-points when only binned counts "
            "are available.",
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
    regressions_section(doc, report)
    for note in report.notes:
        doc.p(f"Note: {note}.")
    if report.improvements:
        doc.h(2, "Improvements", "improvements")
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
    ops_section(doc, report)
    judge_section(doc, report)
    worst_section(doc, report)
    methods_section(doc)
    return doc
