"""`POST /v1/traces` over real HTTP with a real Redis: the same auth, limits, sampling and
backpressure as `/v1/retrievals`, and OTLP's answers (partial success, google.rpc.Status)."""

from __future__ import annotations

import gzip
import time

import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from ragmon.core.wire import event_ref
from tests.support.spans import event_id, export, otlp_json, retriever_attrs, span
from tests.support.stack import sample_value
from tests.support.waiting import scaled

pytestmark = pytest.mark.process  # the API decodes OTLP in its child process

PROTOBUF = {"content-type": "application/x-protobuf"}
KEY = "k" * 16 + "-any-app"
BOT_KEY = "b" * 16 + "-bot-only"
BOT = {"app": "support-bot"}  # event ids are scoped by app


def post(api, request, headers=None, gzipped=False):
    body = request.SerializeToString()
    extra = {}
    if gzipped:
        body, extra = gzip.compress(body), {"content-encoding": "gzip"}
    return api.client.post(
        "/v1/traces", content=body, headers={**PROTOBUF, **extra, **(headers or {})}
    )


def response(r) -> ExportTraceServiceResponse:
    out = ExportTraceServiceResponse()
    out.ParseFromString(r.content)
    return out


def status(r) -> Status:
    out = Status()
    if r.headers["content-type"].startswith("application/json"):
        return json_format.Parse(r.content, out)
    out.ParseFromString(r.content)
    return out


def counter(api, outcome: str) -> float:
    """ragmon_otlp_spans_total{outcome}, once the writer has flushed it (polled: 5 s idle,
    stretched by the load)."""
    deadline = time.monotonic() + scaled(5)
    while True:
        try:
            return sample_value(api.client.get("/metrics").text, "ragmon_otlp_spans_total",
                                {"outcome": outcome})  # fmt: skip
        except KeyError:
            assert time.monotonic() < deadline, f"no otlp_spans_total{{outcome={outcome}}}"
            time.sleep(0.05)


def test_retriever_spans_are_stored_others_ignored_bad_ones_rejected(api):
    good = [span(retriever_attrs(query=f"question {i}")) for i in range(2)]
    bad = span(retriever_attrs(query=None))
    other = span({"openinference.span.kind": "LLM"})
    r = post(api, export([good[0], other, bad, good[1]]), gzipped=True)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
    partial = response(r).partial_success
    assert partial.rejected_spans == 1
    assert f"span {bad.span_id.hex()}" in partial.error_message
    assert "input.value: missing" in partial.error_message
    for s in good:
        got = api.client.get(f"/v1/retrievals/{event_id(s)}", params=BOT).json()
        assert got["status"] == "queued" and got["labels"]["app"] == "support-bot"
    assert api.client.get(f"/v1/retrievals/{event_id(bad)}", params=BOT).status_code == 404
    assert (counter(api, "event"), counter(api, "ignored"), counter(api, "rejected")) == (2, 1, 1)
    # a retrieval that will not be monitored: the ingest-rejections alert counts it
    text = api.client.get("/metrics").text
    assert sample_value(text, "ragmon_events_rejected_total", {"reason": "invalid"}) == 1


