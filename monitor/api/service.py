"""Ingest without HTTP: a request's body and caller in, events stored (or a `Refused`) out.

The routes (`ragmon.api.routes`) only read the body and the API key and shape the answer;
everything a write decides (validation, the key's app binding, backpressure, sampling,
sealing, the OTLP mapping) is here, so it can be tested by calling it.

Reading a body into events (`prepare_events`, `prepare_export`) is pure and runs where it
cannot hold the event loop: an OTLP export, or an events body over `INLINE_MAX_BYTES`, in a
decoding process (`ragmon.api.shares`: a share per app), which answers with the items ready to
store; a small events body on the loop, where a process hop would cost more than the parse.
(With a larger inline limit, one app's flood of batches held the loop for every other app's
requests.)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ragmon.api import otlp
from ragmon.api.auth import Principal
from ragmon.api.batcher import IngestWriter, sampled_in
from ragmon.api.holding import HeldSpans
from ragmon.api.nesting import Hold, blob
from ragmon.api.sampler import Sampler
from ragmon.api.schemas import FIELD_INVALID, RetrievalBatch, RetrievalEvent
from ragmon.api.shares import FairChild, QueueFull
from ragmon.api.spans import Mapped, SpanMap, map_request
from ragmon.api.storage import RETRY_AFTER_S as STORAGE_RETRY_AFTER_S
from ragmon.api.storage import AppOverStorage, AppStorage
from ragmon.core.sampling import Rates
from ragmon.core.wire import MAX_BATCH, series_name
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.failures import is_store_failure, what_failed
from ragmon.store.ingest import AppAtLimit
from ragmon.store.keys import utc_day
from ragmon.store.records import signal_record
from ragmon.store.sealing import Sealer, SealingKeyMissing

RETRY_AFTER_S = 5
INLINE_MAX_BYTES = 1 << 16  # an events body up to this size parses on the loop
MAX_RETRIEVER_SPANS = MAX_BATCH  # per export, as events per batch; the rest are rejected


class Refused(Exception):
    """A request refused before it reaches the store (status, reason label, detail). With a
    reason it counts in `ragmon_events_rejected_total{reason}`; a page's refusal has none."""

    def __init__(
        self, status: int, reason: str | None, detail: Any, headers: dict | None = None
    ) -> None:
        super().__init__(status, reason, detail, headers)  # pickled from the decoding process
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


@dataclass
class Export:
    """An OTLP export read in the decoding process: its retriever spans as items to store, and
    what the mapping counted (its events cleared: they travel back as the items only), with
    `cut` of its rejections for being over `MAX_RETRIEVER_SPANS`."""

    items: list[IngestItem]
    mapped: Mapped
    cut: int
    holds: list[Hold] = field(default_factory=list)  # per app: for `ragmon.api.holding`


def prepare(
    settings: Settings,
    sealer: Sealer,
    app: str | None,
    events: list[RetrievalEvent],
    where: Callable[[int], str],
    rates: Rates | None = None,
) -> list[IngestItem]:
    """Valid events of any route → items to store: the key's app binding (`app`), ids and
    times, the retrieval signals (`signal_record`), sealing, sampling (each event judged with
    its series' rate in `rates`, by default RAGMON_SAMPLE_RATE; the rate is kept in the event
    as its `inclusion_probability`). Pure: it runs in the decoding process too."""
    if app is not None:
        for i, ev in enumerate(events):
            if ev.labels.app != app:
                raise Refused(
                    403, "forbidden", f"{where(i)}: this API key may only write app={app}"
                )
    rates = rates or Rates({}, settings.sample_rate)
    rate_of = rates.pacer()
    now = datetime.now(UTC)
    items = []
    for ev in events:
        ev.event_id = ev.event_id or uuid.uuid4().hex
        ev.timestamp = ev.timestamp or now
        series = series_name(ev.labels.model_dump())
        p = rate_of(series, ev.labels.app)
        body = ev.model_dump_json(exclude_none=True)
        body = f'{body[:-1]},"inclusion_probability":{p!r}}}'
        items.append(
            IngestItem(
                ev.event_id,
                sealer.seal(body),
                sampled_out=not sampled_in(ev.event_id, p),
                app=ev.labels.app,
                series=series,
                probability=p,
                day=utc_day(ev.timestamp.timestamp()),
                signals=signal_record(
                    ev.query, ev.k, [x.id for x in ev.passages], [x.score for x in ev.passages]
                ),
            )
        )
    return items


