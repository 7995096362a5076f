"""The sidecar API: accepts events at once, answers status and results, serves `/metrics`."""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from monitor.api import otlp
from monitor.api.auth import KeyRing, Principal
from monitor.api.explorer import explorer_ui, scope
from monitor.api.ingest import IngestWriter, sampled_in
from monitor.api.metrics import MetricsText
from monitor.explorer import SEARCH_HELP, SearchError, parse_search
from monitor.schemas import (
    FIELD_INVALID,
    LABEL_PATTERN,
    Accepted,
    BatchAccepted,
    ErrorResponse,
    EventPage,
    RetrievalBatch,
    RetrievalEvent,
    RetrievalResult,
)
from monitor.settings import Settings
from monitor.store import IngestItem, Store

log = logging.getLogger("ragmon.api")

RETRY_AFTER_S = 5
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
GC_YOUNG_THRESHOLD = 5000


class Refused(Exception):
    """A request refused before it reaches the store (status, reason label, detail)."""

    def __init__(self, status: int, reason: str, detail: Any, headers: dict | None = None) -> None:
        self.status, self.reason, self.detail, self.headers = status, reason, detail, headers


def _errors(exc: ValidationError) -> list[dict]:
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


def _body_schema(model: type[BaseModel]) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    }


def create_app(settings: Settings, store: Store | None = None) -> FastAPI:
    """Build the API for `settings`; `store` defaults to one connected to REDIS_URL."""
    store = store or Store.connect(settings)
    writer = IngestWriter(store)
    keys = KeyRing(settings.api_keys)
    metrics_keys = KeyRing(settings.metrics_api_keys)
    metrics_text = MetricsText(settings, store)
    span_map = otlp.SpanMap.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # What exists now (modules, routes, models) lives as long as the server: keep it out of
        # the cyclic GC's full collections, whose pauses made the ingest p99; and collect the
        # young generation every 5000 allocations, not 700: -15% CPU per event
        # (docs/performance.md).
        thresholds = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
        await writer.start()
        yield
        await writer.stop()
        metrics_text.close()
        gc.set_threshold(*thresholds)
        gc.unfreeze()

    app = FastAPI(
        title="ragmon",
        version="0.1.0",
        summary="Retrieval-quality monitoring for RAG applications.",
        description="Send each production retrieval (query + ranked passages); ragmon judges "
        "every passage 0-3 in the background and exports rank-aware quality measures to "
        "Prometheus. `202` means the event is durable in Redis.",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.writer = writer

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        writer.reject(exc.reason)
        media = getattr(request.state, "otlp", None)
        if media is not None:  # an OTLP exporter: a google.rpc.Status in its encoding
            body = otlp.encode_status(media, exc.status, str(exc.detail))
            return Response(body, exc.status, headers=exc.headers, media_type=media)
        return JSONResponse({"detail": exc.detail}, exc.status, headers=exc.headers)

    async def read_body(request: Request) -> bytes:
        limit = settings.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise Refused(413, "too_large", f"body over the limit of {limit} bytes")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise Refused(413, "too_large", f"body over the limit of {limit} bytes")
        except ClientDisconnect:  # gone, or closed past RAGMON_BODY_TIMEOUT_S (monitor.api.guard)
            raise Refused(408, "timeout", "request body not received in time") from None
        return bytes(body)

    def authorize(request: Request) -> Principal | None:
        if not keys.enabled:
            return None
        principal = keys.check(request.headers.get("authorization"))
        if principal is None:
            raise Refused(
                401,
                "unauthorized",
                "missing or invalid API key: send Authorization: Bearer <key>",
                {"WWW-Authenticate": "Bearer"},
            )
        return principal

    async def accept(
        request: Request, model: type[BaseModel]
    ) -> tuple[list[RetrievalEvent], list[IngestItem]]:
        principal = authorize(request)
        body = await read_body(request)
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as exc:
            raise Refused(422, "invalid", _errors(exc)) from None
        if isinstance(parsed, RetrievalBatch):
            events = parsed.events
            items = await admit(principal, events, lambda i: f"events[{i}].labels.app")
        else:
            assert isinstance(parsed, RetrievalEvent)
            events = [parsed]
            items = await admit(principal, events, lambda i: "labels.app")
        return events, items

    async def admit(
        principal: Principal | None, events: list[RetrievalEvent], where: Callable[[int], str]
    ) -> list[IngestItem]:
        """Valid events of any route → items to store: app binding, backpressure, sampling."""
        if principal is not None and principal.app is not None:
            for i, ev in enumerate(events):
                if ev.labels.app != principal.app:
                    raise Refused(
                        403,
                        "forbidden",
                        f"{where(i)}: this API key may only write app={principal.app}",
                    )
        try:
            depth = await writer.queue_depth()
        except Exception as exc:
            raise store_unavailable(exc) from exc
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
                    store.sealer.seal(ev.model_dump_json(exclude_none=True)),
                    sampled_out=not sampled_in(ev.event_id, settings.sample_rate),
                    app=ev.labels.app,
                )
            )
        return items

    def store_unavailable(exc: BaseException) -> Refused:
        if isinstance(exc, TimeoutError):
            why = f"no answer within RAGMON_STORE_TIMEOUT_S={settings.store_timeout_s:g} s"
        else:
            why = " ".join(str(exc).split()) or type(exc).__name__
        writer.log.warning("store", "event store unavailable, answering 503: %s", why)
        return Refused(
            503,
            "store_unavailable",
            "event store unavailable; retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )

    async def store_items(items: list[IngestItem]) -> list[tuple[str, bool]]:
        try:
            return await writer.submit(items)
        except Exception as exc:
            raise store_unavailable(exc) from exc

    responses: dict[int | str, dict[str, Any]] = {
        413: {"model": ErrorResponse, "description": "Body over RAGMON_MAX_BODY_BYTES."},
        422: {"model": ErrorResponse, "description": "Invalid event: `loc` names the field."},
        401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
        403: {"model": ErrorResponse, "description": "The key may not write this app label."},
        503: {"model": ErrorResponse, "description": "Queue over its limit: see Retry-After."},
    }

    @app.post(
        "/v1/retrievals",
        status_code=202,
        response_model=Accepted,
        responses={
            200: {"model": Accepted, "description": "Duplicate event_id: stored status."},
            **responses,
        },
        openapi_extra=_body_schema(RetrievalEvent),
        summary="Send one retrieval event",
        tags=["events"],
    )
    async def post_event(request: Request) -> JSONResponse:
        events, items = await accept(request, RetrievalEvent)
        ((status, created),) = await store_items(items)
        return JSONResponse(
            {"event_id": items[0].event_id, "status": status}, 202 if created else 200
        )

    @app.post(
        "/v1/retrievals/batch",
        status_code=202,
        response_model=BatchAccepted,
        responses=responses,
        openapi_extra=_body_schema(RetrievalBatch),
        summary="Send up to 1000 events; a bad item rejects the whole batch",
        tags=["events"],
    )
    async def post_batch(request: Request) -> JSONResponse:
        events, items = await accept(request, RetrievalBatch)
        results = await store_items(items)
        body = {
            "results": [
                {"event_id": it.event_id, "status": st}
                for it, (st, _) in zip(items, results, strict=True)
            ]
        }
        return JSONResponse(body, 202)

    @app.post(
        "/v1/traces",
        status_code=200,
        responses={
            200: {"description": "ExportTraceServiceResponse; partial success names rejections"},
            400: {"description": "Not an OTLP trace export (google.rpc.Status)."},
            415: {"description": "Not application/x-protobuf or application/json."},
            **{code: {"description": str(r["description"])} for code, r in responses.items()},
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {otlp.PROTOBUF: {}, otlp.JSON: {}},
                "description": "OTLP/HTTP ExportTraceServiceRequest, gzip or not.",
            }
        },
        summary="OTLP/HTTP traces: OpenInference retriever spans become events",
        tags=["events"],
    )
    async def post_traces(request: Request) -> Response:
        media = request.state.otlp = otlp.answer_type(request.headers.get("content-type"))
        principal = authorize(request)
        try:
            otlp.media_type(request.headers.get("content-type"))
            body = otlp.decompress(
                await read_body(request),
                request.headers.get("content-encoding"),
                settings.max_body_bytes,
            )
            mapped = otlp.map_request(otlp.decode(body, media), span_map)
        except otlp.OtlpError as exc:
            reason = "too_large" if exc.status == 413 else "invalid"
            raise Refused(exc.status, reason, str(exc)) from None
        app_from = ", ".join(span_map.app) or "no attribute"
        items = await admit(
            principal,
            mapped.events,
            lambda i: f"span {mapped.events[i].event_id}: labels.app (from {app_from})",
        )
        if items:
            await store_items(items)
        writer.count_spans(len(items), mapped.ignored, len(mapped.rejected))
        if mapped.rejected:  # retrievals that will not be monitored: the ingest alert sees them
            writer.reject("invalid", len(mapped.rejected))
        body = otlp.encode_response(media, len(mapped.rejected), mapped.message())
        return Response(body, 200, media_type=media)

    @app.get(
        "/v1/retrievals",
        response_model=EventPage,
        responses={
            400: {"model": ErrorResponse, "description": "A parameter that cannot be used."},
            401: responses[401],
            403: {"model": ErrorResponse, "description": "The key may not read this app."},
            503: {"model": ErrorResponse, "description": "Redis unreachable: retry later."},
        },
        summary="Search judged events by labels, time, measures, grade source or trace",
        description=SEARCH_HELP,
        tags=["events"],
    )
    async def search_events(request: Request) -> JSONResponse:
        principal = authorize(request)
        try:
            search = scope(parse_search(dict(request.query_params)), principal)
        except SearchError as exc:
            return JSONResponse({"detail": str(exc)}, 400)
        except PermissionError as exc:
            return JSONResponse({"detail": str(exc)}, 403)
        read = asyncio.to_thread(store.explore.search, search)
        try:
            page = await asyncio.wait_for(read, settings.store_timeout_s)
        except Exception as exc:
            raise store_unavailable(exc) from exc
        return JSONResponse(page.answer())

    @app.get(
        "/v1/retrievals/{event_id:path}",
        response_model=RetrievalResult,
        responses={
            404: {"model": ErrorResponse},
            401: responses[401],
            403: responses[403],
            503: {"model": ErrorResponse, "description": "Redis unreachable: retry later."},
        },
        summary="Status, grades and measures of one event of one app",
        description="Event ids are scoped by app: `app` is the key's app for a key bound to "
        "one, else the `app` query parameter (default `default`, as for a missing "
        "`labels.app`). Another app's event of the same id answers 404, as an unknown id.",
        tags=["events"],
    )
    async def get_event(
        event_id: str,
        request: Request,
        app: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
    ) -> JSONResponse:
        principal = authorize(request)
        bound = principal.app if principal is not None else None
        if bound is not None and app not in (None, bound):
            raise Refused(403, "forbidden", f"app: this API key may only read app={bound}")
        # Event ids are scoped by app: only this app's key is read, so another app's event of
        # the same id is neither found nor loaded (no status, no existence, no timing).
        read = asyncio.to_thread(store.result, bound or app or "default", event_id)
        try:
            result = await asyncio.wait_for(read, settings.store_timeout_s)
        except Exception as exc:
            raise store_unavailable(exc) from exc
        if result is None:
            return JSONResponse(
                {"detail": "unknown event_id (never received, or expired: RAGMON_RESULT_TTL_DAYS)"},
                404,
            )
        return JSONResponse(result)

    @app.get("/healthz", summary="The process is alive", tags=["operations"])
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", summary="Redis is reachable", tags=["operations"], responses={503: {}})
    async def readyz() -> JSONResponse:
        try:
            await asyncio.wait_for(asyncio.to_thread(store.ping), settings.store_timeout_s)
        except Exception as exc:
            error = " ".join(str(exc).split()) or type(exc).__name__
            return JSONResponse({"status": "unavailable", "error": error}, 503)
        return JSONResponse({"status": "ok"})

    @app.get(
        "/metrics",
        summary="Prometheus metrics of the whole fleet (one scrape target)",
        tags=["operations"],
        response_class=Response,
        responses={200: {"content": {PROMETHEUS_TEXT: {}}}},
    )
    async def metrics(request: Request) -> Response:
        if (
            metrics_keys.enabled
            and metrics_keys.check(request.headers.get("authorization")) is None
        ):
            return JSONResponse(
                {"detail": "missing or invalid metrics API key"},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            body = await metrics_text.body()
        except Exception as exc:
            return JSONResponse({"detail": f"event store unavailable: {exc}"}, 503)
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            return Response(body, media_type=PROMETHEUS_TEXT, headers=headers)
        return Response(await asyncio.to_thread(gzip.decompress, body), media_type=PROMETHEUS_TEXT)

    app.include_router(explorer_ui(settings, store, keys))

    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary,
                description=app.description, routes=app.routes,
            )  # fmt: skip
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (RetrievalEvent, RetrievalBatch):
                js = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(js.pop("$defs", {}))
                components[model.__name__] = js
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
