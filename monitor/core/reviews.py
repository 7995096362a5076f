"""People's grades of judged passages (`POST /v1/grades`), pure: checked against the event they
grade, and turned into the record the store keeps beside the judge's grade.

A record holds what agreement and the corrected estimates need without the event (which
expires first): the person's grade and the judge's grade of the same passage with the judge's
identity, the event's series, time and K, the passage's rank. While text storage is on, the
query and passage text the judge saw are kept too (the anchor set re-judges them), once per
event beside the records (`grade_texts`), not copied into each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ragmon.core import draws
from ragmon.core.corrected import Corrected, GradedEvent, event_units, passage_units, ppi_mean
from ragmon.core.identity import KNOWN, human
from ragmon.core.measures import MeasureParams
from ragmon.core.wire import Status

JUDGED = Status.DONE  # people grade judged events: agreement needs the judge's grade beside theirs
# The 0-3 scale (TREC Deep Learning / UMBRELA) in the words the review buttons show.
RUBRIC = {
    3: ("perfectly relevant", "dedicated to the query and contains the exact answer"),
    2: ("highly relevant", "answers the query, perhaps partly or buried in other text"),
    1: ("related", "on topic but does not answer the query"),
    0: ("irrelevant", "nothing to do with the query"),
}


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
    return record


def grade_texts(found: Mapping[str, Any], passage_id: str) -> tuple[str, str]:
    """The query and the passage's text a grade was given on, while text storage keeps them
    (kept once per event beside the records: the anchor set re-judges them), else ''."""
    passage = find_passage(found, passage_id) or {}
    query, text = found.get("query"), passage.get("text")
    if isinstance(query, str) and isinstance(text, str):
        return query, text
    return "", ""


def shown(record: Mapping[str, Any]) -> dict:
    """A record as `GET /v1/retrievals/{id}` shows it under its passage."""
    return {
        "reviewer": record["reviewer"],
        "grade": record["grade"],
        "graded_by": human(record["reviewer"]),
        "note": record.get("note"),
        "at": record.get("at"),
    }


# ---- from stored records to the statistics' inputs ---------------------------------------------

Pairs = tuple[list[int], list[int], list[str]]  # people's grades, the judge's, event ids


def agreement_pairs(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Pairs]:
    """`(app, judge identity)` → the pairs agreement is computed on: one per person's grade
    of a passage the judge graded (the app's own `known` grades are not the judge's)."""
    out: dict[tuple[str, str], Pairs] = {}
    for r in records:
        judge, grade = r.get("judge"), r.get("judge_grade")
        if judge in (None, KNOWN) or grade is None:
            continue
        people, judged, events = out.setdefault((r["app"], judge), ([], [], []))
        people.append(int(r["grade"]))
        judged.append(int(grade))
        events.append(r["event_id"])
    return out


def second_judge_pairs(
    records: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str], Pairs]:
    """`(app, second judge, first judge)` → the pairs (first's grade, second's grade, event id)
    of the passages both graded (`ragmon.workers.second`)."""
    out: dict[tuple[str, str, str], Pairs] = {}
    for r in records:
        first, second, events = out.setdefault((r["app"], r["second"], r["first"]), ([], [], []))
        for a, b in r["pairs"]:
            first.append(int(a))
            second.append(int(b))
            events.append(r["event_id"])
    return out


def people_by_event(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, int]]:
    """`(app, event_id)` → rank → the person's grade: the latest one given when several people
    graded a passage (the corrected estimates take one grade per passage)."""
    latest: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}
    for r in records:
        ranks = latest.setdefault((r["app"], r["event_id"]), {})
        at = str(r.get("at") or "")
        if r["rank"] not in ranks or at >= ranks[r["rank"]][0]:
            ranks[r["rank"]] = (at, int(r["grade"]))
    return {key: {rank: g for rank, (_, g) in ranks.items()} for key, ranks in latest.items()}


def graded_event(day_record: Mapping[str, Any], people: Mapping[int, int] | None) -> GradedEvent:
    """One judged event as the corrected estimates read it, from its per-day record and the
    people's grades of its passages by rank (none: not in the human sample)."""
    judge = [*day_record.get("grades", ()), *day_record.get("more", ())]
    human = [(people or {}).get(rank) for rank in range(1, len(judge) + 1)]
    inclusion = float(day_record.get("ip") or 1.0)
    return GradedEvent(
        judge=judge,
        human=human,
        k=int(day_record["k"]),
        weight=1.0 / inclusion,
        cluster=day_record.get("q") or ("event", day_record["id"]),
        judge_id=day_record.get("jm"),
    )


# The measures with a corrected estimate, and their units: P@K averages passages, so every
# passage people graded counts; nDCG@K and Hit@K are per event, so only events whose passages
# the measure reads were all graded by people (`ragmon.core.corrected`).
ESTIMATED = {"ndcg": "event", "precision": "passage", "hit": "event"}
MEASURE_NAMES = {"ndcg": "nDCG@K", "precision": "P@K", "hit": "Hit@K"}


def estimates(events: Sequence[GradedEvent], params: MeasureParams) -> dict[str, Corrected]:
    """The corrected (PPI++) mean of each `ESTIMATED` measure over one series' judged events,
    all withheld (`random_draw` False, `reason` saying why) when the graded units do not look
    like a random draw of the judged ones (`ragmon.core.draws`; one verdict per series, its
    checks Bonferroni-adjusted so that a random draw is withheld at most `draws.ALPHA` of the
    time)."""
    graded = [any(h is not None for h in e.human) for e in events]
    checks = [
        draws.identities(
            [e.judge_id for e, g in zip(events, graded, strict=True) if g],
            [e.judge_id for e, g in zip(events, graded, strict=True) if not g],
        )
    ]
    out = {}
    for measure, unit in ESTIMATED.items():
        units = (
            passage_units(events, params)
            if unit == "passage"
            else event_units(events, measure, params)
        )
        out[measure] = ppi_mean(units)
        name = f"the judge's {MEASURE_NAMES[measure]}"
        checks.append(draws.judge_values(
            units.judge, units.clusters, units.judge_rest, units.clusters_rest, name
        ))  # fmt: skip
    worst = min(checks, key=lambda d: d.p)
    if not any(graded):
        return out
    if worst.p * len(checks) >= draws.ALPHA:
        return {m: replace(c, random_draw=True) for m, c in out.items()}
    why = f"{worst.problem} (p = {worst.p:.2g}, {len(checks)} checks)"
    return {
        m: replace(c, estimate=None, human_only=None, lam=0.0, effective_labels=None,
                   reason=why, random_draw=False)
        for m, c in out.items()
    }  # fmt: skip
