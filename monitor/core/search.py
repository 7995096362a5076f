"""The event explorer's searches, pure (no I/O): parse a query, bound it, describe it.

A page reads each matching series' index set (`ragmon.core.index_members`) from the cursor on,
merges them in order and keeps the events whose record passes every filter, reading at most
`SCAN_BUDGET` records: a search never scans all keys, and a filter that matches rarely answers
a short page with a cursor to continue (`partial`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ragmon.core.index_members import (
    FILTERABLE,
    MAX_MS,
    SORTS,
    WIDTH,
    decode_time,
    encode_time,
    encode_value,
    record_measures,
    words,
)
from ragmon.core.measure_table import BY_KEY
from ragmon.core.wire import LABEL_KEYS, LABEL_PATTERN, Status, alternatives, series_values

STATUSES = (Status.DONE, Status.FAILED)
GRADE_SOURCES = ("known", "cache", "judge")
OPS = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥", "eq": "="}
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SCAN_BUDGET = 5000  # records read per page at most: the cost bound of a search
META_PREFIX = "meta."  # `meta.<key>=<value>`: events whose metadata holds that value
MAX_CURSOR_CHARS = 1000  # a cursor this API gives is under 500 characters
ANY = ".*"  # a label filter that matches every value (Grafana's All)
_LABEL = re.compile(LABEL_PATTERN)


SEARCH_HELP = f"""Judged events, newest first (or by a measure, worst first), a page at a time.

