"""A large request written in short calls (`ragmon.store.staged`), against a real Redis: it
stores what one INGEST call stores, answers as it does, and when it fails between its calls,
runs past its deadline, meets an event stored meanwhile or an app at its limit, it stores
nothing (its staged keys expire)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis

from ragmon.api.batcher import SMALL_REQUEST, IngestWriter
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.fields import Field
from ragmon.store.records import signal_record
from ragmon.store.staged import CHUNK_EVENTS

N = 2 * CHUNK_EVENTS + 30  # three STAGE calls
QUERIES = [("what is a flea", 3, ["a", "b", "c", "d"], [9.0, 7.5, 7.0, 2.0]),
           ("empty", 5, [], []), ("negative", 2, ["p", "q"], [-0.5, -3.0])]  # fmt: skip


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, queue_limit=10_000, max_series_per_app=3))
    yield s
    s.client.close()


def items(n: int = N, app: str = "shop", prefix: str = "e") -> list[IngestItem]:
    """`n` events over five series (two past the app's budget of three), two days, one in
    seven sampled out."""
    out = []
    for i in range(n):
        query, k, ids, scores = QUERIES[i % len(QUERIES)]
        series = f"{app}|docs{i % 5}|bm25|default"
        day = ("2026-11-20", "2026-11-21")[i % 2]
        out.append(IngestItem(f"{prefix}{i}", json.dumps({"i": i}), i % 7 == 3, app, series,
                              0.5, day, signal_record(query, k, ids, scores)))  # fmt: skip
    return out


def snapshot(client: redis.Redis) -> dict[str, Any]:
    """Every key's value, without what moves with the clock (receipt times, scores that are
    times, the ledger's time-slotted keys); numbers as floats (sums added in another order)."""

    def value(v: bytes) -> Any:
        try:
            return pytest.approx(float(v), rel=1e-12)
        except ValueError:
            return v

    out: dict[str, Any] = {}
    for key in sorted(k.decode() for k in client.keys("*")):
        kind = client.type(key).decode()
        if ":lg:" in key or key.endswith(":ids"):
            continue
        if kind == "hash":
            fields = client.hgetall(key)
            out[key] = {f: value(v) for f, v in fields.items() if f != Field.RECEIVED.encode()}
        elif kind == "zset":
            out[key] = sorted(client.zrange(key, 0, -1))
        elif kind == "string":
            out[key] = client.get(key)
        else:
            out[key] = kind
    return out


def staged(store: Store, batch: list[IngestItem], deadline: float = 0.0, **patch: Any) -> Any:
    """`Store.ingest_staged`; `patch` wraps its scripts' callables (`_stage`, `_commit`)."""
    writer = store._staged
    saved = {name: getattr(writer, name) for name in patch}
    for name, wrap in patch.items():
        setattr(writer, name, wrap(saved[name]))
    try:
        return store.ingest_staged(batch, deadline)
    finally:
        for name, real in saved.items():
            setattr(writer, name, real)


def nothing_stored(store: Store, before: dict[str, Any]) -> None:
    """No key but the staged ones (expiring) and the series budget's (staging admits the
    series, as if seen) differs from `before`."""
    after = snapshot(store.client)
    staged_keys = [k for k in after if ":stage:" in k]
    budget = {store.keys.series, store.keys.series_per_app}
    kept = {k: v for k, v in after.items() if k not in staged_keys and k not in budget}
    assert kept == {k: v for k, v in before.items() if k not in budget}
    ttl = store.settings.store_timeout_s * 2 + 1
    assert all(0 < store.client.ttl(k) <= ttl for k in staged_keys)


def test_a_staged_write_stores_and_answers_what_one_ingest_call_does(store: Store) -> None:
    batch = items()
    batch += [batch[5], batch[40]]  # repeats within the request
    store.ingest(items(3, prefix="e"), enqueue=False)  # stored before: answered their status
    store.client.delete(store.keys.drain_wanted)
    plain = store.ingest(batch, sizes=[len(batch)], enqueue=False).request(0, len(batch))
    want = snapshot(store.client)
    store.client.flushall()
    store.ingest(items(3, prefix="e"), enqueue=False)
    store.client.delete(store.keys.drain_wanted)
    written = staged(store, batch, time.time() + 30)
    assert written.request(0, len(batch)) == plain
    assert written.wake
    assert snapshot(store.client) == want
    assert not store.client.keys("*:stage:*")


def between_chunks(fault: Callable[[int], None]) -> Callable[[Any], Any]:
    """A wrapper of STAGE's callable that calls `fault(call number)` before each call."""

    def wrap(stage: Any) -> Any:
        calls = [0]

        def call(*args: Any) -> Any:
            calls[0] += 1
            fault(calls[0])
            return stage(*args)

        return call

    return wrap


def test_a_redis_error_between_chunks_stores_nothing(store: Store) -> None:
    before = snapshot(store.client)

    def fail_third(n: int) -> None:
        if n == 3:
            raise redis.ConnectionError("injected between chunks")

    with pytest.raises(redis.ConnectionError):
        staged(store, items(), time.time() + 30, _stage=between_chunks(fail_third))
    nothing_stored(store, before)
    assert store.client.keys("*:stage:*"), "the first chunks were staged, and left to expire"


def test_a_commit_past_the_deadline_stores_nothing(store: Store) -> None:
    """The API answered 503 at the deadline: Redis refuses the commit that comes later."""
    before = snapshot(store.client)
    deadline = time.time() + 0.5

    def slow_last(n: int) -> None:
        if n == 3:  # staged before the deadline, committed after it
            time.sleep(max(0.0, deadline - time.time()) + 0.1)

    with pytest.raises(redis.ResponseError, match="^DEADLINE"):
        staged(store, items(), deadline, _stage=between_chunks(slow_last))
    nothing_stored(store, before)


def test_past_the_deadline_it_stops_staging(store: Store) -> None:
    with pytest.raises(TimeoutError):
        staged(store, items(), time.time() - 1)
    assert not store.client.keys("*")


def test_an_event_stored_meanwhile_refuses_the_request_whole(store: Store) -> None:
    """Another write (a retry racing its original) stores one of the request's events between
    its staging and its commit: the commit writes nothing; a retry then answers its status."""
    batch = items()
    before = snapshot(store.client)

    def wrap(commit: Any) -> Any:
        def call(*args: Any) -> Any:
            store.ingest([batch[150]], enqueue=False)
            return commit(*args)

        return call

    with pytest.raises(redis.ResponseError, match="^STAGED"):
        staged(store, batch, time.time() + 30, _commit=wrap)
    assert (
        set(snapshot(store.client))
        - set(before)
        - {k for k in store.client.keys("*") if b":stage:" in k}
    )  # the other write's keys
    assert [k for k in store.client.keys("*:ev:*")] == [store.keys.event(batch[150].ref).encode()]
    retried = staged(store, batch, time.time() + 30).request(0, len(batch))
    assert retried[150] == (batch[150].status, False)
    assert sum(created for _, created in retried) == len(batch) - 1


def test_an_app_at_its_limit_refuses_the_request_whole(store: Store) -> None:
    full = Store(store.client, replace(store.settings, queue_limit=4))
    full.ingest(items(5, app="shop", prefix="x"))  # four to judge
    before = snapshot(store.client)
    written = staged(full, items(), time.time() + 30)
    assert all(o == written.outcomes[0] for o in written.outcomes)
    assert written.request(0, N).app == "shop"  # type: ignore[union-attr]
    nothing_stored(store, before)


def test_the_writer_stages_a_large_request_and_batches_small_ones(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = store.ingest_staged

    def spy(batch: list[IngestItem], deadline: float) -> Any:
        calls.append(len(batch))
        return real(batch, deadline)

    monkeypatch.setattr(store, "ingest_staged", spy)

    async def go() -> list[Any]:
        writer = IngestWriter(store)
        await writer.start()
        try:
            large = items(SMALL_REQUEST + 1)
            return await asyncio.gather(writer.submit(large), writer.submit(items(3, prefix="s")))
        finally:
            await writer.stop()

    large, small = asyncio.run(go())
    assert calls == [SMALL_REQUEST + 1]
    assert large == [("sampled_out" if i % 7 == 3 else "queued", True) for i in range(51)]
    assert small == [("queued", True)] * 3
    assert store.client.hget(store.keys.counters, "events_received") == b"54"
