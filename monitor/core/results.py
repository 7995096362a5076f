"""The answer of `GET /v1/retrievals/{id}`, built from what the store keeps (pure, no I/O).

It holds what a person needs to debug one event (docs/api.md, the result of `GET`): the query
and timestamp, the app's `trace_id` and `metadata`, and each passage with its id, grade, where
the grade came from and whether it repeats an earlier passage; text only when text storage is
on (else the hashes kept in its place); the last judge error while the event waits for a retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict

from ragmon.core.reviews import graded_by, shown
from ragmon.core.wire import Status


def source_counts(sources: Iterable[str | None]) -> dict[str, int]:
    """How many passages got their grade from each source (`known`, `cache`, `judge`)."""
    out: dict[str, int] = {}
    for src in sources:
        if src is not None:
            out[src] = out.get(src, 0) + 1
    return out


class Digest(TypedDict):
    """What both compact records of a judged event keep alike, under the same names: the
    per-day record (`ragmon.store.records.day_record`, which the report reads) and the
    explorer's (`ragmon.core.index_members.record`): the event's id, its K and where its grades came
    from."""

    id: str
    k: int
    src: dict[str, int]


def digest(event: Mapping[str, Any], result: Mapping[str, Any]) -> Digest:
    """The `Digest` of a judged event and its result."""
    return {
        "id": event["event_id"],
        "k": event["k"],
        "src": source_counts(result.get("grade_source") or ()),
    }


def describe(
    event_id: str,
    status: str,
    result: dict | None,
    payload: dict | None,
    received_at: float | None,
    error: str | None = None,
    show_text: bool = True,
    human: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Merge the stored result (grades, measures), the stored event and its receipt time, and
    people's grades (`human`: records of `ragmon.core.reviews`) under their passages.

    Each passage names who gave its grade (`graded_by`: the judge identity, or `known`);
    people's grades never replace it, they are listed beside it (`human_grades`). With
    `show_text` False (RAGMON_STORE_TEXT=false) no query or passage text is answered, even
    while the event still holds it (sealed) for the judge."""
    out: dict[str, Any] = {"event_id": event_id, "status": status}
    if result is not None:
        out.update(result)
        out["status"] = status
    if payload is None:
        return out
    out.setdefault("k", payload.get("k"))
    out.setdefault("labels", payload.get("labels"))
    query = payload.get("query")
    if show_text and isinstance(query, str):  # a dict {"sha": ...} once stripped
        out["query"] = query
    elif isinstance(query, dict) and "sha" in query:
        out["query_sha"] = query["sha"]
    ts = payload.get("timestamp")
    if ts is None and received_at is not None:
        ts = datetime.fromtimestamp(received_at, UTC).isoformat().replace("+00:00", "Z")
    out["timestamp"] = ts
    for key in ("trace_id", "metadata", "inclusion_probability"):
        if key in payload:
            out[key] = payload[key]
    grades = out.get("grades") or []
    sources = out.get("grade_source") or []
    dups = out.get("duplicate_of") or []
    people: dict[str, list[dict]] = {}
    for record in human:
        people.setdefault(record["passage_id"], []).append(shown(record))
    passages = []
    for i, p in enumerate(payload.get("passages", ())):
        source = sources[i] if i < len(sources) else None
        row: dict[str, Any] = {
            "rank": i + 1,
            "id": p.get("id"),
            "score": p.get("score"),
            "grade": grades[i] if i < len(grades) else None,
            "grade_source": source,
            "graded_by": graded_by(source, out.get("judge")),
            "duplicate_of": dups[i] if i < len(dups) else None,
        }
        if p.get("id") in people and not row["duplicate_of"]:
            row["human_grades"] = people[p["id"]]
        if show_text and isinstance(p.get("text"), str):
            row["text"] = p["text"]
        elif "text_sha" in p:
            row["text_sha"] = p["text_sha"]
        passages.append(row)
    out["passages"] = passages
    measures = out.get("measures")
    if isinstance(measures, dict):
        out["judged_at_k"] = measures.get("judged_at_k")
    if status == Status.QUEUED and error:
        out["error"] = error  # the last judge error: its job waits for a retry
    return out
