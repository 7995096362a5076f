"""The RQ job itself (`ragmon.workers.jobs._process`) against a real Redis, in this process: the
events that arrive while it runs, or shortly after its own are done, are judged by it (one fork,
event loop and HTTP client for many single events), and nothing is judged or counted twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from ragmon.api.schemas import RetrievalEvent
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.keys import event_ref
from ragmon.workers import jobs
from ragmon.workers.context import build_context
from tests.support.events import make_event
from tests.support.ingest import write_deferred


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, group_window_s=0.5))
    yield s
    s.client.close()


def single(store: Store, seed: int) -> str:
    """One event written as the API writes a single POST: left to the grouping window."""
    event = RetrievalEvent.model_validate(make_event(seed=seed, labels={"app": "a"}))
    event.timestamp = datetime.now(UTC)  # as the API stamps it
    item = IngestItem(event.event_id, event.model_dump_json(exclude_none=True), app="a")
    assert write_deferred(store, [item])[1] == [event_ref("a", event.event_id)]
    return event_ref("a", event.event_id)


def test_a_job_with_nothing_left_still_takes_an_event_arriving_within_its_linger(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "CLAIM_LINGER_S", 3.0)  # room for a slow machine
    first = single(store, 1)
    assert store.grouping.group([first]) == 1  # the window closes: the job we run below
    store.queue.empty()  # ... which a worker took from the queue
    ctx = build_context(store.settings, store)

    async def run() -> dict[str, int]:
        job = asyncio.ensure_future(jobs._process(ctx, [first]))
        while store.statuses([first]) != ["done"]:  # its own event is done: it now lingers
            assert not job.done(), job.result()
            await asyncio.sleep(0.02)
        later = await asyncio.to_thread(single, store, 2)
        counts = await job
        assert store.statuses([later]) == ["done"]
        return counts

    counts = asyncio.run(run())
    assert counts["done"] == 1 and counts["claimed"] == 1, counts
    assert store.grouping.sweep(age_s=0) == 0  # nothing left waiting, claimed or leased
    assert store.queue.count == 0  # no RQ job was made for the late event


def test_a_job_ends_once_its_linger_passes_with_nothing_new(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "CLAIM_LINGER_S", 0.0)
    first = single(store, 1)
    assert store.grouping.group([first]) == 1
    store.queue.empty()
    counts = asyncio.run(jobs._process(build_context(store.settings, store), [first]))
    assert counts["done"] == 1 and counts["claimed"] == 0, counts
    assert store.statuses([first]) == ["done"]
