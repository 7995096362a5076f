"""The RQ job: judge a small batch of events, compute their measures, record each once.

While it runs, the job also takes the events that arrive meanwhile (`Claims`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from asyncio import FIRST_COMPLETED
from typing import Any

from ragmon.core.measures import MeasureParams, compute
from ragmon.store import Store, event_day, ref_of, text_hash
from ragmon.store.keys import SEP
from ragmon.store.rq_jobs import abandoned, last_attempt
from ragmon.workers.context import WorkerContext, current_context
from ragmon.workers.grading import InFlight, grade_event, on_both_scales, pooled, probe_event
from ragmon.workers.judges.base import Judge, JudgeError
from ragmon.workers.second import second_opinion

log = logging.getLogger("ragmon.worker")

CLAIM_LEASE_S = 30.0  # a dead work horse's claimed events are regrouped after this
CLAIM_POLL_S = 0.1  # how often a running job looks for events that just arrived
GREEDY_MAX_S = 60.0  # then the job takes no more and ends: a warm shutdown waits for it
# With nothing left to judge, a job keeps looking for new events this long before it ends:
# single events arriving a few per second then share one fork, event loop and HTTP client
# instead of paying each (docs/performance.md, "Trickle traffic").
CLAIM_LINGER_S = 2.0


class RetryLater(Exception):
    """Some events hit a passing judge failure: RQ retries the job; done events are skipped."""


def process_events(refs: list[str]) -> dict[str, int]:
    """RQ entry point (sync: RQ forks a work horse per job; the event loop lives in the job).

    `refs` are `ragmon.store.keys.event_ref`s: event ids are scoped by app."""
    ctx = current_context()
    return asyncio.run(_process(ctx, refs))


async def _process(ctx: WorkerContext, refs: list[str]) -> dict[str, int]:
    store = ctx.store
    events = [
        e for e in store.load_events(refs) if e is not None and e["_status"] in ("queued", "failed")
    ]
    counts = {"done": 0, "failed": 0, "skipped": len(refs) - len(events), "retry": 0, "claimed": 0}
    greedy = ctx.settings.group_window_s > 0
    if not events and not greedy:
        return counts
    judge = ctx.make_judge()
    params = ctx.settings.measure_params()
    tasks: dict[asyncio.Future, dict] = {}
    outcomes: list[tuple[dict, object]] = []
    claims = Claims(store)
    inflight = InFlight()  # a passage repeated across the job's events is judged once
    # The job's own events are on their last try when RQ has no retry left for it; claimed
    # events never are (a passing failure gives them back for an RQ job of their own).
    last = last_attempt()

    def start(event: dict, last_try: bool = False) -> None:
        work = _one(ctx, store, judge, params, event, inflight, last_try)
        tasks[asyncio.ensure_future(work)] = event

    try:
        for e in events:
            start(e, last)
        until = time.monotonic() + GREEDY_MAX_S
        busy_at = time.monotonic()
        while True:
            if greedy and (time.monotonic() > until or store.queue_depth()):
                # RQ jobs wait behind this one (no worker is free): end, and let them run
                greedy = False
            if greedy:
                for e in claims.take(ctx.settings.job_batch_size - len(tasks)):
                    start(e)
            if tasks:
                busy_at = time.monotonic()
            elif not greedy or time.monotonic() - busy_at > CLAIM_LINGER_S:
                break
            else:
                await asyncio.sleep(CLAIM_POLL_S)
                continue
            finished, _ = await asyncio.wait(
                tasks, timeout=CLAIM_POLL_S if greedy else None, return_when=FIRST_COMPLETED
            )
            for task in finished:
                event = tasks.pop(task)
                outcome = task.exception() or task.result()
                if ref_of(event) in claims.held:
                    greedy = claims.settle(event, outcome) and greedy
                    counts["claimed"] += 1
                else:
                    outcomes.append((event, outcome))
                if isinstance(outcome, JudgeError) and outcome.retryable:
                    greedy = False  # the judge is failing for now: take no more
            claims.renew()
    finally:
        await judge.aclose()
        claims.give_back()  # only on an error of the job itself: a sweep regroups them
    retry_reasons = []
    lasting: dict[str, str] = {}
    for event, outcome in outcomes:
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
            counts[str(outcome)] += 1
    if lasting:  # say it in the log too, not only in GET: a bad key fails every event
        log.warning(
            "%d events failed for good (%s); `ragmon requeue-failed` once it is fixed",
            counts["failed"],
            "; ".join(f"{reason}: {text}" for reason, text in lasting.items()),
        )
    if retry_reasons:
        raise RetryLater(f"{counts['retry']} events to retry: {sorted(set(retry_reasons))}")
    return counts


class Claims:
    """Events a running job took from the grouping window (`Grouping.claim`), under a lease.

    A job keeps taking the events that arrive while it runs, so single events share one
    event loop, one HTTP client and one fork instead of costing a job each. Safety: a claimed
    event's lease is renewed while it is judged; if the work horse dies, the lease ends and a
    sweep puts it into an RQ job. A passing judge failure gives it back the same way, so RQ's
    retries (and their schedule) apply to it as to any event.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.held: set[str] = set()
        self.renewed_at = time.monotonic()

    def take(self, room: int) -> list[dict]:
        if room <= 0:
            return []
        refs = self.store.grouping.claim(room, CLAIM_LEASE_S)
        if not refs:
            return []
        out = []
        for ref, e in zip(refs, self.store.load_events(refs), strict=True):
            if e is not None and e["_status"] in ("queued", "failed"):
                self.held.add(ref)
                out.append(e)
            else:
                self.store.grouping.release([ref])  # done meanwhile, or expired
        return out

    def settle(self, event: dict, outcome: object) -> bool:
        """Record a claimed event's outcome; False when the judge is failing for now (the job
        then stops taking more)."""
        ref = ref_of(event)
        self.held.discard(ref)
        if isinstance(outcome, JudgeError) and not outcome.retryable:
            self.store.fail(ref, outcome.reason, str(outcome))
        elif isinstance(outcome, BaseException):
            log.warning("event %s given back for an RQ retry: %s", ref, outcome)
            self.store.grouping.release([ref], retry=True)
            return False
        self.store.grouping.release([ref])
        return True

    def renew(self) -> None:
        if self.held and time.monotonic() - self.renewed_at > CLAIM_LEASE_S / 3:
            self.renewed_at = time.monotonic()
            self.store.grouping.renew(list(self.held), CLAIM_LEASE_S)

    def give_back(self) -> None:
        if self.held:
            self.store.grouping.release(list(self.held), retry=True)
            self.held.clear()


