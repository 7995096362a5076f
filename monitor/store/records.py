"""What the store keeps and hands out, as plain values (no I/O): the item to ingest, a
histogram read back, the per-day record of an event, the hashes kept in place of text, and the
small conversions of values read from Redis."""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from ragmon.core.measures import HISTOGRAM_MEASURES
from ragmon.core.results import digest
from ragmon.core.signals import SIGNALS, extract
from ragmon.core.wire import Status, event_ref, field_parts
from ragmon.store.fields import Part
from ragmon.store.keys import utc_day

if TYPE_CHECKING:
    from ragmon.settings import Settings

QUERY_KEY_CHARS = 16  # hex digits of the query hash in a per-day record: enough to tell apart


def result_ttl_s(settings: Settings) -> int:
    """How long an event and its result are kept (RAGMON_RESULT_TTL_DAYS), in whole seconds."""
    return max(1, int(settings.result_ttl_days * 86400))


class StoredPassage(TypedDict):
    """One ranked passage of a stored event (`text` replaced by `text_sha` once stripped)."""

    id: str
    text: str
    score: NotRequired[float | None]
    grade: NotRequired[int | None]


class StoredEvent(TypedDict):
    """An accepted event as the store hands it to a worker (`Store.load_events`): the wire
    payload as stored (`RetrievalEvent`'s JSON, `timestamp` always set), with its status,
    receipt time and claims so far."""

    event_id: str
    query: str
    k: int
    passages: list[StoredPassage]
    labels: dict[str, str]
    timestamp: str
    relevant_total: NotRequired[int | None]
    trace_id: NotRequired[str | None]
    metadata: NotRequired[dict[str, str | int | float | bool] | None]
    inclusion_probability: NotRequired[float]
    _status: Status
    _received_at: float
    _attempts: int


class Result(TypedDict):
    """What a worker records of a judged event (`Store.finish`; kept in the event's hash and
    read back by GET, the explorer and the per-day record)."""

    event_id: str
    status: Status
    k: int
    labels: dict[str, str]
    grades: list[int | None]
    grade_source: list[str | None]
    duplicate_of: list[int | None]
    measures: dict[str, float | None]
    judge: str
    error: str | None
    unjudged: NotRequired[dict[str, int]]
    utility: NotRequired[list[int | None]]
    p_no_response: NotRequired[list[float | None]]
    udcg_missing: NotRequired[str | None]


class FailedResult(TypedDict):
    """What a failed event keeps as its result (GET adds its `event_id`, from its key)."""

    status: Status
    error: str


def failed_result(error: str) -> str:
    """The stored result of a failed event, the one encoding FAIL, RETRY and CLAIM store (they
    take it as a scalar): results stored before it also name the event (`event_id`)."""
    result: FailedResult = {"status": Status.FAILED, "error": error}
    return json.dumps(result)


@dataclass(frozen=True)
class IngestItem:
    """One validated event ready to store: payload is the normalized event JSON; `app` is its
    `labels.app`, the scope of its id; `series` its `app|index|retriever|segment`;
    `probability` the one with which it was chosen for judging (its inclusion probability);
    `day` the UTC day of its timestamp and `signals` its `signal_record` (empty: none kept)."""

    event_id: str
    payload: str
    sampled_out: bool = False
    app: str = "default"
    series: str = ""
    probability: float = 1.0
    day: str = ""
    signals: str = ""

    @property
    def ref(self) -> str:
        return event_ref(self.app, self.event_id)

    @property
    def status(self) -> str:
        """The status it is stored with: judged later (queued) or never (sampled_out)."""
        return (Status.SAMPLED_OUT if self.sampled_out else Status.QUEUED).value


@dataclass(frozen=True)
class Histogram:
    """Non-cumulative bucket counts (last = +Inf), sum and count of one labelled series, and
    the sum of squared values where recorded (quality measures; None for older data). With
    RAGMON_SAMPLING=planned the quality histograms' counts are weighted (1 / the inclusion
    probability of each event), so they may not be whole numbers: typed `int` where every
    reader adds and divides them alike."""

    buckets: list[int]
    sum: float
    count: int
    sum_squares: float | None = None


def histograms_of(
    raw: Mapping[bytes, bytes], bounds: Mapping[str, Sequence[float]]
) -> dict[str, dict[tuple[str, ...], Histogram]]:
    """The histograms of a hash's fields `name|labels...|<part>` (`fields.Part`), by name, then
    label values; `bounds` gives each name's buckets (other names are left out).

    Read in steps (`Store.read_hash`), a histogram's fields may straddle an observation: its
    count is then the larger of its `count` field and its buckets' total, so the `+Inf` bucket,
    which is the count, is never below a finite bucket and never falls from one read to the
    next (`sum` may be one observation apart until the next read)."""
    acc: dict[str, dict[tuple[str, ...], dict[str, Any]]] = defaultdict(dict)
    # plain strings: an enum member's lookup, on each of /metrics' many fields, adds up
    total, count, sumsq, bucket = (
        Part.SUM.value,
        Part.COUNT.value,
        Part.SUMSQ.value,
        Part.BUCKET.value,
    )
    for k, v in raw.items():
        *head, part = field_parts(text_of(k))
        name, labels = head[0], tuple(head[1:])
        if name not in bounds:
            continue
        h = acc[name].setdefault(
            labels, {"b": [0] * (len(bounds[name]) + 1), "s": 0.0, "c": 0, "q": None}
        )
        if part == total:
            h["s"] = float(v)
        elif part == count:
            h["c"] = number_of(v)
        elif part == sumsq:
            h["q"] = float(v)
        else:
            idx = int(part.removeprefix(bucket))
            if idx < len(h["b"]):
                h["b"][idx] = number_of(v)
    return {
        name: {
            lbl: Histogram(h["b"], h["s"], max(h["c"], sum(h["b"])), h["q"])
            for lbl, h in series.items()
        }
        for name, series in acc.items()
    }


