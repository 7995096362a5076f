"""People's grades of judged passages (`POST /v1/grades`), pure: checked against the event they
grade, and turned into the record the store keeps beside the judge's grade.

A record holds what agreement and the corrected estimates need without the event (which
expires first): the person's grade and the judge's grade of the same passage with the judge's
identity, the event's series, time and K, the passage's rank; and, while text storage is on,
the query and passage text the judge saw (the anchor set re-judges them).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ragmon.core.identity import KNOWN, human

JUDGED = "done"  # people grade judged events: agreement needs the judge's grade beside theirs


def graded_by(source: str | None, judge: str | None) -> str | None:
    """Who gave a stored grade: the judge identity (from the judge or its cache), `known`
    (sent by the app), or None (not graded)."""
    if source == KNOWN:
        return KNOWN
    if source in ("judge", "cache"):
        return judge
    return None


def find_passage(found: Mapping[str, Any], passage_id: str) -> dict | None:
    """The first passage of the event with this id (a repeat is the same passage)."""
    for p in found.get("passages") or ():
        if p.get("id") == passage_id and not p.get("duplicate_of"):
            return dict(p)
    return None


def problem(
    item: Mapping[str, Any], found: Mapping[str, Any] | None
) -> tuple[int, str, str] | None:
    """Why a grade cannot be stored, as (status, field, message), or None.

    `found` is the event's `GET /v1/retrievals/{id}` answer (None: unknown to its app)."""
    app, event_id = item["app"], item["event_id"]
    if found is None:
        return (
            404,
            "event_id",
            f"unknown event {event_id!r} of app {app!r} (never received, or expired: "
            "RAGMON_RESULT_TTL_DAYS)",
        )
    if found.get("status") != JUDGED:
        return (
            422,
            "event_id",
            f"event {event_id!r} is {found.get('status')}: people grade judged events",
        )
    if find_passage(found, item["passage_id"]) is None:
        return 422, "passage_id", f"event {event_id!r} has no passage {item['passage_id']!r}"
    return None


def grade_record(item: Mapping[str, Any], found: Mapping[str, Any], now: float) -> dict:
    """The stored record of one person's grade (`item` checked by `problem`)."""
    passage = find_passage(found, item["passage_id"])
    assert passage is not None
    record = {
        "app": item["app"],
        "event_id": item["event_id"],
        "passage_id": item["passage_id"],
        "rank": passage["rank"],
        "grade": item["grade"],
        "reviewer": item["reviewer"],
        "note": item.get("note"),
        "at": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
        "labels": found.get("labels"),
        "ts": found.get("timestamp"),
        "k": found.get("k"),
        "judge_grade": passage.get("grade"),
        "judge": graded_by(passage.get("grade_source"), found.get("judge")),
    }
    if isinstance(found.get("query"), str) and isinstance(passage.get("text"), str):
        record["query"], record["text"] = found["query"], passage["text"]
    return record


def shown(record: Mapping[str, Any]) -> dict:
    """A record as `GET /v1/retrievals/{id}` shows it under its passage."""
    return {
        "reviewer": record["reviewer"],
        "grade": record["grade"],
        "graded_by": human(record["reviewer"]),
        "note": record.get("note"),
        "at": record.get("at"),
    }
