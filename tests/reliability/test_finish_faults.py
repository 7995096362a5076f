"""Exactly once for the aggregates when Redis answers an error while an event is finished.

A drain job in this process on the test Redis; an error is injected at each step of FINISH in
turn (a key it writes holding another type, so Redis fails that write), the event is left to
its lease, the fault is removed, the lease ends and the next drain job finishes it. After every
fault the lifetime and the day's weighted histograms hold, for every event, exactly what
`GET /v1/retrievals/{id}` shows of its measures, weighted by 1 / its inclusion probability; the
per-day records and `events_labeled` count each event once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from ragmon.api.schemas import RetrievalEvent
from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES
from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store, scripts
from ragmon.store.finish import finish_call
from ragmon.workers import jobs
from ragmon.workers.context import build_context
from tests.support.events import make_event

APP = "shop"
BOUNDS = {f"retrieval_{m}": BUCKETS[m] for m in HISTOGRAM_MEASURES}
# The weights of events in one series under planned sampling: 1 / p moves with the plan, and an
# event of weight 1 after a fractional one failed HINCRBY half-way through FINISH.
PROBABILITIES = (1.0, 0.3, 1.0, 0.25)


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    env = {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "planned"}
    s = Store.connect(Settings.from_env(env, dotenv=None))
    yield s
    s.client.close()


def post(store: Store, seed: int, probability: float) -> str:
    """One event as the API stores it, with the inclusion probability the plan gave it."""
    event = RetrievalEvent.model_validate(make_event(seed=seed, labels={"app": APP}))
    event.timestamp = datetime.now(UTC)
    body = event.model_dump_json(exclude_none=True)
    body = f'{body[:-1]},"inclusion_probability":{probability!r}}}'
    item = IngestItem(event.event_id, body, app=APP, probability=probability)
    assert store.ingest([item]).outcomes == [("queued", True)]
    return str(event.event_id)


def drain(store: Store) -> dict[str, int]:
    return asyncio.run(jobs.drain_pending(build_context(store.settings, store), idle_s=0.0))


def assert_counted_once(store: Store, ids: list[str], probabilities: list[float]) -> None:
    """Every event is done and in the aggregates exactly once, with its weight."""
    found = [store.result(APP, i) for i in ids]
    assert [f["status"] if f else None for f in found] == ["done"] * len(ids)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    for where in (None, day):
        hists = store.histograms(BOUNDS, day=where)
        for m in HISTOGRAM_MEASURES:
            seen = [
                (f["measures"][m], 1 / p)
                for f, p in zip(found, probabilities, strict=True)
                if f is not None and f["measures"].get(m) is not None
            ]
            if not seen:
                continue
            (h,) = hists[f"retrieval_{m}"].values()
            assert h.count == pytest.approx(math.fsum(w for _, w in seen)), (where, m)
            assert h.sum == pytest.approx(math.fsum(v * w for v, w in seen), abs=1e-9), (where, m)
    assert len(store.day_events(day)) == len(ids)
    assert store.counters()["events_labeled"] == len(ids)


def test_events_of_moving_weights_are_each_counted_once(store: Store) -> None:
    ids = [post(store, seed, p) for seed, p in enumerate(PROBABILITIES)]
    assert drain(store) == {"done": len(ids)}
    assert_counted_once(store, ids, list(PROBABILITIES))


def _finish_keys(store: Store, event: dict, result: dict, grades: list) -> list[str]:
    call = finish_call(store.keys, store.settings, store.bounds, event, result, grades,
                       time.time())  # fmt: skip
    return list(call.keys)


@pytest.mark.parametrize("step", scripts.FINISH.keys)
def test_an_error_at_any_step_of_finish_loses_and_doubles_nothing(store: Store, step: str) -> None:
    """The key FINISH writes at `step` holds another type while the third event is finished:
    Redis answers an error, the event is left to its lease; once the fault is gone and the
    lease has ended, the next drain job counts it once."""
    ids = [post(store, seed, p) for seed, p in enumerate(PROBABILITIES[:2])]
    assert drain(store) == {"done": 2}
    ids.append(post(store, 2, PROBABILITIES[2]))
    real_finish = store.finish
    faults: list[str] = []

    def faulty(event, result, grades, *args, **kwargs):  # type: ignore[no-untyped-def]
        """FINISH with the key of `step` holding another type, put back right after."""
        key = _finish_keys(store, event, result, grades)[scripts.FINISH.keys.index(step)]
        held = store.client.exists(key)
        if held:
            store.client.rename(key, f"{key}:aside")
        if step == "day_events":  # a list: a string is the wrong type for it
            store.client.set(key, "not a " + step)
        else:  # a list is the wrong type for every other key FINISH writes
            store.client.rpush(key, "not a " + step)
        try:
            return real_finish(event, result, grades, *args, **kwargs)
        except Exception as exc:
            faults.append(type(exc).__name__)
            raise
        finally:
            store.client.delete(key)
            if held:
                store.client.rename(f"{key}:aside", key)

    store.finish = faulty  # type: ignore[method-assign]
    assert drain(store) == {"error": 1}  # "left to its lease ... ResponseError"
    store.finish = real_finish  # type: ignore[method-assign]
    assert faults == ["ResponseError"]
    ref = event_ref(APP, ids[2])
    assert store.statuses([ref]) == ["queued"]  # nothing of it was recorded
    store.client.zadd(store.keys.leased, {ref: 0})  # its lease ends
    assert drain(store) == {"done": 1}
    assert_counted_once(store, ids, list(PROBABILITIES[:3]))
