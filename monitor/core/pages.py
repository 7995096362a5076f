"""The explorer's pages, pure: data in, a `Page` out (a template and its raw values, rendered by
`ragmon.templates`). Server-rendered, no script, no build.

Every link carries its filters in the query string, so a page's URL can be pasted into a
ticket. The templates escape every value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from ragmon.core.drift.changes import Cell, binned_change
from ragmon.core.index_members import OVERVIEW, SORTS
from ragmon.core.measure_table import BY_KEY
from ragmon.core.reviews import RUBRIC
from ragmon.core.search import META_PREFIX, Search, describe_search
from ragmon.core.wire import LABEL_KEYS, Status, series_labels

LISTED = ("ndcg", "t", "hit", "harm", "precision", "judged_at_k")  # the list page's columns
CHANGE_P = 0.01  # the overview colours a change only below this p-value (one test per cell)
WORDS = {"judge": "judge", "cache": "judgment cache", "known": "known (sent by the app)"}
WORST_SORT = "ndcg"  # the overview's count links to the series' events by nDCG@K, worst first
QUERY_SHOWN = 120  # characters of the query on the list page
LEXICAL = "lexical/"  # the offline lexical judge's identity starts so (it is no LLM)


def judge_words(identity: str | None) -> str:
    """What graded: the offline lexical judge is not an LLM; an identity of another model is."""
    if not identity:
        return "judge"
    return "lexical judge (offline, no LLM)" if identity.startswith(LEXICAL) else "LLM judge"


def source_words(source: str | None, identity: str | None = None) -> str:
    """A grade source in words, naming the kind of judge when its identity is known."""
    if source == "judge":
        return judge_words(identity)
    if source == "cache" and identity:
        return f"judgment cache ({judge_words(identity)})"
    return WORDS.get(source or "", source or "")


@dataclass(frozen=True)
class Page:
    """A page to render: its template (`ragmon.templates`) and the values it shows, raw (the
    template escapes them)."""

    template: str
    context: Mapping[str, Any]


def num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def events_url(params: Mapping[str, str]) -> str:
    return "/ui/events" + ("?" + urlencode(params) if params else "")


def event_url(app: str, event_id: str) -> str:
    return f"/ui/events/{quote(app, safe='')}/{quote(event_id, safe='')}"


@dataclass(frozen=True)
class SeriesRow:
    """One series on the overview: its labels, events held, and per `OVERVIEW` measure the
    (n, mean, variance) of its events in the last 24 hours and in the 7 days before; `made`
    False while the workers have not made its summary of those windows (none shown)."""

    series: str
    events: int
    recent: dict[str, Cell | None]
    before: dict[str, Cell | None]
    made: bool = True


FLOOR_MEASURES = ("hit", "ndcg")  # a mean at its lowest value: nothing relevant retrieved
FLOOR_MIN_EVENTS = 5  # events a window needs before its mean at the floor is flagged


@dataclass(frozen=True)
class LevelRule:
    """When a series' level is poor whatever its history: a mean past its measure's `line`
    by more than `z` standard errors over at least `min_events` events (the level alerts'
    RAGMON_ALERT_Z and RAGMON_ALERT_MIN_EVENTS)."""

    z: float
    min_events: int


def at_floor(row: SeriesRow) -> str:
    """Why a series is flagged: its Hit@K or nDCG@K mean sits at the measure's lowest value in
    the last 24 hours (or, with too few events there, in the 7 days before); "" when not."""
    for window, cells in (("the last 24 h", row.recent), ("the 7 days before", row.before)):
        held = [(m, c) for m in FLOOR_MEASURES if (c := cells.get(m)) is not None]
        if not held or min(c[0] for _, c in held) < FLOOR_MIN_EVENTS:
            continue
        low = [(m, c) for m, c in held if c[1] <= BY_KEY[m].lo + 1e-9]
        if not low:
            return ""
        said = ", ".join(f"{BY_KEY[m].name} {c[1]:.3f}" for m, c in low)
        return f"at the floor: {said} over {low[0][1][0]} events in {window}"
    return ""


def poor_level(row: SeriesRow, rule: LevelRule) -> str:
    """Why a series' level is poor (a retriever bad from its first day has no change to show):
    a mean of the last 24 hours (or, with too few events there, of the 7 days before) past its
    measure's line (`Measure.line`) by more than `rule.z` standard errors; "" when none is."""
    for window, cells in (("the last 24 h", row.recent), ("the 7 days before", row.before)):
        held = [
            (BY_KEY[m], c)
            for m in OVERVIEW
            if BY_KEY[m].line is not None
            and (c := cells.get(m)) is not None
            and c[0] >= rule.min_events
        ]
        if not held:
            continue
        poor = []
        for measure, (n, mean, var) in held:
            margin = rule.z * math.sqrt(var / n)
            if past := measure.past_line(mean - margin, mean + margin):
                poor.append(f"{measure.name} {mean:.3f} {past} over {n} events")
        return f"poor level: {', '.join(poor)} in {window}" if poor else ""
    return ""


