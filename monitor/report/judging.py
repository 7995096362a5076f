"""The judge checked against people: agreement per app and judge identity, and the corrected
estimates per series, as a report section (the weekly report and `ragmon agreement` print the
same one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragmon.core.agreement import Agreement
from ragmon.core.anchor import BLIND, blind_reason, drift
from ragmon.core.review_pages import interval_text
from ragmon.core.reviews import MEASURE_NAMES
from ragmon.core.window import Window, iso_week
from ragmon.oversight import UNITS, Oversight, SeriesEstimates, last_days
from ragmon.report.document import Doc, to_markdown
from ragmon.settings import Settings
from ragmon.store import Store


def _reference(reference: str) -> str:
    return "people" if reference == "human" else f"first judge `{reference}`"


def agreement_section(doc: Doc, found: Mapping[tuple[str, str, str], Agreement]) -> None:
    """One row per (app, judge identity, reference), then each one's confusion matrix."""
    doc.h(2, "The judge against people", "agreement")
    if not found:
        doc.p(
            "No passage graded by both the judge and a person yet: grade a sample on the "
            "explorer's review page (`/ui/review`) or with `POST /v1/grades`."
        )
        return
    doc.p(
        "On the passages graded by both (all people's grades so far), each with its 95 % "
        "interval: the share given the same grade, quadratic-weighted kappa (1 = perfect, 0 = "
        "chance; a near miss costs little), unweighted kappa (every other grade counts as a "
        "disagreement), and the judge's mean grade minus the reference's (> 0: it over-grades). "
        "n/a: fewer than 30 pairs from 10 events."
    )
    rows = [
        [f"`{app}`", f"`{judge}`", _reference(ref), str(a.pairs), str(a.events),
         interval_text(a.exact), interval_text(a.kappa), interval_text(a.kappa_unweighted),
         interval_text(a.difference, 2)]
        for (app, judge, ref), a in found.items()
    ]  # fmt: skip
    head = ["app", "judge", "against", "pairs", "events", "exact", "quadratic kappa",
            "unweighted kappa", "judge − reference"]  # fmt: skip
    doc.table(head, rows, "agreement")
    for (app, judge, ref), a in found.items():
        doc.p(f"Confusion of `{judge}` against {_reference(ref)} (`{app}`): rows the "
              "reference's grade, columns the judge's.")  # fmt: skip
        doc.table(
            ["", "judge 0", "judge 1", "judge 2", "judge 3"],
            [[f"reference {r}", *map(str, row)] for r, row in enumerate(a.confusion)],
        )


def estimates_section(doc: Doc, window: Window, found: Sequence[SeriesEstimates]) -> None:
    """Per series: the judge-only mean, the corrected one with its interval, the people-only
    interval and what the people's grades are worth."""
    doc.h(2, f"Corrected estimates ({window.label})", "estimates")
    graded = [s for s in found if s.graded]
    if not graded:
        doc.p(
            "No judged event of this window was graded by people: the measures rest on the "
            "judge's grades alone."
        )
        return
    doc.p(
        "Beside each judge-only mean: the PPI++ mean corrected with people's grades, with its "
        "95 % interval, the interval of people's grades alone on the same events, and how many "
        f"people's grades the corrected one is worth. P@K counts {UNITS['passage']}; nDCG@K "
        f"and Hit@K count {UNITS['event']}. n/a: fewer than 10 graded units from 10 events. "
        "**not a random draw**: the graded events do not look like a random draw of the "
        "judged ones (people graded a part that looks better or worse to the judge, or only "
        "events of one judge identity in a window that had several), so no corrected number "
        "can be defended until people grade events drawn at random (`/ui/review`)."
    )
    rows = []
    for s in graded:
        where = "/".join(s.labels.values())
        for m, c in s.measures.items():
            judge = "n/a" if c.judge_only is None else f"{c.judge_only:.3f}"
            worth = "n/a" if c.effective_labels is None else f"{c.effective_labels:.1f}"
            corrected = "not a random draw" if c.random_draw is False else interval_text(c.estimate)
            rows.append([f"`{where}`", MEASURE_NAMES[m], judge, corrected,
                         interval_text(c.human_only), str(c.labels), worth])  # fmt: skip
    for s in graded:
        why = next((c.reason for c in s.measures.values() if c.random_draw is False), None)
        if why:
            doc.p(f"`{'/'.join(s.labels.values())}`: {why}.")
    head = ["series", "measure", "judge only", "corrected", "people only", "graded", "worth"]
    doc.table(head, rows, "estimates")


