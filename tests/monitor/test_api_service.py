"""The ingest service called directly, with no HTTP server: bodies in, events in the real Redis
(or a `Refused` with the status and reason a route would answer)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragmon.api.auth import Principal
from ragmon.api.batcher import IngestWriter
from ragmon.api.otlp import PROTOBUF
from ragmon.api.schemas import RetrievalBatch, RetrievalEvent
from ragmon.api.service import (
    INLINE_MAX_BYTES,
    RETRY_AFTER_S,
    IngestService,
    Refused,
    more_items_than,
    prepare_events,
)
from ragmon.settings import Settings
from ragmon.store import Store
from tests.support.events import make_event
from tests.support.spans import event_id, export, retriever_attrs, span
from tests.support.stack import free_port


def run(settings: Settings, work: Callable[[IngestService], Awaitable[Any]]) -> Any:
    """`work(service)` with the service's writer running, as in the app's lifespan."""
    store = Store.connect(settings)

    async def go() -> Any:
        writer = IngestWriter(store)
        await writer.start()
        service = IngestService(settings, store, writer)
        try:
            return await work(service)
        finally:
            service.close()
            await writer.stop()

    try:
        return asyncio.run(go())
    finally:
        store.close()


def stored(settings: Settings, app: str, event_id: str) -> dict | None:
    """What `GET /v1/retrievals/{event_id}?app=` would answer, read from the store."""
    store = Store.connect(settings)
    try:
        return store.result(app, event_id)
    finally:
        store.close()


def body(*events: dict) -> bytes:
    return json.dumps({"events": list(events)}).encode()


def test_a_batch_is_stored_and_a_repeat_is_not_created_again(settings: Settings) -> None:
    events = [make_event(seed=i) for i in range(3)]

    async def work(service: IngestService) -> tuple[list, list]:
        first = await service.events(None, body(*events), RetrievalBatch)
        again = await service.events(None, json.dumps(events[1]).encode(), RetrievalEvent)
        return first, again

    first, again = run(settings, work)
    assert first == [(e["event_id"], "queued", True) for e in events]
    assert again == [(events[1]["event_id"], "queued", False)]
    assert (stored(settings, "test", events[2]["event_id"]) or {}).get("status") == "queued"


def test_an_invalid_event_is_a_422_naming_its_field(settings: Settings) -> None:
    bad = make_event(k=0)

    with pytest.raises(Refused) as refused:
        run(settings, lambda service: service.events(None, body(make_event(), bad), RetrievalBatch))
    assert (refused.value.status, refused.value.reason) == (422, "invalid")
    (error,) = refused.value.detail
    assert error["loc"][:4] == ["body", "events", 1, "k"]


def items(n: int, item: bytes = b"{}") -> bytes:
    return b'{"events": [' + b", ".join([item] * n) + b"]}"


@pytest.mark.parametrize(
    ("body", "over"),
    [
        (items(1000), False),
        (items(1001), True),
        (b'{"events":[]}', False),
        (items(1001, b"1"), True),  # any item counts, valid or not
        (items(1000, b'{"q": "a, b, [c", "p": [{"x": 1}, {"y": [2, 3]}]}'), False),  # nested
        (items(1001, b'"a\\", b"'), True),  # an escaped quote does not end a string
        (items(1000, b'"\\\\", "x"'), True),  # an escaped backslash does: 2,000 items
        (b'{"other": {' + b", ".join([b'"k": 1'] * 3000) + b"}}", False),  # an object's keys
        (b"[" + b", ".join([b"1"] * 3000) + b"]", False),  # not in a top-level object
        (b'{"events": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", False),  # left to the parser
        (b"not json, , , ,", False),
    ],
)
def test_a_batch_over_the_limit_is_told_from_its_commas(body: bytes, over: bool) -> None:
    assert more_items_than(body, 1000) is over


def big_events(n: int) -> bytes:
    """`n` events of 2 passages of 1.5 KB: over `INLINE_MAX_BYTES` from 80 on."""
    event = make_event(n=2, k=1)
    for passage in event["passages"]:
        passage["text"] = "x" * 1500
    return body(*(dict(event, event_id=f"big-{i}") for i in range(n)))


def test_a_large_batch_over_the_limit_is_refused_before_its_events_are_built(
    settings: Settings,
) -> None:
    """Parsing a 32 MB batch of 1,001 events whole, only to refuse it, took the decoding
    process +180 MiB; refused from its commas it builds nothing (before: every event's text,
    as Python strings, then the refusal)."""
    import tracemalloc

    batch = big_events(1001)
    assert len(batch) > INLINE_MAX_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(Refused) as refused:
            prepare_events(settings, batch, RetrievalBatch, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(batch) / 10, peak  # the events' text alone is most of the body
    assert (refused.value.status, refused.value.reason) == (422, "invalid")
    (error,) = refused.value.detail
    assert error["loc"] == ["body", "events"] and error["type"] == "too_long"
    assert "at most 1000 events" in error["msg"]


@pytest.mark.process  # the decoding process
def test_a_large_batch_of_1000_events_is_stored_whole(settings: Settings) -> None:
    batch = big_events(1000)
    assert len(batch) > INLINE_MAX_BYTES
    stored_ = run(settings, lambda service: service.events(None, batch, RetrievalBatch))
    assert [created for _, _, created in stored_] == [True] * 1000


def test_a_key_bound_to_an_app_writes_that_app_only(settings: Settings) -> None:
    bot = Principal(app="support-bot")
    mine = make_event(labels={"app": "support-bot"})
    other = make_event(seed=1, labels={"app": "billing"})

    async def work(service: IngestService) -> Any:
        written = await service.events(bot, json.dumps(mine).encode(), RetrievalEvent)
        try:
            await service.events(bot, body(mine, other), RetrievalBatch)
        except Refused as exc:
            return written, exc
        raise AssertionError("another app's event was accepted")

    written, refused = run(settings, work)
    assert written == [(mine["event_id"], "queued", True)]
    assert (refused.status, refused.reason) == (403, "forbidden")
    assert refused.detail.startswith("events[1].labels.app:")
    assert stored(settings, "billing", other["event_id"]) is None


@pytest.mark.process
def test_a_trace_export_stores_its_retriever_spans_and_answers_otlp(settings: Settings) -> None:
    good = span(retriever_attrs(query="how do I reset my password"))
    bad = span(retriever_attrs(query=None))
    request = export([good, span({"openinference.span.kind": "LLM"}), bad])

    answer = run(
        settings,
        lambda service: service.traces(None, request.SerializeToString(), PROTOBUF, None),
    )
    response = ExportTraceServiceResponse()
    response.ParseFromString(answer)
    assert response.partial_success.rejected_spans == 1
    assert "input.value: missing" in response.partial_success.error_message
    assert (stored(settings, "support-bot", event_id(good)) or {}).get("status") == "queued"
    assert stored(settings, "support-bot", event_id(bad)) is None


@pytest.mark.process
def test_a_body_that_is_not_gzip_is_a_400(settings: Settings) -> None:
    with pytest.raises(Refused) as refused:
        run(settings, lambda service: service.traces(None, b"plain", PROTOBUF, "gzip"))
    assert (refused.value.status, refused.value.reason) == (400, "invalid")


def test_an_unreachable_store_is_a_503_to_retry() -> None:
    gone = Settings.from_env(
        {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "RAGMON_STORE_TIMEOUT_S": "2"},
        dotenv=None,
    )
    with pytest.raises(Refused) as refused:
        run(gone, lambda service: service.events(None, body(make_event()), RetrievalBatch))
    assert (refused.value.status, refused.value.reason) == (503, "store_unavailable")
    assert refused.value.headers == {"Retry-After": str(RETRY_AFTER_S)}
