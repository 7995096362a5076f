"""The explorer's HTML pages, pure: data in, a page out. Server-rendered, no script, no build.

Every link carries its filters in the query string, so a page's URL can be pasted into a
ticket. Values are escaped where they are written (`_e`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
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


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{border-bottom:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;font-variant:
tabular-nums}.worse{color:#b00}.better{color:#070}.note{color:#666}form{margin:.5em 0}
tr.floor{background:#fdecec}form div{margin:.3em 0}.row{display:flex;gap:3em;align-items:flex-start}
pre{white-space:pre-wrap;max-width:60em;margin:0}nav a{margin-right:1em}
td.grading button{margin:1px}button.chosen{font-weight:bold;outline:2px solid #070}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)} · ragmon</title><style>{_CSS}</style></head><body>"
        '<nav><a href="/ui">Series</a><a href="/ui/events">Events</a>'
        '<a href="/ui/review">Review</a></nav>'
        f"<h1>{_e(title)}</h1>{body}</body></html>"
    )


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


NOT_MADE = (
    "<span class=pending title=\"the workers make this series' summary of both windows within "
    'a minute of starting, and keep it each hour">…</span>'
)
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


def overview(rows: Sequence[SeriesRow], retention_days: float, rule: LevelRule) -> str:
    head = "".join(f"<th>{k}</th>" for k in LABEL_KEYS) + "<th>events held</th>"
    head += "".join(f"<th>{_e(BY_KEY[m].name)} last 24 h / 7 days before</th>" for m in OVERVIEW)
    head += "<th>flag</th>"
    body = []
    flags = {r.series: at_floor(r) or poor_level(r, rule) for r in rows}
    for r in sorted(rows, key=lambda r: not flags[r.series]):  # flagged series first
        labels = series_labels(r.series)
        cells = "".join(f"<td>{_e(v)}</td>" for v in labels.values())
        worst = events_url({**labels, "sort": WORST_SORT})  # the series leads to its worst
        newest = events_url(labels)
        cells += (
            f'<td class=n data-events="{r.events}"><a class=worst href="{_e(worst)}">{r.events}'
            f'</a> <a class=newest href="{_e(newest)}" title="newest first">↓time</a></td>'
        )
        for m in OVERVIEW:
            shown = _change(m, r.recent.get(m), r.before.get(m)) if r.made else NOT_MADE
            cells += f"<td class=n>{shown}</td>"
        flag = flags[r.series]
        cells += f"<td class=worse>{_e(flag)}</td>" if flag else "<td></td>"
        body.append(f"<tr class=floor>{cells}</tr>" if flag else f"<tr>{cells}</tr>")
    note = (
        f"<p class=note>Judged events held for the explorer (the last {retention_days:g} days, "
        "RAGMON_RESULT_TTL_DAYS). Means over the last 24 hours (by the hour: this hour and the "
        "23 before) / the 7 days before them (hover for counts and p-value; with planned "
        "sampling each event weighs 1 / its inclusion probability); coloured when "
        "Welch's test finds a change (p < 0.01): red worse, green better. A series whose "
        f"Hit@K or nDCG@K mean is at 0 over at least {FLOOR_MIN_EVENTS} events is flagged and "
        "listed first: nothing relevant reaches its prompts; so is one whose level is poor "
        f"from its first day (over at least {rule.min_events} events, Hit@K below "
        f"{BY_KEY['hit'].line:g} or Harm@K above {BY_KEY['harm'].line:g} by more than "
        f"{rule.z:g} standard errors, the level alerts' lines). The events count links to the "
        "series' events worst first (by nDCG@K); ↓time lists them newest first.</p>"
    )
    if not rows:
        return page("Series", note + "<p>No judged events yet.</p>")
    table = f"<table id=series><tr>{head}</tr>{''.join(body)}</table>"
    return page("Series", note + table)


def _change(measure: str, recent: Cell | None, before: Cell | None) -> str:
    """The last 24 h's mean / the 7 days' before, coloured when Welch's test finds a change
    (p < 0.01)."""
    text = f"{_num(recent[1] if recent else None)} / {_num(before[1] if before else None)}"
    if recent is None or before is None:
        return text
    title = f"{recent[0]} events in the last 24 h, {before[0]} in the 7 days before"
    if min(recent[0], before[0]) < 2:
        return f'<span title="{title}">{text}</span>'
    change = binned_change({"all": before}, {"all": recent})
    title += f"; change {change.total:+.3f}, p = {change.pvalue:.2g}"
    if change.pvalue >= CHANGE_P:
        return f'<span title="{title}">{text}</span>'
    better = (change.total > 0) == (BY_KEY[measure].better != "lower")
    return f'<span class={"better" if better else "worse"} title="{title}">{text}</span>'


def events(
    search: Search, found: Sequence[Mapping[str, Any]], cursor: str | None, partial: bool
) -> str:
    form = _filter_form(search)
    cols = "".join(f"<th>{_e(BY_KEY[m].name)}</th>" for m in LISTED)
    head = (
        f"<tr><th>time (UTC)</th><th>event</th><th>query</th><th>series</th>{cols}"
        "<th>grades from</th></tr>"
    )
    rows = []
    for ev in found:
        labels = ev["labels"]
        series = "/".join(labels[k] for k in LABEL_KEYS[1:])
        link = f'<a href="{_e(event_url(labels["app"], ev["event_id"]))}">{_e(ev["event_id"])}</a>'
        measures = ev.get("measures") or {}
        cells = "".join(f"<td class=n>{_num(measures.get(m))}</td>" for m in LISTED)
        sources = ", ".join(
            f"{source_words(s, ev.get('judge'))} {n}"
            for s, n in (ev.get("grade_sources") or {}).items()
        )
        when = _e((ev.get("timestamp") or "").replace("T", " ")[:19])
        query = ev.get("query")
        shown = "–" if not isinstance(query, str) else (
            query if len(query) <= QUERY_SHOWN else query[:QUERY_SHOWN] + "…"
        )  # fmt: skip
        rows.append(
            f"<tr class=event><td>{when}</td><td>{link}</td><td class=query>{_e(shown)}</td>"
            f"<td>{_e(labels['app'])}: {_e(series)}</td>{cells}<td>{_e(sources)}</td></tr>"
        )
    more = ""
    if cursor:
        why = " (few events match: this page stopped after reading its share)" if partial else ""
        more = (
            f'<p><a id=next href="{_e(events_url(search.params(cursor)))}">next page</a>{why}</p>'
        )
    table = f"<table id=events>{head}{''.join(rows)}</table>" if rows else "<p>No events match.</p>"
    title = f"Events: {describe_search(search)}"
    return page(title, form + table + more)


def _filter_form(search: Search) -> str:
    """The filters as a GET form: labels, trace and time, then thresholds and the order."""
    current = search.params()

    def box(name: str, label: str, size: int = 12) -> str:
        value = _e(current.get(name, ""))
        return f'<label>{_e(label)} <input name="{name}" value="{value}" size={size}></label> '

    who = "".join(box(k, k) for k in (*LABEL_KEYS, "trace_id", "grade_source"))
    meta = ",".join(f"{k}={v}" for k, v in search.meta.items())
    what = (
        box("query", "query has", 30)
        + f'<label>metadata <input name="meta" value="{_e(meta)}" size=24 '
        'placeholder="key=value,key=value"></label> '
    )
    when = box("from", "from", 22) + box("to", "to", 22)
    limits = "".join(
        box(f"{m}_{op}", f"{BY_KEY[m].name} {word}", 5)
        for m in LISTED
        for op, word in (("lt", "<"), ("gt", ">"))
    )
    options = "".join(
        f'<option value="{s}"{" selected" if s == search.sort else ""}>'
        f"{_e('time' if s == 'time' else BY_KEY[s].name)}</option>"
        for s in SORTS
    )
    order = f'<label>sort by <select name="sort">{options}</select></label> '
    shown = {*LABEL_KEYS, "trace_id", "grade_source", "from", "to", "sort", "query"}
    shown |= {META_PREFIX + k for k in search.meta}
    shown |= {f"{m}_{op}" for m in LISTED for op in ("lt", "gt")}
    hidden = "".join(
        f'<input type=hidden name="{_e(k)}" value="{_e(v)}">'
        for k, v in current.items()
        if k not in shown
    )
    rows = (
        f"<div>{who}</div><div>{what}</div>"
        f"<div>{when}<span class=note>(ISO 8601 or epoch ms)</span></div>"
        f"<div>{limits}</div><div>{order}{hidden}<button>Search</button></div>"
    )
    return f"<form id=filters method=get action=/ui/events>{rows}</form>"


def event(found: Mapping[str, Any], store_text: bool, form: GradeForm | None = None) -> str:
    """One event: query, measures, each passage with its grade (and who gave it), people's
    grades with buttons to add one (`form`; a judged event only), and the judge's error."""
    labels = found.get("labels") or {}
    parts = [
        "<div class=row><div class=side><table id=facts>",
        *(f"<tr><th>{_e(k)}</th><td>{_e(labels.get(k))}</td></tr>" for k in LABEL_KEYS),
        f"<tr><th>status</th><td id=status>{_e(found.get('status'))}</td></tr>",
        f"<tr><th>time</th><td>{_e(found.get('timestamp'))}</td></tr>",
        f"<tr><th>K</th><td>{_e(found.get('k'))}</td></tr>",
    ]
    if found.get("trace_id"):
        parts.append(f"<tr><th>trace</th><td>{_e(found['trace_id'])}</td></tr>")
    if "query" in found:
        parts.append(f"<tr><th>query</th><td id=query>{_e(found['query'])}</td></tr>")
    elif "query_sha" in found:
        parts.append(f"<tr><th>query hash</th><td id=query>{_e(found['query_sha'])}</td></tr>")
    parts.append("</table>")
    if labels:
        link = events_url({k: labels[k] for k in LABEL_KEYS if k in labels})
        parts.append(f'<p><a href="{_e(link)}">events of this series</a></p>')
    if not store_text:
        parts.append(
            "<p class=note id=no-text>Text storage is off (RAGMON_STORE_TEXT=false): ragmon "
            "dropped the query and passage texts once judged and keeps their hashes.</p>"
        )
    if found.get("error"):
        what = (
            "Failed"
            if found.get("status") == Status.FAILED
            else "Last judge error (waits for a retry)"
        )
        parts.append(f"<p class=worse id=error>{what}: {_e(found['error'])}</p>")
    parts.append("</div>")  # the facts' column
    measures = found.get("measures") or {}
    if measures:
        cells = "".join(
            f"<tr><th>{_e(BY_KEY[m].name)}</th><td class=n>{_num(v)}</td></tr>"
            for m, v in measures.items()
            if m in BY_KEY and v is not None
        )
        parts.append(f"<div class=side><h2>Measures</h2><table id=measures>{cells}</table></div>")
    parts.append("</div>")  # the facts and the measures side by side
    k = found.get("k") or 0
    grading = form is not None and found.get("status") == Status.DONE
    rows = []
    for p in found.get("passages") or []:
        dup = f"repeats rank {p['duplicate_of']}" if p.get("duplicate_of") else ""
        text = p.get("text") if "text" in p else p.get("text_sha")
        marker = " class=outside" if p["rank"] > k else ""
        source = source_words(p.get("grade_source"), p.get("graded_by"))
        by = f" ({p['graded_by']})" if p.get("graded_by") not in (None, "known") else ""
        people = ", ".join(f"{h['reviewer']}: {h['grade']}" for h in p.get("human_grades") or ())
        cell = grade_cell(p, form) if grading and form is not None else f"<td>{_e(people)}</td>"
        rows.append(
            f"<tr{marker}><td class=n>{p['rank']}</td><td>{_e(p.get('id'))}</td>"
            f"<td class=n>{_num(p.get('score'))}</td><td class=n>{_e(p.get('grade'))}</td>"
            f"<td>{_e(source)}{_e(by)}</td><td>{_e(dup)}</td><td><pre>{_e(text)}</pre></td>"
            f"{cell}</tr>"
        )
    column = "text" if store_text else "text hash"
    table = (
        f"<table id=passages><tr><th>rank</th><th>id</th><th>score</th><th>grade</th>"
        f"<th>grade from</th><th>duplicate</th><th>{column}</th><th>people's grades</th></tr>"
        f"{''.join(rows)}</table>"
    )
    if grading and form is not None:
        table = form_start(found, form) + table + "</form>"
    parts.append(f"<h2>Passages (top {k} went into the prompt)</h2>{table}")
    return page(f"Event {found.get('event_id')}", "".join(parts))


