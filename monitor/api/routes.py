"""The HTTP routes: events in (`/v1/retrievals`, `/v1/traces`), events out, and operations
(`/healthz`, `/readyz`, `/metrics`). They read the body and the API key and shape the answer;
the decisions are the `IngestService`'s. Added to the app itself, not through an `APIRouter`,
whose inclusion puts one more routing layer in front of every ingest request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from ragmon.api import otlp
from ragmon.api.auth import KeyRing, Principal
from ragmon.api.bodies import read_body
from ragmon.api.costs import body_limit
from ragmon.api.grades import GradeService
from ragmon.api.metrics import MetricsText
from ragmon.api.schemas import (
    LABEL_PATTERN,
    Accepted,
    BatchAccepted,
    ErrorResponse,
    EventPage,
    GradeBatch,
    GradesAccepted,
    RetrievalBatch,
    RetrievalEvent,
    RetrievalResult,
)
from ragmon.api.service import IngestService, Refused, otlp_refused, sharer
from ragmon.api.ui import scope
from ragmon.core.search import SEARCH_HELP, SearchError, parse_search
from ragmon.core.window import iso_week
from ragmon.oversight import LAST, estimates_json, last_days, summarized
from ragmon.settings import Settings
from ragmon.store import Store

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "Body over the route's limit (docs/api.md)."},
    422: {"model": ErrorResponse, "description": "Invalid event: `loc` names the field."},
    401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
    403: {"model": ErrorResponse, "description": "The key may not write this app label."},
    429: {
        "model": ErrorResponse,
        "description": "The app's bodies waiting to be decoded are "
        "at their limit: see Retry-After.",
    },
    503: {"model": ErrorResponse, "description": "Queue over its limit: see Retry-After."},
    507: {
        "model": ErrorResponse,
        "description": "The app holds RAGMON_APP_STORAGE_MB, or is among the apps holding most "
        "while Redis is past RAGMON_MEMORY_HIGH of its maxmemory.",
    },
}

READ_RESPONSES: dict[int | str, dict[str, Any]] = {  # a search's or a summary's
    401: RESPONSES[401],
    403: {"model": ErrorResponse, "description": "The key may not read this app."},
    503: {"model": ErrorResponse, "description": "Redis unreachable: retry later."},
}


def client_of(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


def _body_schema(model: type[BaseModel]) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    }


def add_event_routes(
    app: FastAPI, settings: Settings, service: IngestService, keys: KeyRing, grades: GradeService
) -> None:
    """`/v1/retrievals` (write one, write a batch, search, read one), `/v1/traces` and
    `/v1/grades`."""
    store = service.store

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

    async def read_store(call: Any, *args: Any) -> Any:
        """A blocking store read, in a thread, within RAGMON_STORE_TIMEOUT_S (else a 503)."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(call, *args), settings.store_timeout_s)
        except Exception as exc:
            raise service.unavailable(exc) from exc

    @app.post(
        "/v1/retrievals",
        status_code=202,
        response_model=Accepted,
        responses={
            200: {"model": Accepted, "description": "Duplicate event_id: stored status."},
            **RESPONSES,
        },
        openapi_extra=_body_schema(RetrievalEvent),
        summary="Send one retrieval event",
        tags=["events"],
    )
    async def post_event(request: Request) -> JSONResponse:
        principal = authorize(request)
        body = await read_body(request, body_limit(request, settings))
        ((event_id, status, created),) = await service.events(
            principal, body, RetrievalEvent, sharer(principal, client_of(request))
        )
        return JSONResponse({"event_id": event_id, "status": status}, 202 if created else 200)

    @app.post(
        "/v1/retrievals/batch",
        status_code=202,
        response_model=BatchAccepted,
        responses=RESPONSES,
        openapi_extra=_body_schema(RetrievalBatch),
        summary="Send up to 1000 events; a bad item rejects the whole batch",
        tags=["events"],
    )
    async def post_batch(request: Request) -> JSONResponse:
        principal = authorize(request)
        stored = await service.events(
            principal,
            await read_body(request, body_limit(request, settings)),
            RetrievalBatch,
            sharer(principal, client_of(request)),
        )
        body = {"results": [{"event_id": eid, "status": st} for eid, st, _ in stored]}
        return JSONResponse(body, 202)

    @app.post(
        "/v1/traces",
        status_code=200,
        responses={
            200: {"description": "ExportTraceServiceResponse; partial success names rejections"},
            400: {"description": "Not an OTLP trace export (google.rpc.Status)."},
            415: {"description": "Not application/x-protobuf or application/json."},
            **{code: {"description": str(r["description"])} for code, r in RESPONSES.items()},
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
        # read by the Refused handler: an OTLP exporter gets its errors in its encoding
        media = request.state.otlp = otlp.answer_type(request.headers.get("content-type"))
        principal = authorize(request)
        try:
            otlp.media_type(request.headers.get("content-type"))
        except otlp.OtlpError as exc:
            raise otlp_refused(exc) from None
        body = await service.traces(
            principal,
            await read_body(request, body_limit(request, settings)),
            media,
            request.headers.get("content-encoding"),
            sharer(principal, client_of(request)),
        )
        return Response(body, 200, media_type=media)

    @app.post(
        "/v1/grades",
        status_code=200,
        response_model=GradesAccepted,
        responses={
            404: {"model": ErrorResponse, "description": "An unknown event: `loc` names it."},
            **RESPONSES,
            403: {"model": ErrorResponse, "description": "The key may not grade this app."},
            422: {"model": ErrorResponse, "description": "Invalid grade, an unknown passage or "
                  "an event not judged yet: `loc` names the item and field."},
        },
        openapi_extra=_body_schema(GradeBatch),
        summary="People's 0-3 grades of judged passages, beside the judge's",
        description="Idempotent per (event, passage, reviewer): the same grade again changes "
        "nothing; another grade or note by the same reviewer replaces theirs. The judge's "
        "grades and the event's measures stay as they are; `GET /v1/retrievals/{id}` shows "
        "both, and agreement and the corrected estimates use both.",
        tags=["grades"],
    )  # fmt: skip
    async def post_grades(request: Request) -> JSONResponse:
        principal = authorize(request)
        results = await grades.grades(
            principal, await read_body(request, body_limit(request, settings))
        )
        return JSONResponse({"results": results})

    @app.get(
        "/v1/estimates",
        responses={
            400: {"model": ErrorResponse, "description": "A `week` that is not YYYY-Www."},
            **READ_RESPONSES,
        },
        summary="Corrected estimates of nDCG@K, P@K and Hit@K per series and week",
        description="Per series (filtered by any label), over an ISO week (`week=2026-W48`) or "
        "by default the last 7 UTC days: the judge-only mean of each measure and, from "
        "people's grades (`POST /v1/grades`), the PPI++ corrected mean with its 95 % "
        "interval, the people-only interval on the same data and the effective number of "
        "people's grades it is worth; `corrected` is null with a `reason` below 10 graded "
        "units from 10 events. A worker summarizes each app's estimates when people grade it, "
        "about a minute behind its new events, and every 10 minutes (`summarized_at`; null: "
        "not yet): this route reads the summary.",
        tags=["grades"],
    )
    async def get_estimates(
        request: Request,
        app: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
        index: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
        retriever: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
        segment: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
        week: str | None = None,
    ) -> JSONResponse:
        principal = authorize(request)
        bound = principal.app if principal is not None else None
        if bound is not None and app not in (None, bound):
            raise Refused(403, "forbidden", f"app: this API key may only read app={bound}")
        try:
            window = iso_week(week) if week else last_days()
        except ValueError as exc:
            return JSONResponse({"detail": f"week: {exc}"}, 400)
        wanted = {"app": bound or app, "index": index, "retriever": retriever,
                  "segment": segment}  # fmt: skip
        labels = {k: v for k, v in wanted.items() if v is not None}
        key = window.label if week else LAST
        kept, at, found = await read_store(summarized, store, key, labels)
        return JSONResponse(estimates_json(kept or window, found, at))

    @app.get(
        "/v1/retrievals",
        response_model=EventPage,
        responses={
            400: {"model": ErrorResponse, "description": "A parameter that cannot be used."},
            **READ_RESPONSES,
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
        page = await read_store(store.explore.search, search)
        return JSONResponse(page.answer())

    @app.get(
        "/v1/retrievals/{event_id:path}",
        response_model=RetrievalResult,
        responses={
            404: {"model": ErrorResponse},
            401: RESPONSES[401],
            403: RESPONSES[403],
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
        result = await read_store(store.result, bound or app or "default", event_id)
        if result is None:
            return JSONResponse({"detail": NOT_KEPT}, 404)
        return JSONResponse(result)


NOT_KEPT = (
    "unknown event_id: never received, or not kept. An event not chosen for judging keeps no "
    "record past RAGMON_IDEMPOTENCY_S (its counts are in the aggregates and /metrics); a "
    "judged one expires after RAGMON_RESULT_TTL_DAYS"
)


def add_operation_routes(
    app: FastAPI,
    settings: Settings,
    store: Store,
    metrics_keys: KeyRing,
    metrics_text: MetricsText,
    unavailable: Callable[[BaseException], Refused],
) -> None:
    """`/healthz`, `/readyz` and the Prometheus `/metrics` (its own API keys). `unavailable`:
    the service's answer to a failed store call, which logs the exception."""

    def problem(exc: BaseException) -> str:
        return str(unavailable(exc).detail)

    @app.get("/healthz", summary="The process is alive", tags=["operations"])
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", summary="Redis is reachable", tags=["operations"], responses={503: {}})
    async def readyz() -> JSONResponse:
        try:
            await asyncio.wait_for(asyncio.to_thread(store.ping), settings.store_timeout_s)
        except Exception as exc:  # what to check; the exception (addresses...) is logged
            return JSONResponse({"status": "unavailable", "error": problem(exc)}, 503)
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
        gzipped = "gzip" in request.headers.get("accept-encoding", "")
        try:
            body = await (metrics_text.body() if gzipped else metrics_text.plain())
        except Exception as exc:
            return JSONResponse({"detail": problem(exc)}, 503)
        if gzipped:
            headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            return Response(body, media_type=PROMETHEUS_TEXT, headers=headers)
        return StreamingResponse(
            metrics_text.in_slices(body),
            media_type=PROMETHEUS_TEXT,
            headers={"content-length": str(len(body))},
        )