_SIGNAL_BOUNDS = tuple(s.buckets for s in SIGNALS)


def signal_record(query: str, k: int, ids: Sequence[str], scores: Sequence[float | None]) -> str:
    """One event's signals (`ragmon.core.signals.extract`) as INGEST reads them: `<short>
    <repeated> <query hash>`, then per signal, in `SIGNALS` order, `<bucket>:<value>` (the
    value to 6 significant digits, the bucket from the exact one) or `-` (not observed). A
    string, so that it costs the API one argument per event; built in one join, and `.6g` is
    half the CPU of `repr`: the API does this for every event (docs/performance.md)."""
    sig = extract(query, k, ids, scores)
    slots = [
        f"{bucket_index(bounds, v)}:{v:.6g}" if v is not None else "-"
        for bounds, v in zip(_SIGNAL_BOUNDS, sig.values.values(), strict=True)
    ]
    return f"{sig.short:d} {sig.repeated} {query_hash(query)[:QUERY_KEY_CHARS]} " + " ".join(slots)


def bucket_index(bounds: Sequence[float], value: float) -> int:
    """Index of the first bucket whose upper bound is >= value (len(bounds) for +Inf)."""
    return bisect_left(bounds, value - 1e-12)


def event_day(event: Mapping[str, Any]) -> str:
    """The UTC day of an event's `timestamp`: per-day aggregates are keyed by it."""
    return utc_day(datetime.fromisoformat(event["timestamp"]).timestamp())


def ref_of(event: Mapping[str, Any]) -> str:
    """The `event_ref` of a stored event payload."""
    return event_ref(event["labels"]["app"], event["event_id"])


def day_record(
    event: StoredEvent,
    result: Result,
    grades: Sequence[int | None],
    judge: str | None,
    inclusion: float = 1.0,
) -> dict[str, Any]:
    """The compact per-event record kept per day for the drift report and the corrected
    estimates: measures, labels, the top K and its grades (the grades past K in `more`: an
    nDCG's ideal ranking reads them), a short hash and the word count of the query (repeated
    questions cluster; the query population is compared), where the grades came from, which
    judge identity (`model/prompt_version/mode`) gave them, and the probability `ip` with
    which the event was chosen for judging (`inclusion`)."""
    query = event["query"]
    qkey = query_hash(query) if isinstance(query, str) else str(query.get("sha", ""))
    more = {"more": list(grades[event["k"] :])} if len(grades) > event["k"] else {}
    return {
        **digest(event, result),
        "ts": event["timestamp"],
        "labels": result["labels"],
        "m": {m: result["measures"].get(m) for m in HISTOGRAM_MEASURES},
        "pids": [p["id"] for p in event["passages"][: event["k"]]],
        "grades": list(grades[: event["k"]]),
        "q": qkey[:QUERY_KEY_CHARS],
        "ql": len(query.split()) if isinstance(query, str) else None,
        "jm": judge,
        "ip": inclusion,
        **more,
    }


def without_texts(event: Mapping[str, Any]) -> str:
    """The stored payload without query and passage text, only their hashes: a judged event's
    compact record once its texts leave (RAGMON_TEXT_TTL_DAYS, RAGMON_STORE_TEXT=false)."""
    keep = {k: v for k, v in event.items() if not k.startswith("_")}
    if isinstance(query := event.get("query"), str):
        keep["query"] = {"sha": text_hash(query)}
    keep["passages"] = [
        {**{k: v for k, v in p.items() if k != "text"}, "text_sha": text_hash(p["text"])}
        if isinstance(p.get("text"), str)
        else p
        for p in event.get("passages", ())
    ]
    return json.dumps(keep, separators=(",", ":"))


def text_ttl_s(settings: Settings) -> int:
    """How long a judged event keeps its texts apart from its compact record, in seconds: 0
    when they go at once (RAGMON_STORE_TEXT=false, RAGMON_TEXT_TTL_DAYS=0) or stay in the
    record (a text window as long as the result's: nothing to split)."""
    if not settings.store_text:
        return 0
    return int(min(settings.text_ttl_days, settings.result_ttl_days) * 86400)


def text_of(raw: bytes | str) -> str:
    """A value read from Redis: bytes from ragmon's clients (no decode_responses)."""
    return raw.decode() if isinstance(raw, bytes) else raw


def number_of(raw: bytes | str) -> float:
    text = text_of(raw)
    return int(text) if text.lstrip("-").isdigit() else float(text)


def text_hash(text: str) -> str:
    """Stable short hash of a text (cache keys, and what is kept when text storage is off)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def query_hash(query: str) -> str:
    """Hash of the normalized query: case and runs of white space do not matter."""
    return text_hash(" ".join(query.lower().split()))