GRADES_URL = "/ui/grades"


@dataclass(frozen=True)
class GradeForm:
    """What a page's buttons post besides the grade: who grades (remembered in a cookie) and
    the page to come back to."""

    reviewer: str
    back: str
    asked: str = ""  # a reviewer the page's link named, not the signed-in one: only offered


def form_start(found: Mapping[str, Any], form: GradeForm) -> str:
    """The opening of the form around a passages table: the event, the way back, the
    reviewer's name."""
    labels = found.get("labels") or {}
    return (
        f'<form id=grading method=post action="{GRADES_URL}">'
        f'<input type=hidden name=app value="{_e(labels.get("app"))}">'
        f'<input type=hidden name=event_id value="{_e(found.get("event_id"))}">'
        f'<input type=hidden name=next value="{_e(form.back)}">'
        f'<p><label>Reviewer <input id=reviewer name=reviewer value="{_e(form.reviewer)}" '
        "required maxlength=64 size=24></label> <span class=note>your name or e-mail "
        "(letters, digits, _.@:+-); one grade per passage and reviewer: another click "
        "replaces yours</span></p>"
        + (
            f"<p id=reviewer-asked class=warn>This link names the reviewer "
            f"<b>{_e(form.asked)}</b>; your grades are filed under the name in the field "
            f"above{f' ({_e(form.reviewer)})' if form.reviewer else ''}: type "
            f"{_e(form.asked)} there to grade as them.</p>"
            if form.asked
            else ""
        )
    )