def test_otlp_json_in_json_out(api):
    s = span(retriever_attrs())
    body = otlp_json(export([s, span(retriever_attrs(query=None))]))
    r = api.client.post("/v1/traces", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json()["partialSuccess"]["rejectedSpans"] in (1, "1")  # int64: JSON may quote it
    assert api.client.get(f"/v1/retrievals/{event_id(s)}", params=BOT).json()["status"] == "queued"


def test_a_full_success_has_no_partial_success_and_a_re_export_is_stored_once(api):
    request = export([span(retriever_attrs(query=f"q{i}")) for i in range(3)])
    for _ in range(2):
        r = post(api, request)
        assert r.status_code == 200 and not response(r).HasField("partial_success")
    text = api.client.get("/metrics").text
    assert sample_value(text, "ragmon_events_received_total") == 3
    assert counter(api, "event") == 6  # spans seen; the second export stored nothing new


@pytest.mark.parametrize(
    ("headers", "body", "code", "says"),
    [
        ({"content-type": "text/plain"}, b"x", 415, "unsupported content-type"),
        (PROTOBUF, b"\xff\x00garbage", 400, "not an OTLP trace export"),
        ({**PROTOBUF, "content-encoding": "gzip"}, b"not gzip", 400, "not valid gzip"),
        ({**PROTOBUF, "content-encoding": "br"}, b"x", 415, "content-encoding"),
        ({"content-type": "application/json"}, b"{", 400, "not an OTLP trace export"),
    ],
)
def test_unreadable_exports_get_a_status_message(api, headers, body, code, says):
    r = api.client.post("/v1/traces", content=body, headers=headers)
    assert r.status_code == code
    assert says in status(r).message
    assert api.store.client.keys("ragmon:ev:*") == []


def test_body_and_decompressed_body_over_the_limit_are_413(make_api):
    api = make_api(RAGMON_MAX_BODY_BYTES="4096")
    big = export([span(retriever_attrs(docs=[("d", "x" * 5000, None)]))])
    assert post(api, big).status_code == 413
    r = post(api, big, gzipped=True)  # small on the wire, too big once inflated
    assert r.status_code == 413 and "decompressed" in status(r).message
    assert api.store.client.keys("ragmon:ev:*") == []


def test_the_same_keys_as_the_retrievals_routes(make_api):
    api = make_api(RAGMON_API_KEYS=f"{KEY},{BOT_KEY}:support-bot")
    request = export([span(retriever_attrs())])
    r = post(api, request)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "API key" in status(r).message
    other = export([span(retriever_attrs())], resource={"service.name": "other-app"})
    r = post(api, other, {"authorization": f"Bearer {BOT_KEY}"})
    assert r.status_code == 403 and "may only write app=support-bot" in status(r).message
    assert api.store.client.keys("ragmon:ev:*") == []
    assert post(api, request, {"authorization": f"Bearer {BOT_KEY}"}).status_code == 200
    assert post(api, other, {"authorization": f"Bearer {KEY}"}).status_code == 200
    assert len(api.store.client.keys("ragmon:ev:*")) == 2


def test_queue_over_limit_is_503_with_retry_after(make_api):
    api = make_api(RAGMON_QUEUE_LIMIT="1", RAGMON_JOB_BATCH_SIZE="1")
    assert post(api, export([span(retriever_attrs())])).status_code == 200
    time.sleep(0.6)  # the API re-reads the queue depth every 0.5 s
    s = span(retriever_attrs())
    r = post(api, export([s]))
    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0  # exporters retry
    assert "retry later" in status(r).message
    assert api.store.statuses([event_ref("support-bot", event_id(s))]) == [None]


def test_sampling_applies_on_the_derived_id(make_api):
    api = make_api(RAGMON_SAMPLE_RATE="0")
    s = span(retriever_attrs())
    assert post(api, export([s])).status_code == 200
    assert (
        api.client.get(f"/v1/retrievals/{event_id(s)}", params=BOT).json()["status"]
        == "sampled_out"
    )


# ---- bounded work: every limit named, checked before the work it bounds --------------------


def empty_resource_spans(n: int) -> bytes:
    """`n` empty ResourceSpans (2 bytes each on the wire: the smallest element there is)."""
    return b"\x0a\x00" * n


def test_a_gzip_bomb_of_empty_resource_spans_is_refused_naming_the_limit(api):
    """30 KB of gzip inflating to 15.7 million empty ResourceSpans (31 MB, under the body
    limit): refused before protobuf builds them (before: 130 s, /healthz down, +400 MiB)."""
    body = gzip.compress(empty_resource_spans(15_700_000), compresslevel=9)
    assert len(body) < 100_000
    r = api.client.post("/v1/traces", content=body,
                        headers={**PROTOBUF, "content-encoding": "gzip"})  # fmt: skip
    assert r.status_code == 413
    assert "limit of 500,000 elements" in status(r).message
    assert post(api, export([span(retriever_attrs())])).status_code == 200  # and it goes on


def many_scopes(n: int) -> bytes:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans() for _ in range(n)])]
    ).SerializeToString()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (empty_resource_spans(1_001), "limit of 1,000 resource spans"),
        (many_scopes(10_001), "limit of 10,000 scope spans"),
        (export([Span() for _ in range(10_001)]).SerializeToString(), "limit of 10,000 spans"),
    ],
)
def test_counts_over_their_limits_are_413(api, body, says):
    r = api.client.post("/v1/traces", content=body, headers=PROTOBUF)
    assert r.status_code == 413 and says in status(r).message
    assert api.store.client.keys("ragmon:ev:*") == []


