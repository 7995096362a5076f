"""The drain job: take pending events from the apps in turn, judge them, record each once.

One RQ job (`drain`, no arguments) runs for up to a minute in one event loop and one HTTP
client: it claims a batch under leases (`Store.delivery`), judges the events concurrently,
records each (FINISH, FAIL, or RETRY after a passing judge failure), renews its leases, and
claims again as slots free up. The delivery path as a whole: CONTRIBUTING.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from asyncio import FIRST_COMPLETED
from collections import Counter
from dataclasses import dataclass

from ragmon.core.measures import MeasureParams, compute
from ragmon.core.wire import SEP, Status
from ragmon.preflight import judge_url
from ragmon.settings import Settings
from ragmon.store import Store, event_day, ref_of
from ragmon.store.apart import Apart
from ragmon.store.delivery import LEASE_S, RELEASE_ATTEMPT, RETRY_DELAYS_S
from ragmon.store.finish import inclusion_probability
from ragmon.store.records import Result, StoredEvent, without_texts
from ragmon.workers.context import WorkerContext, current_context
from ragmon.workers.evaluations import Evaluations
from ragmon.workers.grading import (
    InFlight,
    grade_event,
    judge_calls,
    on_both_scales,
    pooled,
    probe_event,
)
from ragmon.workers.judges.accounting import paying
from ragmon.workers.judges.base import Judge, JudgeError
from ragmon.workers.judges.cache import JudgmentCache, scope
from ragmon.workers.second import second_opinion

log = logging.getLogger("ragmon.worker")

DRAIN_MAX_S = 60.0  # a drain job claims for this long, then ends: a warm shutdown waits for it
# With nothing to take, a drain job keeps looking this long before it ends: single events
# arriving a few per second then share one fork, event loop and HTTP client
# (docs/performance.md, "Trickle traffic").
IDLE_S = 2.0
POLL_S = 0.1  # how often a drain job with free slots looks for new events
RENEW_EVERY_S = LEASE_S / 3
# Judge calls a drain job keeps asked for (running, or waiting for one of the judge's
# RAGMON_JUDGE_CONCURRENCY slots), as a multiple of that concurrency: enough that the judge
# never waits for a claim, few enough that an event claimed now (another app's turn) waits
# behind that many calls, not behind RAGMON_JOB_BATCH_SIZE events' (CONTRIBUTING.md, "Fair
# across apps").
CALLS_AHEAD = 2


@dataclass
class Slots:
    """How many events a drain job may claim now: at most `events` in flight, and about
    `calls` judge calls (`judge_calls` of each, an upper bound). It learns an event's calls
    from the events it took: its first claim takes one event."""

    events: int
    calls: int
    held_events: int = 0
    held_calls: int = 0
    seen_events: int = 0
    seen_calls: int = 0

    @classmethod
    def of(cls, settings: Settings) -> Slots:
        return cls(settings.job_batch_size, CALLS_AHEAD * settings.judge_concurrency)

    def free(self) -> int:
        if self.held_events >= self.events or self.held_calls >= self.calls:
            return 0
        if not self.seen_events:
            return 1
        per_event = self.seen_calls / self.seen_events
        fit = max(1, math.ceil((self.calls - self.held_calls) / per_event))
        return min(self.events - self.held_events, fit)

    def take(self, calls: int) -> None:
        self.held_events += 1
        self.held_calls += calls
        self.seen_events += 1
        self.seen_calls += calls

    def give(self, calls: int) -> None:
        self.held_events -= 1
        self.held_calls -= calls


@dataclass(frozen=True)
class Decision:
    """What `decide` says of a claimed event: the probability with which it was chosen for
    judging (kept in its per-day record for the corrected estimates)."""

    probability: float


def decide(settings: Settings, event: StoredEvent) -> Decision:
    """The one step between loading a claimed event and judging it, where judge money is
    decided. Today every claimed event is judged: events are sampled at ingest, uniformly at
    RAGMON_SAMPLE_RATE (`ragmon.api.batcher.sampled_in`), which is their probability."""
    return Decision(inclusion_probability(settings, event))


def drain() -> dict[str, int]:
    """RQ entry point (sync: RQ forks a work horse per job; the event loop lives in the job)."""
    return asyncio.run(drain_pending(current_context()))


async def drain_pending(
    ctx: WorkerContext, max_s: float = DRAIN_MAX_S, idle_s: float = IDLE_S
) -> dict[str, int]:
    """Claim, judge and record events until `max_s` has passed or nothing came for `idle_s`;
    returns counts by outcome."""
    store, delivery, settings = ctx.store, ctx.store.delivery, ctx.settings
    delivery.started()
    judge = ctx.make_judge()
    out = Evaluations(settings, store) if settings.otlp_export_endpoint else None
    params = settings.measure_params()
    inflight = InFlight()  # a passage repeated across the job's events is judged once
    tasks: dict[asyncio.Future[str], StoredEvent] = {}
    leases: dict[str, float] = {}  # ref -> the end of its lease, as this job last set it
    calls: dict[str, int] = {}  # ref -> its judge calls, held in `slots`
    slots = Slots.of(settings)
    listwise, probes = settings.judge_mode == "listwise", settings.utility
    counts: Counter[str] = Counter()
    lasting: dict[str, str] = {}
    began = busy_at = renewed_at = time.monotonic()
    apart = asyncio.ensure_future(retry_apart(store, judge, slots.calls))
    taking, left = True, False
    try:
        while True:
            now = time.monotonic()
            taking = taking and now - began < max_s
            while taking and (room := slots.free()) > 0:  # small claims: the apps in turn
                claimed = delivery.claim(room)
                left = claimed.left
                if left:  # a backlog: an idle worker may join
                    delivery.wake()
                for ref, event in zip(claimed.refs, store.load_events(claimed.refs), strict=True):
                    if event is None:  # expired meanwhile: its lease ends, CLAIM drops it
                        continue
                    leases[ref] = claimed.lease_end
                    calls[ref] = judge_calls(event, listwise, probes)
                    slots.take(calls[ref])
                    decision = decide(settings, event)
                    release = event["_attempts"] >= RELEASE_ATTEMPT  # measure what it has
                    work = _one(ctx, store, judge, params, event, inflight, decision, release, out)
                    tasks[asyncio.ensure_future(work)] = event
                if len(claimed.refs) < room:
                    break
            if tasks:
                busy_at = now
            elif not taking or now - busy_at > idle_s:
                break
            else:
                await asyncio.sleep(POLL_S)
                continue
            finished, _ = await asyncio.wait(tasks, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for task in finished:
                event = tasks.pop(task)
                ref = ref_of(event)
                lease_end = leases.pop(ref)
                slots.give(calls.pop(ref))
                outcome = task.exception() or task.result()
                if isinstance(outcome, JudgeError) and outcome.retryable:
                    text = " ".join(f"{outcome.reason}: {outcome}".split())
                    counts["retry"] += bool(delivery.retry(ref, lease_end, text))
                    if taking:  # the judge is failing for now: take no more
                        why, url = text[:200], judge_url(settings)
                        log.warning(
                            "judge failing (%s, judge endpoint %s): events go back to pending "
                            "for a retry", why, url,
                        )  # fmt: skip
                    taking = False
                elif isinstance(outcome, JudgeError):
                    counts["failed"] += store.fail(ref, outcome.reason, str(outcome))
                    lasting.setdefault(outcome.reason, " ".join(str(outcome).split())[:200])
                elif isinstance(outcome, BaseException):
                    log.warning("event %s left to its lease (back within %g s): %r",
                                ref, LEASE_S, outcome)  # fmt: skip
                    counts["error"] += 1
                else:
                    counts[str(outcome)] += 1
            if leases and time.monotonic() - renewed_at > RENEW_EVERY_S:
                renewed_at = time.monotonic()
                end = delivery.renew(list(leases))
                leases = dict.fromkeys(leases, end)
    finally:
        try:
            counts.update(await apart)
        finally:  # on an error of the job itself, the leases bring its events back
            await judge.aclose()
            if out is not None:  # bounded: a receiver that is down costs at most its wait
                out.close()
    if lasting:  # say it in the log too, not only in GET: a bad key fails every event
        log.warning(
            "%d events failed for good (%s); `ragmon requeue-failed` once it is fixed",
            counts["failed"],
            "; ".join(f"{reason}: {text}" for reason, text in lasting.items()),
        )
    if left and delivery.due():  # ended with work left: another drain job takes over
        delivery.wake()
    return dict(counts)


async def retry_apart(store: Store, judge: Judge, n: int) -> Counter[str]:
    """Grade up to `n` due passages retried apart from their events (`Store.apart`), at once,
    into the judgment cache; one failing for now again waits for its next delay."""
    items = [] if judge.per_call else store.apart.claim(n)
    return Counter(await asyncio.gather(*(_apart(store, judge, item) for item in items)))


async def _apart(store: Store, judge: Judge, item: Apart) -> str:
    who = judge.identity
    got: list[int | None] = [None]
    if (item.model, item.version) == (who.model, who.cache_version):  # else: no use now
        try:
            with paying(item.app):
                got = list(await judge.grade(item.query, [(item.passage_id, item.text)]))
        except JudgeError as exc:
            if exc.retryable and store.apart.again(item, RETRY_DELAYS_S):
                return "apart_retry"
        except Exception as exc:  # noqa: BLE001 - one passage must not end the job
            log.warning("a passage retried apart was dropped: %r", exc)
    store.apart.done(item)
    if got[0] is None:
        return "apart_dropped"
    JudgmentCache(store, who, item.scope).keep(item.query, [(item.text, got[0])])
    return "apart_graded"


async def _one(
    ctx: WorkerContext,
    store: Store,
    judge: Judge,
    params: MeasureParams,
    event: StoredEvent,
    inflight: InFlight,
    decision: Decision,
    release: bool = False,
    out: Evaluations | None = None,
) -> str:
    """Judge one event, measure it and record it. From its `RELEASE_ATTEMPT`-th try on
    (`release`) a passing judge failure leaves the passages it hit unjudged and the event is
    measured; with nothing graded it goes on retrying (and fails after the last try)."""
    graded = await grade_event(event, judge, store, inflight, release)
    grades, utility = on_both_scales(graded.grades, judge)
    k = event["k"]
    ps: list[float | None] | None = None
    missing = None
    if ctx.settings.utility and event["passages"]:
        ps, missing = await probe_event(event, judge, store, release)
    p_no = None if missing else ps
    pool, pool_utility = None, None
    pool_raw = pooled(event, graded, judge, store)
    if pool_raw is not None:
        pool, pool_utility = on_both_scales(list(pool_raw), judge)
    measures = compute(
        grades, k, params, event.get("relevant_total"), p_no, utility, graded.repeats(),
        pool, pool_utility,
    )  # fmt: skip
    result: Result = {
        "event_id": event["event_id"],
        "status": Status.DONE,
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
    stripped = None if ctx.settings.store_text else without_texts(event)
    counts = {f"passages_unjudged{SEP}{reason}": n for reason, n in graded.unjudged.items()}
    done = store.finish(
        event,
        result,
        grades,
        stripped,
        judge=judge.identity.label,
        series_counts=counts,
        inclusion=decision.probability,
    )
    if done and out is not None:
        out.send(event, result)
    if done:  # its app's first judged event, or a summary gone stale: summarized soon
        store.estimates.freshen(event["labels"]["app"], time.time())
    if done and graded.apart:  # measured once as it is: the passages go on apart
        who, where = judge.identity, scope(store, event)
        for i in graded.apart:
            p = event["passages"][i]
            item = Apart(event["labels"]["app"], where, who.model, who.cache_version,
                         event["query"], p["id"], p["text"])  # fmt: skip
            store.apart.add(item, RETRY_DELAYS_S)
    if done and missing:  # once per event: a re-run finish is not done
        store.incr(f"udcg_missing{SEP}{missing}", day=event_day(event))
    if done and ctx.settings.second_judge_model:  # on a sample, beside the event (docs)
        await second_opinion(ctx.settings, store, event, graded, judge)
    return "done" if done else "skipped"