async def _one(
    ctx: WorkerContext,
    store: Store,
    judge: Judge,
    params: MeasureParams,
    event: dict,
    inflight: InFlight,
    last_try: bool = False,
) -> str:
    """Judge one event, measure it and record it. On its last try (`last_try`: the delivery
    gives it no further attempt) a passing judge failure leaves the passages it hit unjudged
    and the event is measured; it fails only when nothing could be graded."""
    graded = await grade_event(event, judge, store, inflight, last_try)
    grades, utility = on_both_scales(graded.grades, judge)
    k = event["k"]
    ps: list[float | None] | None = None
    missing = None
    if ctx.settings.utility and event["passages"]:
        ps, missing = await probe_event(event, judge, store, last_try)
    p_no = None if missing else ps
    pool, pool_utility = None, None
    pool_raw = pooled(event, graded, judge, store)
    if pool_raw is not None:
        pool, pool_utility = on_both_scales(list(pool_raw), judge)
    measures = compute(
        grades, k, params, event.get("relevant_total"), p_no, utility, graded.repeats(),
        pool, pool_utility,
    )  # fmt: skip
    result = {
        "event_id": event["event_id"],
        "status": "done",
        "k": k,
        "labels": event["labels"],
        "grades": grades,
        "grade_source": graded.sources,
        "duplicate_of": graded.duplicate_of,
        "measures": measures,
        "judge": judge.identity.label,
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
    done = store.finish(
        event, result, grades, stripped, judge=judge.identity.label, series_counts=counts
    )
    if done and missing:  # once per event: a re-run finish is not done
        store.incr(f"udcg_missing{SEP}{missing}", day=event_day(event))
    if done and ctx.settings.second_judge_model:  # on a sample, beside the event (docs)
        await second_opinion(ctx.settings, store, event, graded, judge)
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
    if abandoned(exc_type):
        reason = "worker_died"
    store = current_context().store
    for ref in job.args[0]:
        store.fail(ref, reason, f"{exc_type.__name__ if exc_type else 'error'}: {exc}")