def test_a_million_empty_json_spans_are_refused(api):
    """1 million empty OTLP/JSON spans (3 MB): before, 21.9 s on the event loop."""
    body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * 1_000_000)
    r = api.client.post("/v1/traces", content=body + b"]}]}]}",
                        headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 413
    assert r.headers["content-type"].startswith("application/json")  # in the exporter's encoding
    assert "limit of 500,000 elements" in status(r).message


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"resourceSpans":' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("application/json", b"[" * 200_000 + b"]" * 200_000),
        ("application/x-protobuf", None),  # `too_deep()`
    ],
)
def test_nesting_past_the_limit_is_a_400_status_not_a_500(api, content_type, body):
    r = api.client.post(
        "/v1/traces", content=body or too_deep(), headers={"content-type": content_type}
    )
    assert r.status_code == 400
    assert "nested deeper than the limit of 100 levels" in status(r).message


def too_deep() -> bytes:
    """An export whose one span attribute nests 150 ArrayValues: protobuf itself refuses to
    build it, so it is written field by field."""

    def field(number: int, payload: bytes) -> bytes:
        size, n = b"", len(payload)
        while True:
            size, n = size + bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)]), n >> 7
            if not n:
                return bytes([number << 3 | 2]) + size + payload

    value = AnyValue(string_value="x").SerializeToString()
    for _ in range(150):  # AnyValue.array_value (5) → ArrayValue.values (1) → AnyValue
        value = field(5, field(1, value))
    span_bytes = field(5, b"deep") + field(9, field(1, b"k") + field(2, value))
    return field(1, field(2, field(2, span_bytes)))  # resource_spans → scope_spans → spans


def test_over_1000_retriever_spans_the_rest_are_rejected_naming_the_limit(api):
    """One export of 1,500 retriever spans stores 1,000, as a batch holds at most 1,000 events
    (before: all 1,500; 60,000 spans stored 60,000)."""
    spans = [span(retriever_attrs(query=f"q{i}")) for i in range(1_500)]
    r = post(api, export(spans))
    assert r.status_code == 200
    partial = response(r).partial_success
    assert partial.rejected_spans == 500
    assert "over the limit of 1,000 retriever spans per export" in partial.error_message
    assert len(api.store.client.keys("ragmon:ev:*")) == 1_000
    assert counter(api, "rejected") == 500


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        # a document index thousands of digits long (before: a plain-text 500)
        (retriever_attrs(**{f"retrieval.documents.{'9' * 5000}.document.content": "x"}),
         "the ranking has a gap"),
        # the query as JSON nested past the parser's depth (before: a plain-text 500)
        (retriever_attrs(query="[" * 100_000 + "]" * 100_000,
                         **{"input.mime_type": "application/json"}), "no query in its JSON"),
    ],
)  # fmt: skip
def test_hostile_attributes_reject_their_span_not_the_server(api, attrs, says):
    r = post(api, export([span(attrs), span(retriever_attrs())]))
    assert r.status_code == 200
    partial = response(r).partial_success
    assert partial.rejected_spans == 1 and says in partial.error_message