def overview(rows: Sequence[SeriesRow], retention_days: float, rule: LevelRule) -> Page:
    """The series, flagged ones first, each with its means' change per `OVERVIEW` measure
    (None while its summary is not made)."""
    flags = {r.series: at_floor(r) or poor_level(r, rule) for r in rows}
    shown = []
    for r in sorted(rows, key=lambda r: not flags[r.series]):  # flagged series first
        labels = series_labels(r.series)
        changes = [
            change(m, r.recent.get(m), r.before.get(m)) if r.made else None for m in OVERVIEW
        ]
        shown.append(
            {
                "labels": list(labels.values()),
                "events": r.events,
                "worst": events_url({**labels, "sort": WORST_SORT}),  # leads to its worst
                "newest": events_url(labels),
                "changes": changes,
                "flag": flags[r.series],
            }
        )
    return Page(
        "overview.html",
        {
            "title": "Series",
            "label_keys": LABEL_KEYS,
            "measures": [BY_KEY[m].name for m in OVERVIEW],
            "rows": shown,
            "retention_days": f"{retention_days:g}",
            "floor_min_events": FLOOR_MIN_EVENTS,
            "rule": rule,
            "hit_line": f"{BY_KEY['hit'].line:g}",
            "harm_line": f"{BY_KEY['harm'].line:g}",
            "z": f"{rule.z:g}",
        },
    )


@dataclass(frozen=True)
class Change:
    """A cell of the overview: `text` the means, `title` their counts and test ("" for none),
    `tone` "better" or "worse" when Welch's test finds a change (p < `CHANGE_P`)."""

    text: str
    title: str = ""
    tone: str = ""


def change(measure: str, recent: Cell | None, before: Cell | None) -> Change:
    """The last 24 h's mean / the 7 days' before, toned when Welch's test finds a change."""
    text = f"{num(recent[1] if recent else None)} / {num(before[1] if before else None)}"
    if recent is None or before is None:
        return Change(text)
    title = f"{recent[0]} events in the last 24 h, {before[0]} in the 7 days before"
    if min(recent[0], before[0]) < 2:
        return Change(text, title)
    found = binned_change({"all": before}, {"all": recent})
    title += f"; change {found.total:+.3f}, p = {found.pvalue:.2g}"
    if found.pvalue >= CHANGE_P:
        return Change(text, title)
    better = (found.total > 0) == (BY_KEY[measure].better != "lower")
    return Change(text, title, "better" if better else "worse")


def events(
    search: Search, found: Sequence[Mapping[str, Any]], cursor: str | None, partial: bool
) -> Page:
    rows = []
    for ev in found:
        labels = ev["labels"]
        measures = ev.get("measures") or {}
        query = ev.get("query")
        rows.append(
            {
                "when": (ev.get("timestamp") or "").replace("T", " ")[:19],
                "url": event_url(labels["app"], ev["event_id"]),
                "event_id": ev["event_id"],
                "query": "–"
                if not isinstance(query, str)
                else (
                    query if len(query) <= QUERY_SHOWN else query[:QUERY_SHOWN] + "…"
                ),  # fmt: skip
                "app": labels["app"],
                "series": "/".join(labels[k] for k in LABEL_KEYS[1:]),
                "measures": [measures.get(m) for m in LISTED],
                "sources": ", ".join(
                    f"{source_words(s, ev.get('judge'))} {n}"
                    for s, n in (ev.get("grade_sources") or {}).items()
                ),
            }
        )
    return Page(
        "events.html",
        {
            "title": f"Events: {describe_search(search)}",
            "form": filter_form(search),
            "columns": [BY_KEY[m].name for m in LISTED],
            "rows": rows,
            "next": events_url(search.params(cursor)) if cursor else "",
            "partial": partial,
        },
    )


