"""Building wire events from what a RAG app has at hand: pure, no I/O, no threads.

Passages may be dicts, `(id, text[, score])` tuples, plain strings, LangChain documents
(`page_content`, `metadata`) or LlamaIndex nodes (`node.text` / `get_content()`, `node_id`,
`score`), duck-typed so that neither library is imported.

An event is never refused for something that can be repaired without changing what it says:
a passage without an id (or with an over-long one) gets a content hash, an empty chunk is
skipped, an over-long chunk or query is truncated to the limit, passages past MAX_PASSAGES are
cut, unknown label keys go to `metadata`, and metadata or a `trace_id` the server would refuse
is left out. Each repair is counted in the caller's `fixes` (SDK `stats()`). What cannot be
repaired raises `InvalidEvent` with a `reason` (counted per reason, never sent).
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from hashlib import sha1
from typing import Any

try:  # in the core install (CPython): encodes an event much faster than the stdlib
    import orjson
except ImportError:  # pragma: no cover - exercised by forcing the fallback in the tests
    orjson = None  # type: ignore[assignment]

from ragmon.core.wire import (
    LABEL_KEYS,
    MAX_CLOCK_SKEW,
    MAX_EVENT_AGE,
    MAX_EVENT_ID_CHARS,
    MAX_ID_CHARS,
    MAX_K,
    MAX_METADATA_BYTES,
    MAX_METADATA_KEYS,
    MAX_PASSAGES,
    MAX_QUERY_CHARS,
    MAX_SCORE,
    MAX_TEXT_CHARS,
    MAX_TRACE_ID_CHARS,
    event_id_problem,
    label_value,
)

MAX_FUTURE_S = MAX_CLOCK_SKEW.total_seconds()
MAX_AGE_S = MAX_EVENT_AGE.total_seconds() - 60  # a minute's margin for the trip to the server

#: Why an event could not be sent (`stats()` counts each as `invalid_<reason>`).
INVALID_REASONS = (
    "query",  # not a string, or empty
    "k",  # not an integer 1-MAX_K
    "passages",  # not a list of readable passages (an unsupported type, text not a string)
    "grade",  # a known grade that is not an integer 0-3
    "event_id",
    "timestamp",  # unreadable, older than 35 days or in the future
    "relevant_total",
    "encoding",  # not encodable as UTF-8 JSON (a lone surrogate)
    "unreadable",  # reading the app's objects raised
)
#: Repairs made so that an event could be sent (`stats()` counts each under its name).
FIXES = (
    "passages_skipped_empty",  # an empty chunk, left out of the ranking
    "passages_truncated",  # a chunk over MAX_TEXT_CHARS, cut to it
    "passages_cut",  # passages past the first MAX_PASSAGES, not sent
    "passage_ids_hashed",  # an id over MAX_ID_CHARS, replaced by its hash
    "queries_truncated",  # a query over MAX_QUERY_CHARS, cut to it
    "labels_to_metadata",  # a label key other than app/index/retriever/segment
    "labels_repaired",  # a label value outside the pattern: `_` for each bad character, cut
    "metadata_dropped",  # a metadata entry over the limits or of a type JSON cannot carry
    "trace_ids_dropped",  # a trace_id that is not 1-128 chars
)


class InvalidEvent(ValueError):
    """An event the server would reject and the SDK cannot repair; never sent."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def build_event(
    query: Any,
    passages: list,
    k: Any,
    labels: Mapping[str, Any] | None = None,
    event_id: Any = None,
    timestamp: Any = None,
    relevant_total: Any = None,
    trace_id: Any = None,
    metadata: Mapping[str, Any] | None = None,
    fixes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The wire event for one retrieval, repaired where it can be (counted in `fixes`);
    raises InvalidEvent where the server would answer 422 and no repair is possible."""
    if not isinstance(query, str) or not query:
        raise InvalidEvent("query", f"must be a string of 1-{MAX_QUERY_CHARS} chars")
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS]
        _count(fixes, "queries_truncated")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidEvent("k", f"must be an integer in 1-{MAX_K}")
    if event_id is None:
        event_id = new_event_id()
    elif not isinstance(event_id, str) or not 1 <= len(event_id) <= MAX_EVENT_ID_CHARS:
        raise InvalidEvent("event_id", f"must be a string of 1-{MAX_EVENT_ID_CHARS} chars")
    else:
        problem = event_id_problem(event_id)
        if problem:
            raise InvalidEvent("event_id", problem.removeprefix("event_id: "))
    if len(passages) > MAX_PASSAGES:
        _count(fixes, "passages_cut", len(passages) - MAX_PASSAGES)
        passages = passages[:MAX_PASSAGES]
    wire = _plain_passages(passages)
    if wire is None:  # some passage needs a look of its own
        wire = [one for i, p in enumerate(passages) if (one := passage(p, i, fixes)) is not None]
    event: dict[str, Any] = {
        "event_id": event_id,
        "query": query,
        "k": k,
        "passages": wire,
        "timestamp": _timestamp(timestamp),
    }
    extra: dict[str, Any] = {}
    if labels:
        kept = {}
        for key, value in labels.items():
            if key not in LABEL_KEYS:
                extra[key] = value
                _count(fixes, "labels_to_metadata")
                continue
            if value is None or value == "":  # no value: the server's `default`
                continue
            fixed = label_value(value)
            if fixed is None or fixed != str(value):
                _count(fixes, "labels_repaired")
            if fixed is not None:
                kept[key] = fixed
        if kept:
            event["labels"] = kept
    if relevant_total is not None:
        if isinstance(relevant_total, bool) or not isinstance(relevant_total, int):
            raise InvalidEvent("relevant_total", "must be an integer >= 0")
        if relevant_total < 0:
            raise InvalidEvent("relevant_total", "must be an integer >= 0")
        event["relevant_total"] = relevant_total
    if trace_id is not None:
        if isinstance(trace_id, uuid.UUID | int) and not isinstance(trace_id, bool):
            trace_id = str(trace_id)
        if isinstance(trace_id, str) and 1 <= len(trace_id) <= MAX_TRACE_ID_CHARS:
            event["trace_id"] = trace_id
        else:
            _count(fixes, "trace_ids_dropped")
    if metadata or extra:
        meta = _metadata(metadata, extra, fixes)
        if meta:
            event["metadata"] = meta
    return event


def passage(p: Any, rank: int = 0, fixes: dict[str, int] | None = None) -> dict[str, Any] | None:
    """One wire passage from a dict, a tuple, a string, a LangChain document or a LlamaIndex
    node (duck-typed); None for an empty chunk (skipped, counted in `fixes`)."""
    if type(p) is dict and len(p) == 3:  # {"id": str, "text": str, "score": float}
        wire = _plain_passages(((p.get("id"), p.get("text"), p.get("score")),))
        if wire:
            return wire[0]
    if not isinstance(p, str | Mapping | tuple | list):
        p = foreign_passage(p, rank)
    pid: Any = None
    score: Any = None
    grade: Any = None
    text: Any
    if isinstance(p, str):  # a plain chunk of text: its id is a hash of it
        text = p
    elif isinstance(p, Mapping):
        pid, text, score, grade = p.get("id"), p.get("text"), p.get("score"), p.get("grade")
    else:
        if len(p) == 2 and (isinstance(p[0], Mapping | tuple | list) or _foreign(p[0])):
            # (passage, score): LangChain's similarity_search_with_score, and the relay's JSON
            return _with_score(passage(p[0], rank, fixes), p[1])
        if len(p) not in (2, 3):
            raise InvalidEvent("passages", f"[{rank}]: tuples are (id, text) or (id, text, score)")
        pid, text = p[0], p[1]
        score = p[2] if len(p) == 3 else None
    if not isinstance(text, str):
        raise InvalidEvent("passages", f"[{rank}].text: must be a string")
    if not text:
        _count(fixes, "passages_skipped_empty")
        return None
    if pid is None or pid == "":
        pid = _hash_id(text)  # of the whole text: two long chunks that start alike differ
    elif isinstance(pid, int | uuid.UUID) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str):
        raise InvalidEvent("passages", f"[{rank}].id: must be a string")
    if len(pid) > MAX_ID_CHARS:
        pid = _hash_id(pid)
        _count(fixes, "passage_ids_hashed")
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
        _count(fixes, "passages_truncated")
    out = {"id": pid, "text": text}
    if grade is not None:
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
            raise InvalidEvent("grade", f"passages[{rank}].grade: must be an integer 0-3")
        out["grade"] = grade
    return _with_score(out, score)


def _foreign(p: Any) -> bool:
    return not isinstance(p, str | int | float | uuid.UUID | Mapping | tuple | list | None)


def foreign_passage(p: Any, rank: int = 0) -> dict[str, Any]:
    """The fields of a LangChain document or a LlamaIndex node (duck-typed), as a passage dict
    to be checked like any other."""
    if hasattr(p, "page_content"):  # LangChain Document
        meta = getattr(p, "metadata", None) or {}
        pid = meta.get("id") if isinstance(meta, Mapping) else None
        pid = pid if pid is not None else getattr(p, "id", None)
        score = meta.get("score") if isinstance(meta, Mapping) else None
        return {"id": pid, "text": p.page_content, "score": score}
    if hasattr(p, "node"):  # LlamaIndex NodeWithScore
        return {**foreign_passage(p.node, rank), "score": getattr(p, "score", None)}
    if hasattr(p, "get_content") or hasattr(p, "node_id"):  # LlamaIndex node
        text = getattr(p, "text", None)
        if not isinstance(text, str):
            text = p.get_content()
        return {"id": getattr(p, "node_id", None) or getattr(p, "id_", None), "text": text}
    raise InvalidEvent("passages", f"[{rank}]: unsupported type {type(p).__name__}")


def _hash_id(text: str) -> str:
    return "sha1:" + sha1(text.encode("utf-8", "replace")).hexdigest()


def _count(fixes: dict[str, int] | None, name: str, n: int = 1) -> None:
    if fixes is not None:
        fixes[name] = fixes.get(name, 0) + n


def _metadata(
    given: Mapping[str, Any] | None, extra: Mapping[str, Any], fixes: dict[str, int] | None
) -> dict[str, Any]:
    """What the server accepts of the app's metadata and the unknown label keys (the app's own
    metadata first): string keys, string/number/bool values, MAX_METADATA_KEYS entries and
    MAX_METADATA_BYTES as compact JSON; any other entry is left out and counted."""
    entries: list[tuple[Any, Any]] = []
    if given is not None:
        if isinstance(given, Mapping):
            entries += given.items()
        else:
            _count(fixes, "metadata_dropped")
    entries += [(k, v) for k, v in extra.items() if not (given and k in given)]
    out: dict[str, Any] = {}
    size = 2  # {}
    for key, value in entries:
        ok = isinstance(key, str) and (
            isinstance(value, str | bool | int)
            or (isinstance(value, float) and math.isfinite(value))
        )
        if ok and len(out) < MAX_METADATA_KEYS:
            # as the server measures it: json.dumps, ASCII escapes, compact separators
            grown = size + len(json.dumps(key)) + 1 + len(json.dumps(value)) + (1 if out else 0)
            if grown <= MAX_METADATA_BYTES:
                out[key] = value
                size = grown
                continue
        _count(fixes, "metadata_dropped")
    return out


def _plain_passages(passages: Any) -> list[dict[str, Any]] | None:
    """The wire passages in one pass when every one is a plain, valid (str id, str text, float
    score within MAX_SCORE) triple, the shape most apps record; else None, and each passage goes
    through `passage()`. Anything else fails to unpack into three or fails the checks.

    A plain loop with the checks inline: cheaper than a comprehension calling a checking
    function per passage (tests/bench/bench_instructions.py counts both).
    """
    wire: list[dict[str, Any]] = []
    add = wire.append
    try:
        for pid, text, score in passages:
            if (
                type(pid) is str
                and type(text) is str
                and type(score) is float
                and 0 < len(pid) <= MAX_ID_CHARS
                and 0 < len(text) <= MAX_TEXT_CHARS
                and -MAX_SCORE <= score <= MAX_SCORE  # False for NaN and infinities
            ):
                add({"id": pid, "text": text, "score": score})
            else:
                return None
    except Exception:  # not three items, or not iterable: LangChain documents, dicts of 2 ...
        return None
    return wire


def _with_score(out: dict[str, Any] | None, score: Any) -> dict[str, Any] | None:
    if out is None or isinstance(score, bool) or not isinstance(score, int | float):
        return out
    if -MAX_SCORE <= score <= MAX_SCORE:  # finite and within the wire's bound
        out["score"] = float(score)
    return out


def new_event_id() -> str:
    """A random uuid4 string, as `str(uuid.uuid4())` but in a third of the time."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16)]}{h[17:20]}-{h[20:]}"


