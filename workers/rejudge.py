"""The anchor set's re-judging (RQ job, scheduled every RAGMON_ANCHOR_EVERY_HOURS by `ragmon
worker --with-scheduler`, or `ragmon anchor --rejudge`): the configured judge grades every
passage of the set again, never from the judgment cache (a drifting model behind a cached grade
would go unseen), and the run's agreement with the set's grades is kept (`ragmon.core.anchor`).

Its calls are ordinary judge calls: counted, rate-limited and inside RAGMON_DAILY_BUDGET_USD.
Every run is kept, blind ones too (no set, too few passages or questions, a judge that did not
grade every passage): `/metrics` exports the watch's state from the latest, so a blind watch is
alerted on, and a blind run does not move the drift gauges.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragmon.core.anchor import (
    BLIND,
    AnchorItem,
    blind_reason,
    choose,
    from_people,
    grow,
    run_record,
)
from ragmon.core.golden import parse_records
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.workers.grading import on_both_scales
from ragmon.workers.judges.base import Judge, JudgeError

log = logging.getLogger("ragmon.anchor")


def anchor_items(settings: Settings, store: Store) -> tuple[list[AnchorItem], str]:
    """The set and where it comes from: RAGMON_ANCHOR_FILE's graded passages, else people's
    grades, the kept set grown by the passages graded since (`grow`)."""
    if settings.anchor_file:
        path = Path(settings.anchor_file)
        with path.open() as lines:
            records = parse_records(lines, str(path))
        seen: dict[tuple[str, str], AnchorItem] = {}
        for i, r in enumerate(records):
            for j, (_, text, grade) in enumerate(r.passages):
                if grade is not None:
                    seen.setdefault((r.query, text), AnchorItem(f"file:{i:06d}:{j:03d}", r.query,
                                                                text, grade))  # fmt: skip
        return choose(list(seen.values()), settings.anchor_size), "file"
    kept = store.anchors.current() or []
    people = from_people(r for app in store.human.apps() for r in store.human.of_app(app))
    items = grow(kept, people, settings.anchor_size)
    if items != kept:
        store.anchors.save(items)
    return items, "people"


async def rejudge(
    settings: Settings, store: Store, judge: Judge, now: datetime | None = None
) -> dict[str, Any]:
    """Grade the anchor set with `judge` and keep the run, blind or not; returns it."""
    items, source = anchor_items(settings, store)
    at = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    by_query: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_query.setdefault(item.query, []).append(i)
    grades: list[int | None] = [None] * len(items)
    failures: list[str] = []

    async def one(query: str, idx: list[int]) -> None:
        got: list[int | None]
        try:
            got = list(await judge.grade(query, [(f"a{i}", items[i].text) for i in idx]))
        except JudgeError as exc:
            failures.append(exc.reason)
            got = exc.grades or [None] * len(idx)
        for i, g in zip(idx, on_both_scales(got, judge)[0], strict=True):
            grades[i] = g

    try:
        await asyncio.gather(*(one(q, idx) for q, idx in by_query.items()))
    finally:
        await judge.aclose()
    record = run_record(judge.identity.label, items, grades, at)
    record["source"] = source
    if failures:
        record["reason"] = f"{len(failures)} judge calls failed ({sorted(set(failures))[0]}...)"
    blind = blind_reason(record)
    record["blind"] = blind
    if blind is not None and not failures:
        record["reason"] = BLIND[blind] + (
            f" (it has {record['passages']} from {record['questions']})" if items else ""
        )
    store.anchors.add_run(record)
    if blind is None:
        log.info("anchor set re-judged: %d passages, kappa %.3f", record["graded"],
                 record["kappa"]["estimate"])  # fmt: skip
    else:
        log.warning("anchor set re-judged blind (%s): %s", blind, record["reason"])
    return record


def anchor_job() -> dict[str, Any]:
    """RQ entry point: re-judge the anchor set with the worker's judge."""
    from ragmon.workers.context import current_context

    ctx = current_context()
    return asyncio.run(rejudge(ctx.settings, ctx.store, ctx.make_judge()))
