"""The drain job (`ragmon.workers.jobs.drain_pending`) against a real Redis, in this process:
it takes events from the apps in turn, judges and records each once, takes the events that
arrive while it runs (one fork, event loop and HTTP client for many single events), and ends
once nothing came for its idle time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from ragmon.api.schemas import RetrievalEvent
from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.workers import jobs
from ragmon.workers.context import build_context
from ragmon.workers.grading import judge_calls
from tests.support.events import make_event


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def post(store: Store, seed: int, app: str = "a") -> str:
    """One event written as the API writes a POST."""
    event = RetrievalEvent.model_validate(make_event(seed=seed, labels={"app": app}))
    event.timestamp = datetime.now(UTC)  # as the API stamps it
    item = IngestItem(event.event_id, event.model_dump_json(exclude_none=True), app=app)
    assert store.ingest([item]).outcomes == [("queued", True)]
    return event_ref(app, event.event_id)


def test_a_drain_job_takes_an_event_arriving_within_its_idle_time(store: Store) -> None:
    first = post(store, 1)
    ctx = build_context(store.settings, store)

    async def run() -> dict[str, int]:
        job = asyncio.ensure_future(jobs.drain_pending(ctx, idle_s=3.0))  # room for a slow box
        while store.statuses([first]) != ["done"]:  # its first event is done: it now idles
            assert not job.done(), job.result()
            await asyncio.sleep(0.02)
        later = await asyncio.to_thread(post, store, 2)
        counts = await job
        assert store.statuses([later]) == ["done"]
        return counts

    assert asyncio.run(run()) == {"done": 2}
    assert store.delivery.counts() == (0, 0)  # nothing pending or leased is left
    assert not store.delivery.due()


def test_a_drain_job_ends_once_its_idle_time_passes(store: Store) -> None:
    first = post(store, 1)
    counts = asyncio.run(jobs.drain_pending(build_context(store.settings, store), idle_s=0.0))
    assert counts == {"done": 1}
    assert store.statuses([first]) == ["done"]


def test_each_event_is_counted_once_when_two_drain_jobs_judge_it(store: Store) -> None:
    """A slow work horse whose lease ended and the job that took the event back both finish
    it: FINISH counts the first only."""
    ref = post(store, 1)
    claimed = store.delivery.claim(1, lease_s=0.0)  # a job that stalled past its lease
    assert claimed.refs == [ref]
    ctx = build_context(store.settings, store)
    assert asyncio.run(jobs.drain_pending(ctx, idle_s=0.0)) == {"done": 1}
    assert asyncio.run(jobs._one(ctx, store, ctx.make_judge(), store.settings.measure_params(),
                                 store.load_events([ref])[0], jobs.InFlight(),
                                 jobs.Decision(1.0))) == "skipped"  # fmt: skip
    assert store.counters()["events_labeled"] == 1
    assert store.delivery.counts() == (0, 0)


def test_decide_gives_the_ingest_sampling_probability(settings: Settings) -> None:
    from dataclasses import replace

    assert jobs.decide(replace(settings, sample_rate=0.25), {}).probability == 0.25
    own = {"inclusion_probability": 0.5}
    assert jobs.decide(settings, own).probability == 0.5


def test_a_drain_job_holds_about_twice_the_judge_concurrency_in_calls() -> None:
    """Few events in flight: a quiet app's event claimed at the next free slot waits behind
    that many judge calls, not behind a whole batch (issue 37: done within 5 s)."""
    slots = jobs.Slots(events=32, calls=256)
    assert slots.free() == 1  # nothing seen yet: one event, to learn its calls
    slots.take(20)
    assert slots.free() == 12  # 236 calls left at 20 an event
    for _ in range(12):
        slots.take(20)
    assert slots.free() == 0  # 260 calls held
    slots.give(20)
    assert slots.free() == 1
    small = jobs.Slots(events=3, calls=256)
    small.take(1)
    assert small.free() == 2  # the event cap still holds


@pytest.mark.parametrize(
    ("passages", "k", "listwise", "probes", "calls"),
    [(20, 10, False, False, 20), (30, 10, False, False, 20), (20, 10, True, False, 1),
     (45, 30, True, False, 3), (20, 10, False, True, 30), (0, 10, False, False, 1)],
)  # fmt: skip
def test_judge_calls_of_an_event(
    passages: int, k: int, listwise: bool, probes: bool, calls: int
) -> None:
    event = {"k": k, "passages": [{"id": str(i), "text": "t"} for i in range(passages)]}
    assert judge_calls(event, listwise, probes) == calls
