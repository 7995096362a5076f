"""The sidecar API: accepts events at once, answers status and results, serves `/metrics`.

`create_app` wires the parts: the routes (`routes`, `explorer`), the ingest decisions
(`service`), the batched Redis writes (`ingest`) and the `/metrics` renderer (`metrics`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Scope

from ragmon.api import otlp
from ragmon.api.auth import KeyRing
from ragmon.api.batcher import IngestWriter
from ragmon.api.bodies import WholeBodies
from ragmon.api.browser import Browser
from ragmon.api.grades import GradeService
from ragmon.api.hosts import HostCheck
from ragmon.api.metrics import MetricsText
from ragmon.api.routes import add_event_routes, add_operation_routes
from ragmon.api.sampler import Sampler
from ragmon.api.schemas import GradeBatch, RetrievalBatch, RetrievalEvent
from ragmon.api.service import IngestService, Refused
from ragmon.api.ui import explorer_ui, pages_child
from ragmon.core.clock import Clock
from ragmon.settings import Settings
from ragmon.store import Store

GC_YOUNG_THRESHOLD = 5000


def create_app(settings: Settings, store: Store | None = None, clock: Clock = time.time) -> FastAPI:
    """Build the API for `settings`; `store` defaults to one connected to REDIS_URL; `clock`:
    the time the sampling planner reads (`ragmon.core.clock`)."""
    store = store or Store.connect(settings)
    writer = IngestWriter(store)
    service = IngestService(settings, store, writer, sampler=Sampler(settings, store, clock))
    keys = KeyRing(settings.api_keys)
    metrics_text = MetricsText(settings, store)
    overview_pages = pages_child()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # What exists now (modules, routes, models) lives as long as the server: keep it out of
        # the cyclic GC's full collections, whose pauses made the ingest p99; and collect the
        # young generation less often than the default, which costs CPU on every event
        # (docs/performance.md).
        thresholds = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
        await writer.start()
        service.sampler.start()
        service.held.start()
        yield
        await service.held.stop()
        await service.sampler.stop()
        await writer.stop()
        await service.aclose()
        metrics_text.close()
        overview_pages.close()
        service.close()
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
    app.state.sampler = service.sampler

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        if exc.reason is not None:  # an ingest route's refusal (a page's is not counted)
            writer.reject(exc.reason)
        media = getattr(request.state, "otlp", None)
        if media is not None:  # an OTLP exporter: a google.rpc.Status in its encoding
            body = otlp.encode_status(media, exc.status, str(exc.detail))
            return Response(body, exc.status, headers=exc.headers, media_type=media)
        return JSONResponse({"detail": exc.detail}, exc.status, headers=exc.headers)

    def gone(scope: Scope) -> None:  # counted as `read_body` counts it: ingest routes only
        if scope["method"] == "POST" and not scope["path"].startswith("/ui/"):
            writer.reject("timeout")

    app.add_middleware(WholeBodies, gone=gone, limit=settings.max_body_bytes)
    if not settings.api_keys:  # outermost: refused before a body is awaited
        app.add_middleware(HostCheck, allowed=settings.allowed_hosts)
    grades = GradeService(settings, store, service.unavailable, service.storage)
    add_event_routes(app, settings, service, keys, grades)
    add_operation_routes(
        app, settings, store, KeyRing(settings.metrics_api_keys), metrics_text, service.unavailable
    )
    browser = Browser(settings, keys)
    app.include_router(explorer_ui(settings, store, browser, grades, overview_pages))

    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary,
                description=app.description, routes=app.routes,
            )  # fmt: skip
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (RetrievalEvent, RetrievalBatch, GradeBatch):
                js = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(js.pop("$defs", {}))
                components[model.__name__] = js
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
