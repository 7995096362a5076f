"""The RQ job: judge a small batch of events, compute their measures, record each once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from monitor.measures import MeasureParams, compute
from monitor.store import Store, event_day, ref_of, text_hash
from monitor.store.keys import SEP
from workers.context import WorkerContext, current_context
from workers.grading import grade_event, on_both_scales, probe_event
from workers.judges.base import Judge, JudgeError

log = logging.getLogger("ragmon.worker")


class RetryLater(Exception):
    """Some events hit a passing judge failure: RQ retries the job; done events are skipped."""


def process_events(refs: list[str]) -> dict[str, int]:
    """RQ entry point (sync: RQ forks a work horse per job; the event loop lives in the job).

    `refs` are `monitor.store.keys.event_ref`s: event ids are scoped by app."""
    ctx = current_context()
    return asyncio.run(_process(ctx, refs))


async def _process(ctx: WorkerContext, refs: list[str]) -> dict[str, int]:
    store = ctx.store
    events = [
        e for e in store.load_events(refs) if e is not None and e["_status"] in ("queued", "failed")
    ]
    counts = {"done": 0, "failed": 0, "skipped": len(refs) - len(events), "retry": 0}
    if not events:
        return counts
    judge = ctx.make_judge()
    params = ctx.settings.measure_params()
    try:
        outcomes = await asyncio.gather(
            *(_one(ctx, store, judge, params, e) for e in events), return_exceptions=True
        )
    finally:
        close = getattr(judge, "aclose", None)
        if close is not None:
            await close()
    retry_reasons = []
    lasting: dict[str, str] = {}
    for event, outcome in zip(events, outcomes, strict=True):
        if isinstance(outcome, JudgeError) and outcome.retryable:
            counts["retry"] += 1
            retry_reasons.append(outcome.reason)
            store.note_error([ref_of(event)], f"{outcome.reason}: {outcome}")
        elif isinstance(outcome, JudgeError):
            counts["failed"] += store.fail(ref_of(event), outcome.reason, str(outcome))
            lasting.setdefault(outcome.reason, " ".join(str(outcome).split())[:200])
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            counts[outcome] += 1
    if lasting:  # say it in the log too, not only in GET: a bad key fails every event
        log.warning(
            "%d events failed for good (%s); `ragmon requeue-failed` once it is fixed",
            counts["failed"],
            "; ".join(f"{reason}: {text}" for reason, text in lasting.items()),
        )
    if retry_reasons:
        raise RetryLater(f"{counts['retry']} events to retry: {sorted(set(retry_reasons))}")
    return counts


async def _one(
    ctx: WorkerContext, store: Store, judge: Judge, params: MeasureParams, event: dict
) -> str:
    graded = await grade_event(event, judge, store)
    grades, utility = on_both_scales(graded.grades, judge)
    k = event["k"]
    ps: list[float | None] | None = None
    missing = None
    if ctx.settings.utility and event["passages"]:
        ps, missing = await probe_event(event, judge, store)
    p_no = None if missing else ps
    measures = compute(
        grades, k, params, event.get("relevant_total"), p_no, utility, graded.duplicates_in(k)
    )
    result = {
        "event_id": event["event_id"],
        "status": "done",
        "k": k,
        "labels": event["labels"],
        "grades": grades,
        "grade_source": graded.sources,
        "duplicate_of": graded.duplicate_of,
        "measures": measures,
        "error": None,
    }
    if graded.unjudged:
        result["unjudged"] = graded.unjudged
    if utility is not None:
        result["utility"] = utility
    if ps is not None:
        result["p_no_response"] = ps[:k]
        result["udcg_missing"] = missing
    stripped = None if ctx.settings.store_text else strip_text(event)
    counts = {f"passages_unjudged{SEP}{reason}": n for reason, n in graded.unjudged.items()}
    if any(d is not None for d in graded.duplicate_of):
        counts["passages_duplicate"] = sum(d is not None for d in graded.duplicate_of)
    done = store.finish(event, result, grades, stripped, judge=judge.model, series_counts=counts)
    if done and missing:  # once per event: a re-run finish is not done
        store.incr(f"udcg_missing{SEP}{missing}", day=event_day(event))
    return "done" if done else "skipped"


def strip_text(event: dict) -> str:
    """The stored payload without query and passage text: only their hashes remain."""
    keep = {k: v for k, v in event.items() if not k.startswith("_")}
    keep["query"] = {"sha": text_hash(event["query"])}
    keep["passages"] = [
        {**{k: v for k, v in p.items() if k != "text"}, "text_sha": text_hash(p["text"])}
        for p in event["passages"]
    ]
    return json.dumps(keep, separators=(",", ":"))


def on_job_failure(job: Any, connection: Any, exc_type: Any, exc: Any, tb: Any) -> None:
    """RQ failure callback: after the last retry, mark the job's unfinished events failed."""
    if job.retries_left:
        return
    reason = "judge_unavailable" if isinstance(exc, RetryLater) else "worker_error"
    if exc_type is not None and exc_type.__name__ == "AbandonedJobError":
        reason = "worker_died"
    store = current_context().store
    for ref in job.args[0]:
        store.fail(ref, reason, f"{exc_type.__name__ if exc_type else 'error'}: {exc}")
