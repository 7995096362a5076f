"""OTLP/HTTP trace exports on the wire: content types, compression, decoding, and the answers
(partial success, google.rpc.Status) in the exporter's encoding. `ragmon.api.spans` maps the
decoded export to events.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpError(ValueError):
    """A request that cannot be read at all; `status` is the HTTP answer (400, 413, 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def media_type(content_type: str | None) -> str:
    """`application/x-protobuf` or `application/json`; anything else is a 415."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in (PROTOBUF, JSON):
        return media
    raise OtlpError(415, f"unsupported content-type {media or '(none)'}: send {PROTOBUF} or {JSON}")


def answer_type(content_type: str | None) -> str:
    """The encoding of the answer: JSON for a JSON request, else protobuf (OTLP's default)."""
    return JSON if (content_type or "").lower().startswith(JSON) else PROTOBUF


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body under `Content-Encoding` gzip, deflate or none, at most `limit` bytes."""
    enc = (encoding or "identity").strip().lower()
    if enc == "identity":
        return body
    if enc not in ("gzip", "deflate"):
        raise OtlpError(415, f"unsupported content-encoding {enc}: send gzip, deflate or none")
    inflater = zlib.decompressobj(wbits=31 if enc == "gzip" else 15)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"body is not valid {enc}: {exc}") from None
    if len(out) > limit:
        raise OtlpError(413, f"decompressed body over the limit of {limit} bytes")
    if not inflater.eof:
        raise OtlpError(400, f"body is not valid {enc}: truncated")
    return out


def decode(body: bytes, media: str) -> ExportTraceServiceRequest:
    """Parse an `ExportTraceServiceRequest` (protobuf, or OTLP/JSON with hex ids)."""
    request = ExportTraceServiceRequest()
    try:
        if media == PROTOBUF:
            request.ParseFromString(body)
        else:
            json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request, True)
    except (DecodeError, json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise OtlpError(400, f"not an OTLP trace export ({media}): {exc}") from None
    return request


def _hex_ids_to_base64(data: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping wants base64."""
    resource_spans = data.get("resourceSpans") or data.get("resource_spans") or ()
    for rs in resource_spans:
        for ss in rs.get("scopeSpans") or rs.get("scope_spans") or ():
            for span in ss.get("spans") or ():
                for item in (span, *(span.get("links") or ())):
                    for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id"):
                        value = item.get(key)
                        if isinstance(value, str) and value:
                            item[key] = base64.b64encode(bytes.fromhex(value)).decode()
    return data


def encode_response(media: str, rejected: int, message: str) -> bytes:
    """`ExportTraceServiceResponse`, with a partial success when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
        )
    return _encode(response, media)


def encode_status(media: str, http_status: int, message: str) -> bytes:
    """The `google.rpc.Status` body OTLP/HTTP expects with a 4xx or 5xx answer."""
    code = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 503: 14}.get(http_status, 2)
    return _encode(Status(code=code, message=message), media)


def _encode(message: Any, media: str) -> bytes:
    if media == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()
