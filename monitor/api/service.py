"""Ingest without HTTP: a request's body and caller in, events stored (or a `Refused`) out.

The routes (`ragmon.api.routes`) only read the body and the API key and shape the answer;
everything a write decides (validation, the key's app binding, backpressure, sampling,
sealing, the OTLP mapping) is here, so it can be tested by calling it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ragmon.api import otlp
from ragmon.api.auth import Principal
from ragmon.api.batcher import IngestWriter, sampled_in
from ragmon.api.schemas import FIELD_INVALID, RetrievalBatch, RetrievalEvent
from ragmon.api.spans import SpanMap, map_request
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store

RETRY_AFTER_S = 5


class Refused(Exception):
    """A request refused before it reaches the store (status, reason label, detail). With a
    reason it counts in `ragmon_events_rejected_total{reason}`; a page's refusal has none."""

    def __init__(
        self, status: int, reason: str | None, detail: Any, headers: dict | None = None
    ) -> None:
        self.status, self.reason, self.detail, self.headers = status, reason, detail, headers


def validation_errors(exc: ValidationError) -> list[dict]:
    """Pydantic's errors as `{loc, msg, type}`; a check across fields (`schemas.invalid`) names
    its field in `loc`, read from the error's context."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc, msg, kind = ["body", *err["loc"]], err["msg"], err["type"]
        if kind == FIELD_INVALID:
            ctx = err.get("ctx") or {}
            loc.append(ctx["field"])
            msg, kind = ctx["detail"], "value_error"
        out.append({"loc": loc, "msg": msg, "type": kind})
    return out


def otlp_refused(exc: otlp.OtlpError) -> Refused:
    return Refused(exc.status, "too_large" if exc.status == 413 else "invalid", str(exc))


class IngestService:
    """The write path of every ingest route, from a body already read to the store."""

    def __init__(self, settings: Settings, store: Store, writer: IngestWriter) -> None:
        self.settings = settings
        self.store = store
        self.writer = writer
        self.span_map = SpanMap.from_settings(settings)

    async def events(
        self, principal: Principal | None, body: bytes, model: type[BaseModel]
    ) -> list[tuple[str, str, bool]]:
        """A `RetrievalEvent` or `RetrievalBatch` body stored: `(event_id, status, created)`
        per event, in order."""
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as exc:
            raise Refused(422, "invalid", validation_errors(exc)) from None
        if isinstance(parsed, RetrievalBatch):
            items = await self.admit(principal, parsed.events, lambda i: f"events[{i}].labels.app")
        else:
            assert isinstance(parsed, RetrievalEvent)
            items = await self.admit(principal, [parsed], lambda i: "labels.app")
        results = await self.write(items)
        return [
            (it.event_id, status, created)
            for it, (status, created) in zip(items, results, strict=True)
        ]

    async def traces(
        self, principal: Principal | None, body: bytes, media: str, encoding: str | None
    ) -> bytes:
        """An OTLP trace export (its content type already checked): the retriever spans stored,
        the spans counted by outcome; returns the `ExportTraceServiceResponse` in `media`."""
        try:
            body = otlp.decompress(body, encoding, self.settings.max_body_bytes)
            mapped = map_request(otlp.decode(body, media), self.span_map)
        except otlp.OtlpError as exc:
            raise otlp_refused(exc) from None
        app_from = ", ".join(self.span_map.app) or "no attribute"
        items = await self.admit(
            principal,
            mapped.events,
            lambda i: f"span {mapped.events[i].event_id}: labels.app (from {app_from})",
        )
        if items:
            await self.write(items)
        outcomes = {"event": len(items), "nested": mapped.nested, "ignored": mapped.ignored,
                    "rejected": len(mapped.rejected)}  # fmt: skip
        self.writer.count_spans(outcomes, mapped.repairs)
        if mapped.rejected:  # retrievals that will not be monitored: the ingest alert sees them
            self.writer.reject("invalid", len(mapped.rejected))
        return otlp.encode_response(media, len(mapped.rejected), mapped.message())

    async def admit(
        self,
        principal: Principal | None,
        events: list[RetrievalEvent],
        where: Callable[[int], str],
    ) -> list[IngestItem]:
        """Valid events of any route → items to store: app binding, backpressure, sampling."""
        settings = self.settings
        if principal is not None and principal.app is not None:
            for i, ev in enumerate(events):
                if ev.labels.app != principal.app:
                    raise Refused(
                        403,
                        "forbidden",
                        f"{where(i)}: this API key may only write app={principal.app}",
                    )
        try:
            depth = await self.writer.queue_depth()
        except Exception as exc:
            raise self.unavailable(exc) from exc
        if depth >= settings.queue_limit:
            raise Refused(
                503,
                "backpressure",
                f"queue is over its limit ({settings.queue_limit} jobs); retry later",
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        now = datetime.now(UTC)
        items = []
        for ev in events:
            ev.event_id = ev.event_id or uuid.uuid4().hex
            ev.timestamp = ev.timestamp or now
            items.append(
                IngestItem(
                    ev.event_id,
                    self.store.sealer.seal(ev.model_dump_json(exclude_none=True)),
                    sampled_out=not sampled_in(ev.event_id, settings.sample_rate),
                    app=ev.labels.app,
                )
            )
        return items

    async def write(self, items: list[IngestItem]) -> list[tuple[str, bool]]:
        """Store items durably: `(status, created)` per item, or a 503 `Refused`."""
        try:
            return await self.writer.submit(items)
        except Exception as exc:
            raise self.unavailable(exc) from exc

    def unavailable(self, exc: BaseException) -> Refused:
        """The 503 for a store that failed or timed out (logged, a line per kind at most)."""
        if isinstance(exc, TimeoutError):
            why = f"no answer within RAGMON_STORE_TIMEOUT_S={self.settings.store_timeout_s:g} s"
        else:
            why = " ".join(str(exc).split()) or type(exc).__name__
        self.writer.log.warning("store", "event store unavailable, answering 503: %s", why)
        return Refused(
            503,
            "store_unavailable",
            "event store unavailable; retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
