"""The event explorer's searches, pure (no I/O): parse a query, encode index members, filter.

The workers index every judged event per series in the step that records it
(`ragmon.store.event_index`): one set by time and one per sortable measure (`Measure.explore`),
whose members are their own sort keys (`<value>|<time>|<ref>`, all scored 0, read with
ZRANGEBYLEX), and a compact record per event to filter on. A page reads each matching series'
set from the cursor on, merges them in order and keeps the events whose record passes every
filter, reading at most `SCAN_BUDGET` records: a search never scans all keys, and a filter that
matches rarely answers a short page with a cursor to continue (`partial`).
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

from ragmon.core.measure_table import BY_KEY, MEASURES
from ragmon.core.results import digest
from ragmon.core.wire import LABEL_KEYS, LABEL_PATTERN, SEP, Status, series_labels, series_values

SORTS: tuple[str, ...] = ("time", *(m.key for m in MEASURES if m.explore))
FILTERABLE: tuple[str, ...] = tuple(m.key for m in MEASURES if m.histogram)
STATUSES = (Status.DONE, Status.FAILED)
GRADE_SOURCES = ("known", "cache", "judge")
OPS = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥", "eq": "="}
OVERVIEW = ("ndcg", "t", "hit", "harm")  # the series overview's measures (hourly sums kept)
RECENT_HOURS, BEFORE_HOURS = 24, 7 * 24  # the overview compares the last 24 h with 7 days before
HOUR_KEEP_S = (RECENT_HOURS + BEFORE_HOURS + 2) * 3600
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SCAN_BUDGET = 5000  # records read per page at most: the cost bound of a search
QUERY_KEEP = 300  # characters of the query text an index record keeps (text storage on)
META_VALUE_KEEP = 128  # metadata values up to this many characters are kept to filter on
META_PREFIX = "meta."  # `meta.<key>=<value>`: events whose metadata holds that value
_OFFSET = 1000.0  # values in (-1000, 9e6) encode to 13 digits that sort as the numbers do
_SCALE = 1e6
_WIDTH = 13
_TOP = (10**_WIDTH - 1) / _SCALE - _OFFSET  # the largest encodable value
MAX_MS = 10**_WIDTH  # `from`/`to` in epoch milliseconds below this (the year 2286)
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


# ---- index members -------------------------------------------------------------------------


def encode_value(value: float) -> str:
    """A measure value as fixed-width digits that sort as the values do (1e-6 resolution);
    values past the encodable range (-1000, 9e6) take its ends."""
    value = min(max(value, -_OFFSET), _TOP)
    n = round((value + _OFFSET) * _SCALE)
    return f"{min(max(n, 0), 10**_WIDTH - 1):0{_WIDTH}d}"


def decode_value(text: str) -> float:
    return round(int(text) / _SCALE - _OFFSET, 6)


def encode_time(ts: float) -> str:
    """Unix seconds as fixed-width milliseconds."""
    return f"{min(max(0, round(ts * 1000)), 10**_WIDTH - 1):0{_WIDTH}d}"


def decode_time(text: str) -> float:
    return int(text) / 1000


def within(member: str, lo: str, hi: str) -> bool:
    """Whether an index member lies inside ZRANGEBYLEX bounds (`-`, `+`, `[x`, `(x`)."""
    if lo != "-" and (member < lo[1:] or (lo[0] == "(" and member == lo[1:])):
        return False
    return hi == "+" or member < hi[1:] or (hi[0] == "[" and member == hi[1:])


def member_ref(member: str, sort: str) -> str:
    """The `app|event_id` at the end of an index member (an event id may hold `|`)."""
    return member.split(SEP, 1 if sort == "time" else 2)[-1]


def meta_text(value: Any) -> str:
    """A metadata value as a filter compares it: JSON's spelling for booleans, else `str`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def record(
    event: Mapping[str, Any],
    result: Mapping[str, Any],
    expires_at: float,
    store_text: bool = True,
) -> dict[str, Any]:
    """What the index keeps per event: time `t` and sortable measures `x` encoded as in the
    members (the workers' script builds members from them), other measures `m`, counts of
    grade sources, the trace id, app and id, `k`, when the event expires (`e`), the start of the
    query (`q`, with text storage on), its metadata values up to `META_VALUE_KEEP` characters
    (`md`) and the judge's identity (`jm`)."""
    measures = result["measures"]
    ts = datetime.fromisoformat(event["timestamp"]).timestamp()
    sortable = {k: encode_value(v) for k in SORTS[1:] if (v := measures.get(k)) is not None}
    others = {
        k: round(v, 6)
        for k in FILTERABLE
        if k not in sortable and (v := measures.get(k)) is not None
    }
    out: dict[str, Any] = {
        "t": encode_time(ts),
        "x": sortable,
        "m": others,
        **digest(event, result),
        "app": event["labels"]["app"],
        "e": int(expires_at),
    }
    if event.get("trace_id"):
        out["tid"] = event["trace_id"]
    query = event.get("query")
    if store_text and isinstance(query, str):
        out["q"] = query[:QUERY_KEEP]
    meta = {
        str(k): text
        for k, v in (event.get("metadata") or {}).items()
        if len(text := meta_text(v)) <= META_VALUE_KEEP
    }
    if meta:
        out["md"] = meta
    if result.get("judge"):
        out["jm"] = result["judge"]
    return out