def prepare_events(
    settings: Settings,
    body: bytes,
    model: type[BaseModel],
    app: str | None,
    sealer: Sealer | None = None,
    rates: Rates | None = None,
) -> list[IngestItem]:
    """A `RetrievalEvent` or `RetrievalBatch` body → items to store (`422` or `403` refused).
    A large batch (over `INLINE_MAX_BYTES`) of more than `MAX_BATCH` events is refused before
    any of them is built."""
    large = len(body) > INLINE_MAX_BYTES
    if large and model is RetrievalBatch and more_items_than(body, MAX_BATCH):
        msg = f"at most {MAX_BATCH} events per batch: send smaller batches"
        raise Refused(422, "invalid", [{"loc": ["body", "events"], "msg": msg, "type": "too_long"}])
    try:
        parsed = model.model_validate_json(body)
    except ValidationError as exc:
        raise Refused(422, "invalid", validation_errors(exc)) from None
    sealer = sealer or Sealer(settings)
    if isinstance(parsed, RetrievalBatch):
        return prepare(
            settings, sealer, app, parsed.events, lambda i: f"events[{i}].labels.app", rates
        )
    assert isinstance(parsed, RetrievalEvent)
    return prepare(settings, sealer, app, [parsed], lambda i: "labels.app", rates)


# A run of strings and scalars, then one of `[]{},`: strings are skipped whole (brackets and
# commas inside them are text), so a match is one structural character.
_STRUCTURE = re.compile(rb'(?:"(?:[^"\\]++|\\.)*+"|[^"\[\]{},])*+([\[\]{},])')
SCAN_MAX_DEPTH = 256  # deeper than the parser goes (it refuses the body itself)


def more_items_than(body: bytes, limit: int) -> bool:
    """Whether an array directly inside the body's top-level object (a batch's `events`) holds
    more than `limit` items, told from its commas without building any item: parsing a large
    batch whole, only to refuse it, cost the decoding process its size many times over. Stops at
    the first array over `limit`; a body that is not such JSON is left to the parser."""
    depth, commas, in_array = 0, 0, False
    for match in _STRUCTURE.finditer(body):
        char = match[1]
        if char == b"," and depth == 2:
            commas += in_array
            if commas >= limit:
                return True
        elif char in b"[{":
            depth += 1
            if depth == 2:
                in_array, commas = char == b"[", 0
            elif depth > SCAN_MAX_DEPTH:
                return False
        elif char in b"]}":
            depth -= 1
    return False


def prepare_export(
    settings: Settings,
    body: bytes,
    encoding: str | None,
    media: str,
    app: str | None,
    rates: Rates | None = None,
) -> Export:
    """An OTLP export (content type checked) → items of its first `MAX_RETRIEVER_SPANS`
    retriever spans, within every limit of `ragmon.api.otlp` (else `Refused`)."""
    try:
        request = otlp.read_export(body, encoding, media, settings.max_body_bytes)
    except otlp.OtlpError as exc:
        raise otlp_refused(exc) from None
    span_map = SpanMap.from_settings(settings)
    mapped = map_request(request, span_map)
    if settings.otlp_hold_s <= 0:  # no hold: a span whose parent is elsewhere is an event now
        mapped.events += [o.event for o in mapped.orphans]
        mapped.orphans, mapped.arrivals = [], []
    over = mapped.events[MAX_RETRIEVER_SPANS:]
    mapped.rejected[:0] = [  # first: the exporter's message names the limit
        f"span {ev.event_id}: over the limit of {MAX_RETRIEVER_SPANS:,} retriever spans per "
        "export (send smaller batches)"
        for ev in over
    ]
    del mapped.events[MAX_RETRIEVER_SPANS:]
    app_from = ", ".join(span_map.app) or "no attribute"
    items = prepare(
        settings,
        Sealer(settings),
        app,
        mapped.events,
        lambda i: f"span {mapped.events[i].event_id}: labels.app (from {app_from})",
        rates,
    )
    mapped.events = []
    return Export(items, mapped, len(over), holds(settings, mapped, app, app_from, rates))


