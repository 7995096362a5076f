"""The anchor set's daily re-judging (RQ job, scheduled by `ragmon worker --with-scheduler`, or
`ragmon anchor --rejudge`): the configured judge grades every passage of the set again, never from
the judgment cache (a drifting model behind a cached grade would go unseen), and the run's
agreement with the set's grades is kept (`ragmon.core.anchor`).

Its calls are ordinary judge calls: counted, rate-limited and inside RAGMON_DAILY_BUDGET_USD.
A run that cannot grade every passage (the budget is spent, the endpoint fails) is kept as
incomplete and does not move the drift gauges.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragmon.core.agreement import MIN_PAIRS
from ragmon.core.anchor import AnchorItem, choose, from_people, run_record
from ragmon.core.golden import parse_records
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.workers.grading import on_both_scales
from ragmon.workers.judges.base import Judge, JudgeError

log = logging.getLogger("ragmon.anchor")


def anchor_items(settings: Settings, store: Store) -> tuple[list[AnchorItem], str]:
    """The set and where it comes from: RAGMON_ANCHOR_FILE's graded passages, else people's
    grades frozen at the first run that finds enough of them (else an empty set)."""
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
    frozen = store.anchors.frozen()
    if frozen is not None:
        return frozen, "people"
    people = from_people(r for app in store.human.apps() for r in store.human.of_app(app))
    if len(people) < MIN_PAIRS:
        return [], "people"
    return store.anchors.freeze(choose(people, settings.anchor_size)), "people"


async def rejudge(
    settings: Settings, store: Store, judge: Judge, now: datetime | None = None
) -> dict[str, Any]:
    """Grade the anchor set with `judge` and keep the run; returns it (or why there was none)."""
    items, source = anchor_items(settings, store)
    at = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    if not items:
        why = f"no anchor set yet: RAGMON_ANCHOR_FILE, or {MIN_PAIRS} passages people graded"
        return {"at": at, "judge": judge.identity.label, "passages": 0, "reason": why}
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
    store.anchors.add_run(record)
    log.info("anchor set re-judged: %d of %d passages, kappa %s", record["graded"],
             record["passages"], (record["kappa"] or {}).get("estimate"))  # fmt: skip
    return record


def anchor_job() -> dict[str, Any]:
    """RQ entry point: re-judge the anchor set with the worker's judge."""
    from ragmon.workers.context import current_context

    ctx = current_context()
    return asyncio.run(rejudge(ctx.settings, ctx.store, ctx.make_judge()))