def print_judging(
    settings: Settings, app: str | None = None, week: str | None = None, days: int = 7
) -> str:
    """What `ragmon agreement` prints (Markdown): agreement per app and judge identity, and
    the corrected estimates of the window."""
    if days < 1:
        raise ValueError("--days must be at least 1")
    window = iso_week(week) if week else last_days(days)
    store = Store.connect(settings)
    try:
        oversight = Oversight(store, settings.measure_params())
        doc = Doc("ragmon agreement" + (f": app {app}" if app else ""))
        agreement_section(doc, oversight.agreement(app))
        estimates_section(doc, window, oversight.estimates(window, {"app": app} if app else None))
    finally:
        store.close()
    return to_markdown(doc)


def _bounds(d: Mapping[str, float] | None, digits: int = 3) -> str:
    if not d:
        return "n/a"
    return f"{d['estimate']:.{digits}f} [{d['low']:.{digits}f}, {d['high']:.{digits}f}]"


def anchor_section(doc: Doc, runs: Sequence[Mapping], window: Window | None = None) -> None:
    """The anchor set's re-judgings (of `window`'s days, else all) against the baseline of
    the judge identity that ran last, whether the drift alert's condition holds, and whether
    the latest run was blind (and why)."""
    doc.h(2, "Judge drift: the anchor set", "anchor")
    found = drift(runs)
    last = runs[-1] if runs else None
    blind = blind_reason(last) if last is not None else "no_run"
    if blind is not None:
        said = (last or {}).get("reason") or BLIND.get(blind, "never re-judged yet")
        doc.p(
            f"**The judge drift watch is blind**: its latest run could not measure agreement "
            f"({said}); the RagmonJudgeDriftWatchBlind alert fires unless nothing was graded "
            "yet. `ragmon worker --with-scheduler` re-judges it every "
            "RAGMON_ANCHOR_EVERY_HOURS; people's grades on `/ui/review` grow the set."
        )
    if found is not None:
        latest, baseline = found
        kappa, base = latest["kappa"], baseline["kappa"]
        drifted = kappa["high"] < base["estimate"]
        doc.p(
            f"The judge `{latest['judge']}` graded the anchor set's {latest['passages']} "
            f"passages again on {latest['at'][:16].replace('T', ' ')} (its latest run that "
            f"measured agreement). Quadratic-weighted kappa with the set's grades: "
            f"{_bounds(kappa)}, against {_bounds(base)} on its first run "
            f"({baseline['at'][:10]}). "
            + (
                "**It agrees less than it did: its interval lies below the baseline (the "
                "RagmonJudgeDrift alert fires).**"
                if drifted
                else "No fall beyond the interval."
            )
        )
    shown = [r for r in runs if window is None or window.start.isoformat() <= r["at"][:10]
             <= window.end.isoformat()]  # fmt: skip
    if not shown:
        return
    rows = [
        [r["at"][:16].replace("T", " "), f"`{r['judge']}`", f"{r.get('graded', 0)}/{r['passages']}",
         str(r.get("questions", "")), _bounds(r.get("kappa")), _bounds(r.get("exact")),
         _bounds(r.get("difference"), 2), r.get("reason") or ""]
        for r in shown
    ]  # fmt: skip
    head = ["run (UTC)", "judge", "graded", "questions", "kappa", "exact", "judge − set", "note"]
    doc.table(head, rows, "anchor")


def anchor_text(runs: Sequence[Mapping]) -> str:
    """What `ragmon anchor` prints (Markdown)."""
    doc = Doc("ragmon anchor")
    anchor_section(doc, runs)
    return to_markdown(doc)