def holds(
    settings: Settings, mapped: Mapped, app: str | None, app_from: str, rates: Rates | None
) -> list[Hold]:
    """Per app, the export's arrivals and orphans for the hold, their items prepared as any
    span's; a key bound to an app hears of no other app's."""
    orphans, mapped.orphans = mapped.orphans, []
    arrivals, mapped.arrivals = mapped.arrivals, []
    sealer = Sealer(settings)

    def where(i: int) -> str:
        return f"span {orphans[i].event.event_id}: labels.app (from {app_from})"

    outer = prepare(settings, sealer, app, [o.event for o in orphans], where, rates)
    own = [o.own for o in orphans if o.own is not None]
    owns = iter(prepare(settings, sealer, app, own, where, rates))
    out: dict[str, Hold] = {}
    for orphan, item in zip(orphans, outer, strict=True):
        hold = out.setdefault(item.app, Hold(item.app))
        text = blob(item, next(owns) if orphan.own is not None else None)
        hold.spans.append((orphan.key, orphan.awaits, text))
        hold.blobs[orphan.key] = text
    for span_app, span, code in arrivals:
        if app is None or span_app == app:
            out.setdefault(span_app, Hold(span_app)).arrivals.append((span, code))
    return list(out.values())


def sharer(principal: Principal | None, client: str | None) -> str:
    """Whose turn a request's body waits for in the decoding process: the key's app, else its
    client's address (an unbound key, or none)."""
    if principal is not None and principal.app is not None:
        return f"app {principal.app!r}"
    return f"client {client or 'unknown'}"


