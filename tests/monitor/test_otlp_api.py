"""`POST /v1/traces` over real HTTP with a real Redis: the same auth, limits, sampling and
backpressure as `/v1/retrievals`, and OTLP's answers (partial success, google.rpc.Status)."""

from __future__ import annotations

import gzip
import time

import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragmon.store.keys import event_ref
from tests.support.spans import event_id, export, otlp_json, retriever_attrs, span
from tests.support.stack import sample_value

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
    """ragmon_otlp_spans_total{outcome}, once the writer has flushed it (polled, 5 s at most)."""
    deadline = time.monotonic() + 5
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
