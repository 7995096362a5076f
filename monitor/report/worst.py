"""The report's worst events of the week: ids (linked to the explorer when its URL is known),
grades, and the query and passage text while the event is retained."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragmon.core.pages import event_url
from ragmon.report.analyze import Report, fmt
from ragmon.report.document import Cell, Doc, Link
from ragmon.report.gather import record_ref

TEXT_PREVIEW = 90  # characters of each passage's text in the table


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_PREVIEW else text[:TEXT_PREVIEW] + "…"


def _passages(e: dict, payload: Mapping[str, Any] | None, store_text: bool) -> str:
    """Each top-K passage as `id:grade`, with the start of its text when it is stored."""
    texts: dict[str, str] = {}
    if payload is not None:
        for p in payload.get("passages", []):
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                texts[str(p.get("id"))] = p["text"]
    parts = []
    for pid, g in zip(e["pids"], e["grades"], strict=False):
        cell = f"{pid}:{g if g is not None else '?'}"
        if pid in texts:
            cell += f" “{_short(texts[pid])}”"
        elif payload is not None and store_text:
            cell += " (no text sent)"
        parts.append(cell)
    why = _no_text(payload, store_text)
    return " · ".join(parts) + (f" ({why})" if why else "")


def _no_text(payload: Mapping[str, Any] | None, store_text: bool) -> str:
    """Why an event shows no passage text, or "" when it can."""
    if payload is None:
        return "text expired: past RAGMON_RESULT_TTL_DAYS"
    if not store_text:
        return "text not stored: RAGMON_STORE_TEXT=false"
    return ""


def worst_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Worst events of the week", "worst")
    if not report.store_text:
        doc.p(
            "Text is not stored (RAGMON_STORE_TEXT=false): only hashes of queries and "
            "passages are kept, so the events show ids and grades only."
        )
    else:
        doc.p(
            f"Each event shows its query and the start of each top-K passage's text while the "
            f"event is retained (RAGMON_RESULT_TTL_DAYS = {report.result_ttl_days:g}); an "
            "older event says its text expired."
        )
    if not report.explorer_url:
        doc.p(
            "Event ids are not links: the explorer's address is not known. Set "
            "RAGMON_EXPLORER_URL (the API as browsers reach it) or pass --explorer-url."
        )
    for title, events in (
        ("Lowest nDCG@K", report.worst_ndcg),
        ("Highest Harm@K", report.worst_harm),
    ):
        doc.h(3, title)
        rows: list[list[Cell]] = []
        for e in events:
            lb = e["labels"]
            payload = report.details.get(record_ref(e))
            rows.append(
                [
                    _event_cell(report.explorer_url, lb["app"], e["id"]),
                    e["ts"],
                    f"{lb['retriever']} / {lb['segment']}",
                    fmt(e["m"].get("ndcg")),
                    fmt(e["m"].get("harm")),
                    str(e["k"]),
                    _query(payload, report.store_text),
                    _passages(e, payload, report.store_text),
                ]
            )
        doc.table(
            [
                "event",
                "time",
                "retriever / segment",
                "nDCG",
                "Harm",
                "K",
                "query",
                "top-K passages (id:grade “text”)",
            ],
            rows,
        )


def _event_cell(explorer_url: str | None, app: str, event_id: str) -> Cell:
    """The event's id, a link to its page in the explorer when the explorer's URL is known."""
    if not explorer_url:
        return event_id
    return Link(event_id, explorer_url.rstrip("/") + event_url(app, event_id))


def _query(payload: Mapping[str, Any] | None, store_text: bool) -> str:
    if payload is None:
        return "expired (past RAGMON_RESULT_TTL_DAYS)"
    q = payload.get("query")
    if isinstance(q, str):
        return q
    return "not retained (hash only)" if not store_text else "not retained"