class IngestService:
    """The write path of every ingest route, from a body already read to the store."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        writer: IngestWriter,
        decoder: FairChild | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.writer = writer
        self.decoder = decoder or FairChild()
        self.sampler = sampler or Sampler(settings, store)
        self.storage = AppStorage(settings, store)
        self.held = HeldSpans(settings, store, self.write_all, writer.count_holds)

    def close(self) -> None:
        self.decoder.close()

    async def aclose(self) -> None:
        await self.storage.aclose()

    async def events(
        self, principal: Principal | None, body: bytes, model: type[BaseModel], who: str = ""
    ) -> list[tuple[str, str, bool]]:
        """A `RetrievalEvent` or `RetrievalBatch` body stored: `(event_id, status, created)`
        per event, in order. `who`: whose turn a large body waits for (`sharer`)."""
        app = principal.app if principal is not None else None
        rates = self.sampler.rates()
        if len(body) <= INLINE_MAX_BYTES:
            items = prepare_events(self.settings, body, model, app, self.store.sealer, rates)
        else:
            items = await self.off_loop(
                who, prepare_events, self.settings, body, model, app, None, rates
            )
        await self.check_storage(items)
        results = await self.write(items)
        self.storage.count(items, [created for _, created in results])
        return [
            (it.event_id, status, created)
            for it, (status, created) in zip(items, results, strict=True)
        ]

    async def traces(
        self,
        principal: Principal | None,
        body: bytes,
        media: str,
        encoding: str | None,
        who: str = "",
    ) -> bytes:
        """An OTLP trace export (its content type already checked): the retriever spans stored,
        the spans counted by outcome; returns the `ExportTraceServiceResponse` in `media`."""
        app = principal.app if principal is not None else None
        export = await self.off_loop(
            who, prepare_export, self.settings, body, encoding, media, app, self.sampler.rates()
        )
        items, mapped = export.items, export.mapped
        if mapped.repairs["unknown_service"]:
            self.writer.log.warning(
                "unknown_service",
                "%d OTLP spans name their app unknown_service (the OpenTelemetry SDK's default): "
                "set OTEL_SERVICE_NAME in the app, or Phoenix's register(project_name=...)",
                mapped.repairs["unknown_service"],
            )
        held = {h.app: h.nbytes for h in export.holds}
        if items or any(held.values()):
            await self.check_storage(items, held)
        if items:
            await self.write_all(items)
        if export.holds:
            try:
                await self.held.admit(export.holds)
            except Refused:
                raise
            except Exception as exc:
                raise self.unavailable(exc) from exc
        outcomes = {"event": len(items), "nested": mapped.nested, "ignored": mapped.ignored,
                    "rejected": len(mapped.rejected),
                    "held": sum(len(h.spans) for h in export.holds)}  # fmt: skip
        self.writer.count_spans(outcomes, mapped.repairs)
        if len(mapped.rejected) > export.cut:  # retrievals that will not be monitored: the
            self.writer.reject("invalid", len(mapped.rejected) - export.cut)  # alert sees them
        if export.cut:
            self.writer.reject("too_large", export.cut)
        return otlp.encode_response(media, len(mapped.rejected), mapped.message())

    async def off_loop(self, who: str, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` in the decoding process, in `who`'s turn (`ragmon.api.shares`): the
        loop (and /healthz) never waits for it, nor another app for more than one body."""
        try:
            return await self.decoder.run(who, work, *args)
        except QueueFull as exc:
            retry = {"Retry-After": str(RETRY_AFTER_S)}
            raise Refused(429, "backpressure", str(exc), retry) from None
        except BrokenProcessPool:  # killed (out of memory?) while decoding: a new one next time
            raise Refused(
                500, None, "the decoding process stopped while reading this body; retry once"
            ) from None

    async def write_all(self, items: list[IngestItem]) -> None:
        """`write`, and the bytes created counted for the storage checks."""
        results = await self.write(items)
        self.storage.count(items, [created for _, created in results])

    async def check_storage(
        self, items: list[IngestItem], extra: dict[str, int] | None = None
    ) -> None:
        """A `507` naming the app and the limit when an app of the request holds its share of
        Redis (RAGMON_APP_STORAGE_MB) or is among those holding most while Redis is near its
        maxmemory (RAGMON_MEMORY_HIGH); nothing of the request stored."""
        try:
            await self.storage.check(items, extra or {})
        except AppOverStorage as exc:
            raise Refused(
                507, exc.reason, str(exc), {"Retry-After": str(STORAGE_RETRY_AFTER_S)}
            ) from None
        except Exception as exc:
            raise self.unavailable(exc) from exc

    async def write(self, items: list[IngestItem]) -> list[tuple[str, bool]]:
        """Store items durably: `(status, created)` per item, or a 503 `Refused` (the store
        failed, or one of the request's apps is at RAGMON_QUEUE_LIMIT)."""
        try:
            written = await self.writer.submit(items)
        except Exception as exc:
            raise self.unavailable(exc) from exc
        if isinstance(written, AppAtLimit):
            raise Refused(503, "backpressure", written.message, {"Retry-After": str(RETRY_AFTER_S)})
        self.sampler.note(items, (created for _, created in written))
        return written

    def unavailable(self, exc: BaseException) -> Refused:
        """The answer to a failed store call: a `503` when Redis failed or timed out, a `500`
        naming RAGMON_TEXT_KEYS for a sealed payload no key opens, a `500` for anything else.
        The answer says what to check; the exception itself goes to the log (a line per kind
        every few seconds at most), never to the caller."""
        what = what_failed(exc, self.settings.store_timeout_s)
        log = self.writer.log
        if isinstance(exc, SealingKeyMissing):
            log.warning("sealing", "answering 500: %s", what)
            return Refused(500, None, what)
        if not is_store_failure(exc):
            log.warning("internal", "internal error, answering 500: %s", exc, exc_info=exc)
            return Refused(500, None, "internal error: the API's log has the details")
        why = " ".join(str(exc).split()) or type(exc).__name__
        log.warning("store", "event store unavailable, answering 503: %s", why)
        return Refused(
            503,
            "store_unavailable",
            f"event store unavailable ({what}); retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
