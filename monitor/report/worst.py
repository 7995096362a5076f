"""The report's worst events of the week: ids (linked to the explorer when it has a URL),
grades, and the query and passage text while the event is retained."""

from __future__ import annotations

from ragmon.core.pages import event_url
from ragmon.report.analyze import Report, fmt
from ragmon.report.document import Cell, Doc, Link
from ragmon.report.gather import record_ref

TEXT_PREVIEW = 160


def _passages(e: dict) -> str:
    return " ".join(
        f"{p}:{g if g is not None else '?'}" for p, g in zip(e["pids"], e["grades"], strict=False)
    )


def worst_section(doc: Doc, report: Report) -> None:
    doc.h(2, "Worst events of the week", "worst")
    if not report.store_text:
        doc.p(
            "Text retention is off (RAGMON_STORE_TEXT=false): only hashes of queries and "
            "passages are kept, so the events show ids and grades only."
        )
    else:
        doc.p(
            f"Query and passage text are shown while the event is retained "
            f"(RAGMON_RESULT_TTL_DAYS = {report.result_ttl_days:g})."
        )
    for title, events in (
        ("Lowest nDCG@K", report.worst_ndcg),
        ("Highest Harm@K", report.worst_harm),
    ):
        doc.h(3, title)
        rows: list[list[Cell]] = []
        for e in events:
            lb = e["labels"]
            rows.append(
                [
                    _event_cell(report.explorer_url, lb["app"], e["id"]),
                    e["ts"],
                    f"{lb['retriever']} / {lb['segment']}",
                    fmt(e["m"].get("ndcg")),
                    fmt(e["m"].get("harm")),
                    str(e["k"]),
                    _passages(e),
                    _query(report.details.get(record_ref(e)), report.store_text),
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
                "top-K passages (id:grade)",
                "query",
            ],
            rows,
        )
        texts = [t for e in events[:3] for t in _texts(e, report.details.get(record_ref(e)))]
        doc.ul(texts)


def _event_cell(explorer_url: str | None, app: str, event_id: str) -> Cell:
    """The event's id, a link to it in the explorer when RAGMON_EXPLORER_URL is set."""
    if not explorer_url:
        return event_id
    return Link(event_id, explorer_url.rstrip("/") + event_url(app, event_id))


def _query(payload: dict | None, store_text: bool) -> str:
    if payload is None:
        return "expired (past RAGMON_RESULT_TTL_DAYS)"
    q = payload.get("query")
    if isinstance(q, str):
        return q
    return "not retained (hash only)" if not store_text else "not retained"


def _texts(e: dict, payload: dict | None) -> list[str]:
    if payload is None or not isinstance(payload.get("query"), str):
        return []
    out = []
    grades = dict(zip(e["pids"], e["grades"], strict=False))
    for p in payload.get("passages", [])[: e["k"]]:
        text = p.get("text")
        if isinstance(text, str):
            short = text if len(text) <= TEXT_PREVIEW else text[:TEXT_PREVIEW] + "…"
            out.append(f"{e['id']} · {p['id']} (grade {grades.get(p['id'], '?')}): {short}")
    return out
