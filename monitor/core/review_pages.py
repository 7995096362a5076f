"""The explorer's grade buttons and review pages, pure: data in, HTML out (`ragmon.core.pages`).

People grade passages the judge graded, one click a grade on the judge's 0-3 scale with the
rubric's words. The review page draws events at random from one series and shows the query
and every passage as the judge saw them, without the judge's grades (a grade seen first pulls
the person's towards it); the event page puts the same buttons beside the judge's grades.
Every button POSTs its form to `/ui/grades` (`ragmon.api.review`), from this site only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from ragmon.core.agreement import Agreement
from ragmon.core.corrected import Corrected
from ragmon.core.drift import Interval
from ragmon.core.pages import GradeForm, _e, event_url, form_start, grade_cell, page
from ragmon.core.reviews import MEASURE_NAMES, RUBRIC
from ragmon.core.wire import LABEL_KEYS, SEP, series_labels


def review_url(labels: Mapping[str, str]) -> str:
    """The review page of one series (it draws an event of it at random). The reviewer is the
    cookie's, never the link's."""
    return "/ui/review?" + urlencode({k: labels[k] for k in LABEL_KEYS if k in labels})


def review_event_url(app: str, event_id: str) -> str:
    return f"/ui/review/{quote(app, safe='')}/{quote(event_id, safe='')}"


def interval_text(i: Interval | None, digits: int = 3) -> str:
    """`estimate [low, high]`, or n/a."""
    if i is None:
        return "n/a"
    return f"{i.estimate:.{digits}f} [{i.low:.{digits}f}, {i.high:.{digits}f}]"


def _corrected(c: Corrected) -> str:
    if c.random_draw is False:
        return f"<span class=not-random title='{_e(c.reason or '')}'>not a random draw</span>"
    return interval_text(c.estimate)


def standing(
    agreement: Mapping[str, Agreement], estimates: Mapping[str, Corrected], days: int
) -> str:
    """What people's grades say so far: the app's judge identities against them, and the
    series' corrected estimates of the last `days` days (n/a: too few grades yet)."""
    rows = "".join(
        f"<tr><td>{_e(judge)}</td><td class=n>{a.pairs}</td><td class=n>{a.events}</td>"
        f"<td class=n>{interval_text(a.exact)}</td><td class=n>{interval_text(a.kappa)}</td>"
        f"<td class=n>{interval_text(a.kappa_unweighted)}</td>"
        f"<td class=n>{interval_text(a.difference, 2)}</td></tr>"
        for judge, a in agreement.items()
    )
    agree = (
        "<table id=agreement><tr><th>judge</th><th>pairs</th><th>events</th><th>same grade</th>"
        "<th>quadratic kappa</th><th>unweighted kappa</th><th>judge − people</th></tr>"
        f"{rows}</table>"
        if rows else "<p id=agreement>No passage of this app graded by people yet.</p>"
    )  # fmt: skip
    rows = "".join(
        f"<tr><td>{MEASURE_NAMES[m]}</td>"
        f"<td class=n>{'n/a' if c.judge_only is None else f'{c.judge_only:.3f}'}</td>"
        f"<td class=n>{_corrected(c)}</td><td class=n>{c.labels}</td>"
        f"<td class=n>{'n/a' if c.effective_labels is None else f'{c.effective_labels:.1f}'}"
        "</td></tr>"
        for m, c in estimates.items()
    )
    corrected = (
        "<table id=estimates><tr><th>measure</th><th>judge only</th><th>corrected [95 %]</th>"
        f"<th>graded by people</th><th>worth</th></tr>{rows}</table>"
    )
    note = (
        "<p class=note>n/a: agreement needs 30 passages of 10 events graded by both, a "
        "corrected estimate 10 graded units of 10 events (docs/agreement.md).</p>"
    )
    flagged = next((c.reason for c in estimates.values() if c.random_draw is False), None)
    if flagged:
        note += f"<p id=not-random class=warn>{_e(flagged)}.</p>"
    return (
        f"<div id=standing><h2>The judge against people (this app)</h2>{agree}"
        f"<h2>This series, last {days} days</h2>{corrected}{note}</div>"
    )


def rubric_note() -> str:
    return "<p class=note>" + "; ".join(
        f"<b>{g}</b> {_e(word)}: {_e(meaning)}" for g, (word, meaning) in
        sorted(RUBRIC.items(), reverse=True)
    ) + ".</p>"  # fmt: skip


def review(found: Mapping[str, Any], form: GradeForm, drawn_from: int, standing: str = "") -> str:
    """One event to grade: the query and every passage as the judge saw them, in rank order,
    with the buttons; not the judge's grades. `drawn_from`: judged events of its series;
    `standing`: what people's grades say so far (`standing`)."""
    labels = found.get("labels") or {}
    series = "/".join(str(labels.get(k)) for k in LABEL_KEYS)
    passages = found.get("passages") or []
    if "query" not in found or any("text" not in p for p in passages):
        why = "This event's texts are not stored (RAGMON_STORE_TEXT=false): nothing to show."
        return page("Review", f"<p id=message>{why}</p>")
    k = found.get("k") or 0
    rows = "".join(
        f"<tr{' class=outside' if p['rank'] > k else ''}><td class=n>{p['rank']}</td>"
        f"<td><pre>{_e(p['text'])}</pre></td>{grade_cell(p, form)}</tr>"
        for p in passages
    )
    done = sum(
        1
        for p in passages
        if any(h["reviewer"] == form.reviewer for h in p.get("human_grades") or ())  # fmt: skip
    )
    body = (
        f"<p>Series <b>{_e(series)}</b>: this event was drawn at random among its "
        f"{drawn_from} judged events of the last 7 days (each equally likely), the window the "
        "corrected estimates count, so people's grades are a fair sample. Grade <b>every</b> "
        "passage: nDCG@K's corrected estimate counts only events whose passages were all "
        f"graded. Graded by you: <span id=progress>{done} of "
        f"{len(passages)}</span>.</p>"
        f"<h2>Query</h2><pre id=query>{_e(found['query'])}</pre>"
        + rubric_note()
        + form_start(found, form)
        + f"<table id=review><tr><th>rank</th><th>passage (top {k} went into the prompt)"
        f"</th><th>grade</th></tr>{rows}</table></form>"
        f'<p><a id=next-event href="{_e(review_url(labels))}">next event</a> '
        f'· <a href="{_e(event_url(str(labels.get("app")), str(found.get("event_id"))))}">'
        "this event with the judge's grades</a></p>" + standing
    )
    return page("Review", body)


def choose(series: Sequence[tuple[str, int]]) -> str:
    """The review page without a series: the series to draw from, with their judged events of
    the last 7 days (the window the review page draws from)."""
    if not series:
        return page("Review", "<p id=message>No judged events yet.</p>")
    rows = []
    for name, n in series:
        url = review_url(series_labels(name))
        rows.append(f'<tr><td><a href="{_e(url)}">{_e(name.replace(SEP, "/"))}</a></td>'
                    f"<td class=n>{n}</td></tr>")  # fmt: skip
    body = (
        "<p>Choose a series: each event to grade is drawn at random among its judged events, "
        "so the grades are a fair sample for the agreement and corrected estimates "
        "(docs/agreement.md).</p>"
        f"<table id=series-to-review><tr><th>app/index/retriever/segment</th>"
        f"<th>judged events, last 7 days</th></tr>{''.join(rows)}</table>"
    )
    return page("Review", body)