def grade_cell(passage: Mapping[str, Any], form: GradeForm) -> str:
    """A passage's buttons 3..0 with the rubric's words (the reviewer's grade marked), and
    every person's grade of it so far."""
    if passage.get("duplicate_of"):
        return f"<td class=grading>repeats rank {passage['duplicate_of']}</td>"
    people = passage.get("human_grades") or ()
    mine = next((h["grade"] for h in people if h["reviewer"] == form.reviewer), None)
    buttons = "".join(
        f'<button name=grade value="{g}:{_e(passage.get("id"))}" title="{_e(meaning)}"'
        f"{' class=chosen' if g == mine else ''}>{g} {_e(word)}</button> "
        for g, (word, meaning) in sorted(RUBRIC.items(), reverse=True)
    )
    given = ", ".join(f"{h['reviewer']}: {h['grade']}" for h in people)
    shown = f"<div class=people>people: {_e(given)}</div>" if given else ""
    return f"<td class=grading>{buttons}{shown}</td>"


def message(title: str, text: str, status_hint: str = "") -> str:
    return page(title, f"<p id=message>{_e(text)}</p>{status_hint}")


def login(next_url: str, failed: bool) -> str:
    why = "<p class=worse>That key was refused.</p>" if failed else ""
    form = (
        f'<form method=post action=/ui/login><input type=hidden name=next value="{_e(next_url)}">'
        '<label>API key <input type=password name=key autofocus style="width:24em"></label> '
        "<button>Sign in</button></form>"
    )
    note = (
        "<p class=note>A session, not the key, is kept in a cookie for this site "
        "(HttpOnly, 12 hours).</p>"
    )
    return page("Sign in", why + form + note)
