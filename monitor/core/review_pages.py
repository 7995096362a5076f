"""The review pages, pure: data in, a `Page` out (`ragmon.core.pages`; templates/review.html).

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
from ragmon.core.pages import (
    GRADES_URL,
    RUBRIC_ORDER,
    GradeForm,
    Page,
    event_url,
    grading,
    message,
)
from ragmon.core.reviews import MEASURE_NAMES
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


def standing(
    agreement: Mapping[str, Agreement], estimates: Mapping[str, Corrected], days: int
) -> dict[str, Any]:
    """What people's grades say so far: the app's judge identities against them, and the
    series' corrected estimates of the last `days` days (n/a: too few grades yet)."""
    judges = [
        (judge, a.pairs, a.events, interval_text(a.exact), interval_text(a.kappa),
         interval_text(a.kappa_unweighted), interval_text(a.difference, 2))
        for judge, a in agreement.items()
    ]  # fmt: skip
    rows = [
        {
            "measure": MEASURE_NAMES[m],
            "judge_only": "n/a" if c.judge_only is None else f"{c.judge_only:.3f}",
            # a sample that was no random draw has no corrected estimate to show
            "not_random": (c.reason or "") if c.random_draw is False else None,
            "corrected": interval_text(c.estimate),
            "labels": c.labels,
            "worth": "n/a" if c.effective_labels is None else f"{c.effective_labels:.1f}",
        }
        for m, c in estimates.items()
    ]
    flagged = next((c.reason for c in estimates.values() if c.random_draw is False), None)
    return {"judges": judges, "estimates": rows, "days": days, "flagged": flagged}


def review(
    found: Mapping[str, Any],
    form: GradeForm,
    drawn_from: int,
    standing: Mapping[str, Any] | None = None,
) -> Page:
    """One event to grade: the query and every passage as the judge saw them, in rank order,
    with the buttons; not the judge's grades. `drawn_from`: judged events of its series;
    `standing`: what people's grades say so far (`standing`)."""
    labels = found.get("labels") or {}
    passages = found.get("passages") or []
    if "query" not in found or any("text" not in p for p in passages):
        why = "This event's texts are not stored (RAGMON_STORE_TEXT=false): nothing to show."
        return message("Review", why)
    done = sum(
        1
        for p in passages
        if any(h["reviewer"] == form.reviewer for h in p.get("human_grades") or ())  # fmt: skip
    )
    return Page(
        "review.html",
        {
            "title": "Review",
            "series": "/".join(str(labels.get(k)) for k in LABEL_KEYS),
            "drawn_from": drawn_from,
            "done": done,
            "found": found,
            "k": found.get("k") or 0,
            "passages": [(p["rank"], p["text"], grading(p, form)) for p in passages],
            "form": form,
            "grades_url": GRADES_URL,
            "rubric": RUBRIC_ORDER,
            "next": review_url(labels),
            "judged": event_url(str(labels.get("app")), str(found.get("event_id"))),
            "standing": standing,
        },
    )


def choose(series: Sequence[tuple[str, int]]) -> Page:
    """The review page without a series: the series to draw from, with their judged events of
    the last 7 days (the window the review page draws from)."""
    if not series:
        return message("Review", "No judged events yet.")
    rows = [(review_url(series_labels(name)), name.replace(SEP, "/"), n) for name, n in series]
    return Page("choose.html", {"title": "Review", "rows": rows})
