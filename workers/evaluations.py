"""Evaluations out: each judged event's chosen measures, sent as OpenTelemetry
`gen_ai.evaluation.result` events (OTLP log records) to RAGMON_OTLP_EXPORT_ENDPOINT.

A drain job builds one `Evaluations` when it starts (in the work horse, after the fork: the
SDK's export thread must live in the process that emits) and closes it when it ends. Records
wait in the SDK's bounded batch queue and leave from its own thread, so a slow or absent
receiver never holds up judging; closing waits at most `CLOSE_S`, and what was not sent by
then is counted as dropped (`ragmon_evaluations_exported_total{outcome}`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragmon.core.wire import SEP
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.records import Result, StoredEvent

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter

log = logging.getLogger("ragmon.worker")

EVENT_NAME = "gen_ai.evaluation.result"
EXPORT_TIMEOUT_S = 2.0  # one export request, its retries included
CLOSE_S = 3.0  # the most a drain job waits at its end for records still queued
MAX_QUEUE = 4096  # records held for export; beyond it the oldest are dropped
BATCH = 256
DELAY_MS = 500
_HEX = re.compile(r"^[0-9a-f]+$")


def _hex_id(value: Any, digits: int) -> int | None:
    """A W3C trace (32 hex digits) or span (16) id as an int; None for anything else."""
    text = str(value or "").lower()
    if len(text) != digits or not _HEX.match(text) or not text.strip("0"):
        return None
    return int(text, 16)


class Evaluations:
    """Emits evaluation records for one drain job; `close` flushes (bounded) and counts."""

    def __init__(self, settings: Settings, store: Store) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource

        assert settings.otlp_export_endpoint
        self.measures = settings.otlp_export_measures
        self.store = store
        self.emitted = 0
        self.exporter = _Counted(
            # headers (a key) from OTEL_EXPORTER_OTLP_HEADERS, as for any OTLP exporter
            OTLPLogExporter(endpoint=settings.otlp_export_endpoint, timeout=EXPORT_TIMEOUT_S)
        )
        self.processor: BatchLogRecordProcessor = BatchLogRecordProcessor(
            self.exporter,  # type: ignore[arg-type]
            schedule_delay_millis=DELAY_MS,
            max_export_batch_size=BATCH,
            max_queue_size=MAX_QUEUE,
        )
        resource = Resource.create({"service.name": "ragmon"})
        self.provider: LoggerProvider = LoggerProvider(resource=resource)
        self.provider.add_log_record_processor(self.processor)
        self.logger = self.provider.get_logger("ragmon")

    def send(self, event: StoredEvent, result: Result) -> None:
        """One record per chosen measure the event has a value for; never raises."""
        try:
            self._send(event, result)
        except Exception as exc:  # noqa: BLE001 - evaluations out must not fail judging
            log.warning("evaluation of event %s not sent: %r", event.get("event_id"), exc)

    def _send(self, event: StoredEvent, result: Result) -> None:
        from opentelemetry._logs import LogRecord
        from opentelemetry.trace import (
            NonRecordingSpan,
            SpanContext,
            TraceFlags,
            set_span_in_context,
        )

        trace_id = _hex_id(event.get("trace_id"), 32)
        span_id = _hex_id((event.get("metadata") or {}).get("span_id"), 16)
        context = None
        if trace_id is not None:  # parented to the retrieval span, or in its trace at least
            span = SpanContext(trace_id, span_id or 0, is_remote=True, trace_flags=TraceFlags(1))
            context = set_span_in_context(NonRecordingSpan(span))
        labels = event["labels"]
        common: dict[str, str | int | float] = {
            "ragmon.event_id": event["event_id"],
            "ragmon.app": labels.get("app", "default"),
            "ragmon.k": event["k"],
            "ragmon.judge": result["judge"] or "",
        }
        for name in self.measures:
            value = result["measures"].get(name)
            if value is None:  # undefined for this event (docs/measures.md)
                continue
            attributes: dict[str, str | int | float] = {
                "gen_ai.evaluation.name": name,
                "gen_ai.evaluation.score.value": float(value),
                **common,
            }
            self.logger.emit(
                LogRecord(event_name=EVENT_NAME, context=context, attributes=attributes)
            )
            self.emitted += 1

    def close(self) -> dict[str, int]:
        """Send what is queued, waiting at most `CLOSE_S`; count the outcomes."""
        # The SDK's shutdown sends what is queued but takes no timeout: it runs in a thread this
        # waits for at most CLOSE_S; then the exporter's shutdown ends any export still retrying.
        closing = threading.Thread(target=self.processor.shutdown, daemon=True)
        closing.start()
        closing.join(CLOSE_S)
        if closing.is_alive():
            self.exporter.shutdown()
        sent, failed = self.exporter.sent, self.exporter.failed
        outcomes = {"sent": sent, "failed": failed, "dropped": self.emitted - sent - failed}
        if failed or outcomes["dropped"]:
            log.warning("evaluations out: %d records failed, %d dropped (receiver down or slow?)",
                        failed, outcomes["dropped"])  # fmt: skip
        for outcome, n in outcomes.items():
            if n > 0:
                self.store.incr(f"evaluations_exported{SEP}{outcome}", n)
        return outcomes


class _Counted:
    """The OTLP exporter, counting the records each export sent or failed."""

    def __init__(self, inner: LogRecordExporter) -> None:
        self.inner = inner
        self.sent = self.failed = 0
        self.closed = threading.Event()

    def export(self, batch: Sequence[ReadableLogRecord]) -> Any:
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        try:
            outcome = self.inner.export(batch)
        except Exception:  # noqa: BLE001
            outcome = LogRecordExportResult.FAILURE
        if outcome == LogRecordExportResult.SUCCESS:
            self.sent += len(batch)
        else:
            self.failed += len(batch)
        return outcome

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return True

    def shutdown(self) -> None:
        if not self.closed.is_set():  # once: by the processor or, when it hangs, by `close`
            self.closed.set()
            self.inner.shutdown()  # type: ignore[no-untyped-call]