def filter_form(search: Search) -> dict[str, Any]:
    """The filters as a GET form's boxes, (name, label, value, size): labels, trace and time,
    then thresholds and the order; the search's other parameters ride along hidden."""
    current = search.params()

    def box(name: str, label: str, size: int = 12) -> tuple[str, str, str, int]:
        return name, label, current.get(name, ""), size

    limits = [
        box(f"{m}_{op}", f"{BY_KEY[m].name} {word}", 5)
        for m in LISTED
        for op, word in (("lt", "<"), ("gt", ">"))
    ]
    shown = {*LABEL_KEYS, "trace_id", "grade_source", "from", "to", "sort", "query"}
    shown |= {META_PREFIX + k for k in search.meta}
    shown |= {f"{m}_{op}" for m in LISTED for op in ("lt", "gt")}
    return {
        "who": [box(k, k) for k in (*LABEL_KEYS, "trace_id", "grade_source")],
        "query": box("query", "query has", 30),
        "meta": ",".join(f"{k}={v}" for k, v in search.meta.items()),
        "when": [box("from", "from", 22), box("to", "to", 22)],
        "limits": limits,
        "sorts": [(s, "time" if s == "time" else BY_KEY[s].name) for s in SORTS],
        "sort": search.sort,
        "hidden": [(k, v) for k, v in current.items() if k not in shown],
    }


def event(found: Mapping[str, Any], store_text: bool, form: GradeForm | None = None) -> Page:
    """One event: query, measures, each passage with its grade (and who gave it), people's
    grades with buttons to add one (`form`; a judged event only), and the judge's error."""
    labels = found.get("labels") or {}
    passages = []
    for p in found.get("passages") or []:
        graded_by = p.get("graded_by")
        passages.append(
            {
                "rank": p["rank"],
                "id": p.get("id"),
                "score": p.get("score"),
                "grade": p.get("grade"),
                "source": source_words(p.get("grade_source"), graded_by),
                "by": f" ({graded_by})" if graded_by not in (None, "known") else "",
                "duplicate": f"repeats rank {p['duplicate_of']}" if p.get("duplicate_of") else "",
                "text": p.get("text") if "text" in p else p.get("text_sha"),
                "people": people_of(p),
                "grading": grading(p, form) if form is not None else None,
            }
        )
    error = ""
    if found.get("error"):
        failed = found.get("status") == Status.FAILED
        error = ("Failed" if failed else "Last judge error (waits for a retry)") + ": "
        error += str(found["error"])
    measures = found.get("measures") or {}
    series = {k: labels[k] for k in LABEL_KEYS if k in labels}
    return Page(
        "event.html",
        {
            "title": f"Event {found.get('event_id')}",
            "facts": [(k, labels.get(k)) for k in LABEL_KEYS],
            "found": found,
            "series": events_url(series) if labels else "",
            "store_text": store_text,
            "error": error,
            "measures": [
                (BY_KEY[m].name, v) for m, v in measures.items() if m in BY_KEY and v is not None
            ]
            if measures
            else None,
            "k": found.get("k") or 0,
            "passages": passages,
            "form": form if form is not None and found.get("status") == Status.DONE else None,
            "grades_url": GRADES_URL,
            "rubric": RUBRIC_ORDER,
        },
    )


GRADES_URL = "/ui/grades"
RUBRIC_ORDER = [(g, word, meaning) for g, (word, meaning) in sorted(RUBRIC.items(), reverse=True)]


@dataclass(frozen=True)
class GradeForm:
    """What a page's buttons post besides the grade: who grades (remembered in a cookie) and
    the page to come back to."""

    reviewer: str
    back: str
    asked: str = ""  # a reviewer the page's link named, not the signed-in one: only offered


def people_of(passage: Mapping[str, Any]) -> str:
    """Every person's grade of a passage so far, `reviewer: grade, ...`."""
    return ", ".join(f"{h['reviewer']}: {h['grade']}" for h in passage.get("human_grades") or ())


def grading(passage: Mapping[str, Any], form: GradeForm) -> dict[str, Any]:
    """What a passage's buttons 3..0 need: its id, the rank it repeats (no buttons then), the
    reviewer's grade of it (marked), and every person's grade so far."""
    people = passage.get("human_grades") or ()
    return {
        "id": passage.get("id"),
        "duplicate_of": passage.get("duplicate_of"),
        "mine": next((h["grade"] for h in people if h["reviewer"] == form.reviewer), None),
        "given": people_of(passage),
    }


def message(title: str, text: str) -> Page:
    return Page("message.html", {"title": title, "text": text})


def login(next_url: str, failed: bool) -> Page:
    return Page("login.html", {"title": "Sign in", "next": next_url, "failed": failed})