Parameters, all optional: `app`, `index`, `retriever`, `segment` (a key bound to an app
searches that app only); `from`, `to` (epoch milliseconds as Grafana's `${{__from}}`, or
ISO 8601; `to` excluded); `<measure>_lt`, `_le`, `_gt`, `_ge` or `<measure>=<value>`
(e.g. `ndcg_lt=0.3`, `hit=0`) for any of {", ".join(FILTERABLE)}; `grade_source`
({", ".join(GRADE_SOURCES)}: events with at least one passage graded so); `trace_id`;
`query` (free text: events whose query holds every word, case-insensitive; text storage on);
`meta.<key>=<value>` (events whose metadata holds that value; `meta=k=v,k2=v2` for several);
`status` (`done`, or `failed`: by failure time, newest first, without measures);
`sort` (`time` or one of {", ".join(SORTS[1:])}) and `order` (`asc`, `desc`);
`limit` (1-{MAX_LIMIT}, default {DEFAULT_LIMIT}); `cursor` (`next_cursor` of the previous
page, same other parameters). A page reads at most {SCAN_BUDGET:,} index entries: when few
events match it may come back short with `partial` true and a cursor to go on."""


class SearchError(ValueError):
    """A search parameter that cannot be used; the message names it (one line)."""


# ---- the query ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """One measure threshold: `ndcg_lt=0.3` is Bound("ndcg", "lt", 0.3); `hit=0` is "eq"."""

    measure: str
    op: str
    value: float

    def holds(self, value: float) -> bool:
        return {
            "lt": value < self.value,
            "le": value <= self.value,
            "gt": value > self.value,
            "ge": value >= self.value,
            "eq": math.isclose(value, self.value, abs_tol=1e-9),
        }[self.op]

    @property
    def param(self) -> str:
        return self.measure if self.op == "eq" else f"{self.measure}_{self.op}"


@dataclass(frozen=True)
class Search:
    """A validated search. `since`/`until` are unix seconds (until excluded); `after` is the
    index member the previous page ended on."""

    labels: dict[str, str] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None
    status: str = Status.DONE
    bounds: tuple[Bound, ...] = ()
    grade_source: str | None = None
    trace_id: str | None = None
    sort: str = "time"
    descending: bool = True
    limit: int = DEFAULT_LIMIT
    after: str | None = None
    query: str | None = None  # free text: every word must occur in the event's query
    meta: dict[str, str] = field(default_factory=dict)  # metadata key -> value

    def with_app(self, app: str) -> Search:
        return Search(**{**self.__dict__, "labels": {**self.labels, "app": app}})

    def params(self, cursor: str | None = None) -> dict[str, str]:
        """The query parameters that give this search (links carry them), with `cursor`."""
        out = dict(self.labels)
        if self.since is not None:
            out["from"] = str(round(self.since * 1000))
        if self.until is not None:
            out["to"] = str(round(self.until * 1000))
        if self.status != Status.DONE:
            out["status"] = self.status
        for b in self.bounds:
            out[b.param] = f"{b.value:g}"
        if self.grade_source:
            out["grade_source"] = self.grade_source
        if self.trace_id:
            out["trace_id"] = self.trace_id
        if self.query:
            out["query"] = self.query
        for k, v in self.meta.items():
            out[META_PREFIX + k] = v
        if self.sort != "time":
            out["sort"] = self.sort
        if self.descending != default_descending(self.sort):
            out["order"] = "desc" if self.descending else "asc"
        if self.limit != DEFAULT_LIMIT:
            out["limit"] = str(self.limit)
        if cursor:
            out["cursor"] = cursor
        return out

    def series_matches(self, series: str) -> bool:
        values = series_values(series)
        return all(
            k not in self.labels or v in alternatives(self.labels[k])
            for k, v in zip(LABEL_KEYS, values, strict=True)
        )

    def record_matches(self, rec: Mapping[str, Any], now: float) -> bool:
        """The record passes every filter (and its event has not expired)."""
        if rec.get("e", math.inf) < now:
            return False
        ts = decode_time(rec["t"])
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        ):
            return False
        if self.grade_source and not rec.get("src", {}).get(self.grade_source):
            return False
        if self.trace_id and rec.get("tid") != self.trace_id:
            return False
        if self.query:
            held = rec.get("q")
            if not isinstance(held, str):
                return False
            text = " ".join(words(held))
            if not all(w in text for w in words(self.query)):
                return False
        if self.meta:
            held_meta = rec.get("md") or {}
            if any(held_meta.get(k) != v for k, v in self.meta.items()):
                return False
        if self.bounds:
            values = record_measures(rec)
            for b in self.bounds:
                if b.measure not in values or not b.holds(values[b.measure]):
                    return False
        return True

    def measure_range(self, measure: str) -> tuple[str, str]:
        """ZRANGEBYLEX bounds of a measure's index holding every value its thresholds allow
        (inclusive: the records are checked exactly)."""
        lo, hi = "-", "+"
        for b in self.bounds:
            if b.measure != measure:
                continue
            if b.op in ("gt", "ge", "eq"):
                lo = "[" + encode_value(b.value)
            if b.op in ("lt", "le", "eq"):
                hi = "[" + encode_value(b.value) + "}"  # `}` sorts after `|`: value included
        return lo, hi

    def lex_range(self) -> tuple[str, str]:
        """ZRANGEBYLEX bounds `(min, max)` of the driving index: a superset of the matches
        (every record is still checked), continuing after the cursor."""
        lo, hi = "-", "+"
        if self.sort == "time":
            if self.since is not None:
                lo = "[" + encode_time(self.since)
            if self.until is not None:
                hi = "(" + encode_time(self.until)
        else:
            lo, hi = self.measure_range(self.sort)
        if self.after is not None:
            if self.descending:
                hi = "(" + self.after
            else:
                lo = "(" + self.after
        return lo, hi


def default_descending(sort: str) -> bool:
    """Newest first by time; worst first by a measure."""
    return True if sort == "time" else BY_KEY[sort].better == "lower"


def encode_cursor(search: Search, member: str) -> str:
    raw = json.dumps([search.sort, search.descending, member], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(text: str, sort: str, descending: bool, status: str) -> str:
    """The index member a cursor holds; a cursor this API did not give (too long, not base64
    JSON of three items, nested, a failed-events cursor that is not a number) is refused."""
    not_ours = SearchError("cursor: not a cursor this API gave")
    if len(text) > MAX_CURSOR_CHARS:
        raise not_ours
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        c_sort, c_desc, member = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, RecursionError):
        raise not_ours from None
    if c_sort != sort or c_desc != descending or not isinstance(member, str):
        raise SearchError("cursor: from a search with another order; start without cursor")
    if status == Status.FAILED and not math.isfinite(_number(member, not_ours)):
        raise not_ours
    return member


def _number(text: str, error: SearchError) -> float:
    try:
        return float(text)
    except ValueError:
        raise error from None


def _when(name: str, text: str) -> float:
    """Unix seconds from epoch milliseconds (Grafana's `${__from}`) or ISO 8601."""
    if text.lstrip("-").isdigit():
        shown = text[:20] + ("..." if len(text) > 20 else "")
        out_of_range = SearchError(
            f"{name}: epoch milliseconds out of range (at most {WIDTH} digits), got {shown}"
        )
        if len(text) > WIDTH + 1:  # never parse a 400-digit number
            raise out_of_range
        try:
            ms = int(text)
        except ValueError:  # digits int() does not read (superscripts)
            raise SearchError(f"{name}: expected epoch milliseconds or ISO 8601") from None
        if abs(ms) >= MAX_MS:
            raise out_of_range
        return ms / 1000
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SearchError(
            f"{name}: expected epoch milliseconds or ISO 8601, got {text[:40]!r}"
        ) from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _label(name: str, value: str) -> str:
    """A label filter: one value, `a|b` for any of several (Grafana's `${var:pipe}`), or `.*`
    for any (Grafana's All)."""
    if value == ANY:
        return value
    for v in alternatives(value):
        if not _LABEL.match(v):
            raise SearchError(f"{name}: {v!r} is not a label value ({LABEL_PATTERN})")
    return value


def parse_search(params: Mapping[str, str]) -> Search:
    """A `Search` from query parameters (empty values count as absent); `SearchError` names
    the first parameter that is wrong."""
    p = {k: v.strip() for k, v in params.items() if v is not None and v.strip() != ""}
    labels = {k: _label(k, p.pop(k)) for k in LABEL_KEYS if k in p}
    labels = {k: v for k, v in labels.items() if v != ANY}
    since = _when("from", p.pop("from")) if "from" in p else None
    until = _when("to", p.pop("to")) if "to" in p else None
    status = p.pop("status", Status.DONE)
    if status not in STATUSES:
        raise SearchError(f"status: one of {', '.join(STATUSES)}, got {status!r}")
    source = p.pop("grade_source", None)
    if source is not None and source not in GRADE_SOURCES:
        raise SearchError(f"grade_source: one of {', '.join(GRADE_SOURCES)}, got {source!r}")
    trace_id = p.pop("trace_id", None)
    sort = p.pop("sort", "time")
    if sort not in SORTS:
        raise SearchError(f"sort: one of {', '.join(SORTS)}, got {sort!r}")
    order = p.pop("order", None)
    if order not in (None, "asc", "desc"):
        raise SearchError(f"order: asc or desc, got {order!r}")
    descending = default_descending(sort) if order is None else order == "desc"
    try:
        limit = int(p.pop("limit", DEFAULT_LIMIT))
    except ValueError:
        raise SearchError("limit: expected a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise SearchError(f"limit: between 1 and {MAX_LIMIT}")
    cursor = p.pop("cursor", None)
    after = _decode_cursor(cursor, sort, descending, status) if cursor else None
    query = p.pop("query", None)
    if query is not None and not words(query):
        raise SearchError("query: no word to search for")
    meta = _meta(p)
    bounds = []
    for name, text in p.items():
        measure, _, op = name.rpartition("_")
        if op not in OPS or measure not in FILTERABLE:
            measure, op = name, "eq"
        if measure not in FILTERABLE:
            raise SearchError(f"{name}: unknown parameter")
        value = _number(text, SearchError(f"{name}: expected a number, got {text[:40]!r}"))
        if not math.isfinite(value):  # nan, inf, 1e400
            raise SearchError(f"{name}: expected a finite number, got {text[:40]!r}")
        bounds.append(Bound(measure, op, value))
    if status == Status.FAILED and (bounds or sort != "time" or source or query or meta):
        raise SearchError(
            "status=failed: failed events have no grades or measures to filter (nor an indexed "
            "query or metadata)"
        )
    return Search(
        labels, since, until, status, tuple(bounds), source, trace_id, sort, descending, limit,
        after, query, meta,
    )  # fmt: skip


def _meta(p: dict[str, str]) -> dict[str, str]:
    """Metadata filters, taken out of `p`: `meta.<key>=<value>`, or `meta=<key>=<value>` with
    several pairs separated by `,` (the page's form sends that)."""
    out: dict[str, str] = {}
    for name in [n for n in p if n.startswith(META_PREFIX)]:
        key = name[len(META_PREFIX) :]
        if not key:
            raise SearchError(f"{name}: name a metadata key, as meta.<key>=<value>")
        out[key] = p.pop(name)
    if "meta" in p:
        for pair in p.pop("meta").split(","):
            key, eq, value = pair.strip().partition("=")
            if not eq or not key.strip():
                raise SearchError(f"meta: expected key=value, got {pair.strip()!r}")
            out[key.strip()] = value.strip()
    return out


def describe_search(search: Search) -> str:
    """The filters in words, for the page heading."""
    parts = [f"{k}={v}" for k, v in search.labels.items()]
    parts += [f"{BY_KEY[b.measure].name} {OPS[b.op]} {b.value:g}" for b in search.bounds]
    if search.grade_source:
        parts.append(f"grade source {search.grade_source}")
    if search.trace_id:
        parts.append(f"trace {search.trace_id}")
    if search.query:
        parts.append(f"query has “{search.query}”")
    parts += [f"metadata {k}={v}" for k, v in search.meta.items()]
    if search.status != Status.DONE:
        parts.append(f"status {search.status}")
    return ", ".join(parts) or "all events"