_VARIANT = "89ab" * 4  # RFC 4122: the top two bits of the 17th hex digit are 10


def _timestamp(ts: Any) -> str:
    if type(ts) is float:  # the common case, time.time() taken by record(): no datetime
        age = time.time() - ts
        if age > MAX_AGE_S or age < -MAX_FUTURE_S:
            raise InvalidEvent("timestamp", "older than 35 days or in the future")
        return _rfc3339(ts)
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidEvent("timestamp", "not RFC 3339") from None
        if ts.tzinfo is None:
            raise InvalidEvent("timestamp", "needs a timezone offset (RFC 3339)")
    elif isinstance(ts, int | float) and not isinstance(ts, bool):
        ts = datetime.fromtimestamp(ts, UTC)
    elif isinstance(ts, datetime):
        ts = ts.astimezone(UTC)  # a naive datetime is taken as local time
    else:
        raise InvalidEvent("timestamp", "must be a datetime, an RFC 3339 string or epoch seconds")
    age = (datetime.now(UTC) - ts).total_seconds()
    if age > MAX_AGE_S or age < -MAX_FUTURE_S:
        raise InvalidEvent("timestamp", "older than 35 days or in the future")
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


_seconds: dict[int, str] = {}  # "YYYY-MM-DDTHH:MM:SS" of recent whole seconds


def _rfc3339(ts: float) -> str:
    """UTC RFC 3339 with microseconds, rounded as `datetime.fromtimestamp` rounds."""
    frac, whole = math.modf(ts)
    seconds, us = int(whole), round(frac * 1e6)
    if us < 0:
        seconds, us = seconds - 1, us + 1_000_000
    if us >= 1_000_000:
        seconds, us = seconds + 1, us - 1_000_000
    head = _seconds.get(seconds)
    if head is None:
        if len(_seconds) > 64:
            _seconds.clear()
        head = _seconds[seconds] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{head}.{us:06d}Z"


def encode_event(event: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON; a lone surrogate in any string raises (counted invalid).

    orjson when installed (several times faster), else the stdlib.
    """
    if orjson is not None:
        try:
            return orjson.dumps(event)
        except TypeError:  # a non-str dict key: make it a string, as the stdlib does
            return orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS)
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode(data: bytes) -> Any:
    """Parse JSON bytes (orjson when installed, else the stdlib)."""
    return orjson.loads(data) if orjson is not None else json.loads(data)
