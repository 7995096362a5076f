"""The event explorer's index, pure (no I/O): how an event's members and record encode it.

The workers index every judged event per series in the step that records it
(`ragmon.store.event_index`): one set by time and one per sortable measure (`Measure.explore`),
whose members are their own sort keys (`<value>|<time>|<ref>`, all scored 0, read with
ZRANGEBYLEX), and a compact record per event to filter on (`record`); a result page lists
records as rows (`row`). What a search means is `ragmon.core.search`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ragmon.core.measure_table import MEASURES
from ragmon.core.results import digest
from ragmon.core.wire import SEP, Status, series_labels, split_ref

SORTS: tuple[str, ...] = ("time", *(m.key for m in MEASURES if m.explore))
FILTERABLE: tuple[str, ...] = tuple(m.key for m in MEASURES if m.histogram)
OVERVIEW = ("ndcg", "t", "hit", "harm")  # the series overview's measures (hourly sums kept)
RECENT_HOURS, BEFORE_HOURS = 24, 7 * 24  # the overview compares the last 24 h with 7 days before
HOUR_KEEP_S = (RECENT_HOURS + BEFORE_HOURS + 2) * 3600
QUERY_KEEP = 300  # characters of the query text an index record keeps (text storage on)
META_VALUE_KEEP = 128  # metadata values up to this many characters are kept to filter on
_OFFSET = 1000.0  # values in (-1000, 9e6) encode to 13 digits that sort as the numbers do
_SCALE = 1e6
WIDTH = 13  # digits of an encoded value or time
_TOP = (10**WIDTH - 1) / _SCALE - _OFFSET  # the largest encodable value
MAX_MS = 10**WIDTH  # `from`/`to` in epoch milliseconds below this (the year 2286)


# ---- members -------------------------------------------------------------------------


def encode_value(value: float) -> str:
    """A measure value as fixed-width digits that sort as the values do (1e-6 resolution);
    values past the encodable range (-1000, 9e6) take its ends."""
    value = min(max(value, -_OFFSET), _TOP)
    n = round((value + _OFFSET) * _SCALE)
    return f"{min(max(n, 0), 10**WIDTH - 1):0{WIDTH}d}"


def decode_value(text: str) -> float:
    return round(int(text) / _SCALE - _OFFSET, 6)


def encode_time(ts: float) -> str:
    """Unix seconds as fixed-width milliseconds."""
    return f"{min(max(0, round(ts * 1000)), 10**WIDTH - 1):0{WIDTH}d}"


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


def time_member(t: str, ref: str) -> str:
    """The time index member `<time>|<ref>` of the event `ref` (`app|event_id`) at `t`."""
    return f"{t}{SEP}{ref}"


def index_members(rec: Mapping[str, Any], ref: str) -> tuple[str, list[tuple[str, str]]]:
    """The members of an event's `record` (`ref` its `app|event_id`): its time index member
    and per sortable measure (measure, `<value>|<time>|<ref>`); the workers' scripts store and
    remove them as given."""
    at = time_member(rec["t"], ref)
    return at, [(m, f"{v}{SEP}{at}") for m, v in rec["x"].items()]


def measure_member_parts(member: str) -> tuple[str, str, str]:
    """`(value, time, ref)` of a measure's index member `<value>|<time>|<app>|<event id>`."""
    value, time, ref = member.split(SEP, 2)
    return value, time, ref


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


def row(series: str, ref: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    """One event of a result page."""
    ts = datetime.fromtimestamp(decode_time(rec["t"]), UTC)
    out: dict[str, Any] = {
        "event_id": rec.get("id", split_ref(ref)[1]),
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