def words(text: str) -> list[str]:
    """The lower-case words of a free-text query (what `query=` matches on)."""
    return re.findall(r"\w+", text.lower())


def overview_hours(now: float) -> tuple[list[int], list[int]]:
    """The unix hours of the overview's two windows: the last 24 (this hour included) and the
    7 days before them."""
    hour = int(now // 3600)
    recent = list(range(hour - RECENT_HOURS + 1, hour + 1))
    return recent, list(range(recent[0] - BEFORE_HOURS, recent[0]))


def moments(n: float, total: float, squares: float) -> tuple[int, float, float] | None:
    """(n, mean, variance) from a count, a sum and a sum of squares; None without events."""
    if n <= 0:
        return None
    mean = total / n
    var = max(0.0, (squares - n * mean * mean) / (n - 1)) if n > 1 else 0.0
    return int(n), mean, var


def weighted_moments(
    n: float, total: float, squares: float, weight_excess: float = 0.0, weight2_excess: float = 0.0
) -> tuple[int, float, float] | None:
    """(n, mean, variance) of judged events that weigh w = 1 / their inclusion probability,
    from their count n, sum(w y), sum(w y^2) and the weights' excess over 1 (sum(w) = n + wx,
    sum(w^2) = n + vx): Hajek's mean sum(w y) / sum(w), and a variance that makes variance / n
    the variance of that mean, var_w / Kish's effective number (sum w)^2 / sum(w^2), so that
    Welch's test on (n, mean, variance) reads it at the right precision. With every weight 1,
    `moments`."""
    if n <= 0:
        return None
    w, w2 = n + weight_excess, n + weight2_excess
    if w <= 0 or w2 <= 0:
        return None
    mean = total / w
    if n <= 1:
        return int(n), mean, 0.0
    var = max(0.0, squares / w - mean * mean) * n / (n - 1)  # weighted, per event
    effective = w * w / w2
    return int(round(n)), mean, var * n / max(1.0, effective)


def record_measures(rec: Mapping[str, Any]) -> dict[str, float]:
    """Every measure value of a record, in the measure table's order."""
    values = {k: decode_value(v) for k, v in rec.get("x", {}).items()}
    values.update(rec.get("m", {}))
    return {k: values[k] for k in FILTERABLE if k in values}


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
            k not in self.labels or v in self.labels[k].split(SEP)
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
    if status == "failed" and not math.isfinite(_number(member, not_ours)):
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
            f"{name}: epoch milliseconds out of range (at most {_WIDTH} digits), got {shown}"
        )
        if len(text) > _WIDTH + 1:  # never parse a 400-digit number
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
    for v in value.split(SEP):
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
    if status == "failed" and (bounds or sort != "time" or source or query or meta):
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


def row(series: str, ref: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    """One event of a result page."""
    ts = datetime.fromtimestamp(decode_time(rec["t"]), UTC)
    out: dict[str, Any] = {
        "event_id": rec.get("id", ref.split(SEP, 1)[-1]),
        "status": Status.DONE,
        "labels": series_labels(series),
        "timestamp": ts.isoformat().replace("+00:00", "Z"),
        "k": rec.get("k"),
        "measures": record_measures(rec),
        "grade_sources": rec.get("src", {}),
    }
    if rec.get("tid"):
        out["trace_id"] = rec["tid"]
    if isinstance(rec.get("q"), str):
        out["query"] = rec["q"]
    if rec.get("md"):
        out["metadata"] = rec["md"]
    if rec.get("jm"):
        out["judge"] = rec["jm"]
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
