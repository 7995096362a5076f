"""OTLP/HTTP trace exports on the wire: content types, compression, decoding within limits, and
the answers (partial success, google.rpc.Status) in the exporter's encoding. `ragmon.api.spans`
maps the decoded export to events.

Every limit is checked before the work it bounds: the decompressed size while inflating; the
number of elements and the nesting before protobuf or JSON builds them (a body of B bytes holds
at most B/2 elements, so only bodies over `WALK_ABOVE_BYTES` are walked first); resource spans,
scopes and spans before any span is mapped. A 30 KB gzip body that inflates to 15 million
empty `ResourceSpans` is refused in well under a second, with the limit named.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

MAX_RESOURCE_SPANS = 1_000
MAX_SCOPE_SPANS = 10_000  # scopes of all resource spans together
MAX_SPANS = 10_000  # every span of the export, retriever or not
MAX_ELEMENTS = 500_000  # protobuf fields, or JSON objects and arrays, at any depth
MAX_NESTING = 100  # levels of messages (JSON: objects and arrays); protobuf's own limit
WALK_ABOVE_BYTES = 2 * MAX_ELEMENTS  # every element takes 2 bytes at least
SEND_LESS = (
    "lower the exporter's batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, the Collector's "
    "send_batch_max_size)"
)


class OtlpError(ValueError):
    """A request that cannot be read at all; `status` is the HTTP answer (400, 413, 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:  # raised in the decoding process, re-raised here
        return (type(self), (self.status, str(self)))


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


def read_export(
    body: bytes, encoding: str | None, media: str, limit: int
) -> ExportTraceServiceRequest:
    """The export in `body`, decompressed, within every limit (else `OtlpError`)."""
    request = decode(decompress(body, encoding, limit), media)
    check_counts(request)
    return request


def decode(body: bytes, media: str) -> ExportTraceServiceRequest:
    """Parse an `ExportTraceServiceRequest` (protobuf, or OTLP/JSON with hex ids), refusing one
    over `MAX_ELEMENTS` or `MAX_NESTING` before it is built."""
    request = ExportTraceServiceRequest()
    try:
        if media == PROTOBUF:
            if len(body) > WALK_ABOVE_BYTES:
                walk(body, request.DESCRIPTOR)
            try:
                request.ParseFromString(body)
            except DecodeError:
                walk(body, request.DESCRIPTOR)  # names the limit when one was passed
                raise
        else:
            data = _json(body)
            json_format.ParseDict(_hex_ids_to_base64(data), request, True)
    except (DecodeError, json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(exc, OtlpError):
            raise
        raise OtlpError(400, f"not an OTLP trace export ({media}): {_one_line(exc)}") from None
    return request


def check_counts(request: ExportTraceServiceRequest) -> None:
    """Resource spans, scopes and spans within their limits (`413` naming the first passed)."""
    resource_spans = request.resource_spans
    _within(len(resource_spans), MAX_RESOURCE_SPANS, "resource spans")
    scopes = spans = 0
    for rs in resource_spans:
        scopes += len(rs.scope_spans)
        _within(scopes, MAX_SCOPE_SPANS, "scope spans")
        for ss in rs.scope_spans:
            spans += len(ss.spans)
            _within(spans, MAX_SPANS, "spans")


def _within(count: int, limit: int, what: str) -> None:
    if count > limit:
        raise OtlpError(413, f"export over the limit of {limit:,} {what}: {SEND_LESS}")


def _too_many_elements() -> OtlpError:
    return OtlpError(
        413, f"export over the limit of {MAX_ELEMENTS:,} elements (protobuf fields, JSON objects "
        f"and arrays): {SEND_LESS}",
    )  # fmt: skip


def _too_deep() -> OtlpError:
    return OtlpError(400, f"export nested deeper than the limit of {MAX_NESTING} levels")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def walk(body: bytes, descriptor: Descriptor) -> None:
    """Count the elements and the nesting of a protobuf message without building it, following
    the schema into sub-messages; stop at the first limit passed (`OtlpError`). It costs CPU per
    element: only bodies that could hold more than `MAX_ELEMENTS` are walked."""
    count = 0
    stack = [(descriptor, 0, len(body), 1)]
    while stack:
        desc, pos, end, depth = stack.pop()
        if depth > MAX_NESTING:
            raise _too_deep()
        fields = desc.fields_by_number
        while pos < end:
            key, pos = _varint(body, pos)
            count += 1
            if count > MAX_ELEMENTS:
                raise _too_many_elements()
            kind = key & 7
            if kind == 0:
                _, pos = _varint(body, pos)
            elif kind == 2:
                size, pos = _varint(body, pos)
                field = fields.get(key >> 3)
                if size and field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                    stack.append((field.message_type, pos, pos + size, depth + 1))
                pos += size
            elif kind == 1:
                pos += 8
            elif kind == 5:
                pos += 4
            else:
                return  # a group or a broken tag: the parser says what is wrong
            if pos > end:
                return


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(body) and shift < 64:
        byte = body[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return value, len(body) + 1  # truncated: the caller's bounds check ends the walk


def _json(body: bytes) -> Any:
    """`json.loads` within `MAX_ELEMENTS` (counted before parsing when the body is large
    enough to pass it: every `{` and `[`, also inside strings) and `MAX_NESTING`."""
    if len(body) > WALK_ABOVE_BYTES and body.count(b"{") + body.count(b"[") > MAX_ELEMENTS:
        raise _too_many_elements()
    try:
        data = json.loads(body)
    except RecursionError:
        raise _too_deep() from None
    count = 0
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        count += 1
        if count > MAX_ELEMENTS:
            raise _too_many_elements()
        if depth > MAX_NESTING:
            raise _too_deep()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return data


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
    code = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 503: 14, 507: 8}.get(http_status, 2)
    return _encode(Status(code=code, message=message), media)


def _encode(message: Any, media: str) -> bytes:
    if media == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()
