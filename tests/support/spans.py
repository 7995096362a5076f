"""OTLP trace exports built for tests: OpenInference retriever spans and others (protobuf)."""

from __future__ import annotations

import base64
import itertools
import json
import time
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

_ids = itertools.count(1)


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    return AnyValue(string_value=str(value))


def attributes(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in values.items() if v is not None]


def retriever_attrs(
    query: str | None = "how do I reset my password",
    docs: list[tuple[Any, str, float | None]] | None = None,
    metadata: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """OpenInference RETRIEVER attributes: `docs` are `(id, content, score)`, None to omit."""
    if docs is None:
        docs = [("kb-1", "Open Settings > Security to reset it.", 0.9),
                ("kb-2", "Passwords expire every 90 days.", 0.7),
                ("kb-3", "Invoices are sent monthly.", 0.2)]  # fmt: skip
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": query}
    for i, (pid, content, score) in enumerate(docs):
        attrs[f"retrieval.documents.{i}.document.id"] = pid
        attrs[f"retrieval.documents.{i}.document.content"] = content
        attrs[f"retrieval.documents.{i}.document.score"] = score
    if metadata is not None:
        attrs["metadata"] = json.dumps(metadata)
    attrs.update(extra)
    return attrs


def span(
    attrs: dict[str, Any],
    name: str = "VectorIndexRetriever.retrieve",
    start_ns: int | None = None,
    dropped: int = 0,
    trace_id: bytes | None = None,
    span_id: bytes | None = None,
    parent: Span | None = None,
) -> Span:
    """A span; under `parent` it joins the parent's trace."""
    n = next(_ids)
    start = time.time_ns() - 1_000_000 if start_ns is None else start_ns
    if parent is not None and trace_id is None:
        trace_id = parent.trace_id
    return Span(
        trace_id=trace_id if trace_id is not None else n.to_bytes(16, "big"),
        span_id=span_id if span_id is not None else (n + 1000).to_bytes(8, "big"),
        parent_span_id=parent.span_id if parent is not None else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000,
        attributes=attributes(attrs),
        dropped_attributes_count=dropped,
    )


def export(spans: list[Span], resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    res = {"service.name": "support-bot"} if resource is None else resource
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    rs.resource.attributes.extend(attributes(res))
    return ExportTraceServiceRequest(resource_spans=[rs])


def event_id(s: Span) -> str:
    return f"{s.trace_id.hex()}-{s.span_id.hex()}"


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """The request as OTLP/JSON: protobuf's JSON mapping, with trace and span ids in hex."""
    data = json_format.MessageToDict(request)
    for rs in data.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for s in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return json.dumps(data).encode()
