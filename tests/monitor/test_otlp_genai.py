"""OpenTelemetry GenAI retrieval spans (`gen_ai.operation.name` = retrieval) become events as
OpenInference retriever spans do; an app's name comes from its resource, never silently from
the SDK's `unknown_service`. Spans are built to the conventions' examples
(open-telemetry/semantic-conventions#2924) and, over HTTP, sent by the real OpenTelemetry SDK."""

from __future__ import annotations

import json
import time

import pytest

from ragmon.api.spans import SpanMap, map_request
from ragmon.settings import Settings
from tests.support.spans import export, retriever_attrs, span
from tests.support.stack import sample_value
from tests.support.waiting import scaled

DOCS = [  # the conventions' example, with the content ragmon judges
    {"id": "doc_123", "score": 0.95, "content": "Paris is the capital of France."},
    {"id": "doc_456", "score": 0.87, "content": "France is a country in Europe."},
    {"id": "doc_789", "score": 0.82, "content": "Berlin is the capital of Germany."},
]
QUERY = "What is the capital of France?"


def genai_attrs(docs=DOCS, query=QUERY, **extra):
    attrs = {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "H7STPQYOND",
             "gen_ai.retrieval.query.text": query, "gen_ai.retrieval.top_k": 3,
             "gen_ai.retrieval.documents": None if docs is None else json.dumps(docs)}  # fmt: skip
    return {k: v for k, v in {**attrs, **extra}.items() if v is not None}


def mapped(spans, resource=None, **env):
    return map_request(export(spans, resource), SpanMap.from_settings(Settings.from_env(env)))


def test_a_genai_retrieval_span_is_an_event_like_an_openinference_one():
    genai = mapped([span(genai_attrs(), name="retrieval H7STPQYOND")]).events[0]
    oi_docs = [(d["id"], d["content"], d["score"]) for d in DOCS]
    oi = mapped([span(retriever_attrs(QUERY, oi_docs, metadata={"index": "H7STPQYOND", "k": 3}),
                      name="retrieval H7STPQYOND")]).events[0]  # fmt: skip
    assert genai.query == QUERY and genai.k == 3 and genai.labels.index == "H7STPQYOND"
    assert [(p.id, p.text, p.score) for p in genai.passages] == oi_docs
    assert genai.model_dump(exclude={"event_id", "trace_id", "timestamp", "metadata"}) == (
        oi.model_dump(exclude={"event_id", "trace_id", "timestamp", "metadata"})
    )


def test_structured_documents_and_the_request_top_k_are_read_too():
    attrs = genai_attrs(docs=None, **{"gen_ai.retrieval.top_k": None})
    attrs["gen_ai.request.top_k"] = 2.0  # a double in the conventions
    s = span(attrs)
    s.attributes.add(key="gen_ai.retrieval.documents").value.array_value.values.extend(
        _kvlist(d) for d in DOCS[:2]
    )
    (event,) = mapped([s]).events
    assert event.k == 2 and [p.id for p in event.passages] == ["doc_123", "doc_456"]


def _kvlist(doc):
    from tests.support.spans import any_value

    value = any_value(0)
    value.ClearField("int_value")
    for k, v in doc.items():
        value.kvlist_value.values.add(key=k, value=any_value(v))
    return value


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        (genai_attrs(query=None), "gen_ai.retrieval.query.text: missing"),
        (genai_attrs(docs=None), "gen_ai.retrieval.documents: missing"),
        (genai_attrs(docs=[{"id": "doc_123", "score": 0.95}]), "[0]: no content"),
        (genai_attrs(**{"gen_ai.retrieval.documents": "{"}), "gen_ai.retrieval.documents: not"),
    ],
)
def test_a_genai_retrieval_span_without_what_ragmon_needs_is_rejected_saying_why(attrs, says):
    out = mapped([span(attrs)])
    assert out.events == [] and len(out.rejected) == 1 and says in out.rejected[0]


def test_a_genai_retrieval_inside_another_is_nested_and_other_genai_spans_ignored():
    outer = span(genai_attrs(), name="retrieval ensemble")
    inner = span(genai_attrs(), name="retrieval bm25", parent=outer)
    chat = span({"gen_ai.operation.name": "chat"}, parent=outer)
    out = mapped([inner, chat, outer])
    assert [e.labels.retriever for e in out.events] == ["retrieval_ensemble"]
    assert (out.nested, out.ignored) == (1, 1)


UNKNOWN = "unknown_service:python3"  # the SDK's service.name when the app sets none


@pytest.mark.parametrize(
    ("resource", "app", "warned"),
    [
        ({"service.name": "support-bot", "openinference.project.name": "p"}, "support-bot", 0),
        ({"service.name": UNKNOWN, "openinference.project.name": "faq"}, "faq", 0),
        ({"service.name": UNKNOWN}, UNKNOWN, 1),
        ({"service.name": "unknown_service"}, "unknown_service", 1),
    ],
)
def test_the_app_is_the_service_then_phoenix_project_and_unknown_service_is_counted(
    resource, app, warned
):
    out = mapped([span(retriever_attrs())], resource)
    assert out.events[0].labels.app == app
    assert out.repairs["unknown_service"] == warned


@pytest.mark.process  # the API decodes OTLP in its child process
def test_the_opentelemetry_sdk_exports_genai_retrievals_and_phoenix_project_names(api, caplog):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    def send(resource: dict) -> str:
        provider = TracerProvider(resource=Resource.create(resource))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{api.url}/v1/traces")))
        with provider.get_tracer("app").start_as_current_span("retrieval H7STPQYOND") as s:
            for key, value in genai_attrs().items():
                s.set_attribute(key, value)
            ctx = s.get_span_context()
        provider.shutdown()
        return f"{ctx.trace_id:032x}-{ctx.span_id:016x}"

    sent = {"faq": send({"openinference.project.name": "faq"}), "unknown": send({})}
    got = api.client.get(f"/v1/retrievals/{sent['faq']}", params={"app": "faq"}).json()
    assert got["status"] == "queued" and got["labels"]["index"] == "H7STPQYOND"
    assert got["query"] == QUERY and got["k"] == 3
    assert [p["id"] for p in got["passages"]] == ["doc_123", "doc_456", "doc_789"]
    app = Resource.create({}).attributes["service.name"]  # the SDK's unknown_service...
    assert app.startswith("unknown_service")
    r = api.client.get(f"/v1/retrievals/{sent['unknown']}", params={"app": app})
    assert r.json()["labels"]["app"] == app
    deadline = time.monotonic() + scaled(5)
    while True:
        try:
            text = api.client.get("/metrics").text
            n = sample_value(text, "ragmon_otlp_repairs_total", {"repair": "unknown_service"})
            break
        except KeyError:
            assert time.monotonic() < deadline, "no ragmon_otlp_repairs_total{unknown_service}"
            time.sleep(0.05)
    assert n == 1
    assert "OTEL_SERVICE_NAME" in caplog.text
