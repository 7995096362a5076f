"""OTLP trace exports → events: span mapping (`ragmon.api.spans`), decoding and answers
(`ragmon.api.otlp`); pure functions."""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragmon.api import otlp
from ragmon.api.spans import MESSAGES_SHOWN, Mapped, SpanMap, map_request
from ragmon.settings import Settings
from tests.support.spans import event_id, export, otlp_json, retriever_attrs, span

DEFAULT_MAP = SpanMap.from_settings(Settings())


def mapped(spans, resource=None, **env: str) -> Mapped:
    span_map = SpanMap.from_settings(Settings.from_env(env, dotenv=None))
    return map_request(export(spans, resource), span_map)


def one_event(attrs: dict, resource=None, name: str = "BM25Retriever", **env: str):
    out = mapped([span(attrs, name=name)], resource, **env)
    assert not out.rejected, out.rejected
    (event,) = out.events
    return event


def test_a_retriever_span_becomes_an_event():
    start = datetime.now(UTC) - timedelta(minutes=3)
    s = span(retriever_attrs(), name="BM25Retriever", start_ns=int(start.timestamp() * 1e9))
    out = map_request(export([s]), DEFAULT_MAP)
    (event,) = out.events
    assert (out.ignored, out.rejected) == (0, [])
    assert event.query == "how do I reset my password"
    assert [(p.id, p.score) for p in event.passages] == [("kb-1", 0.9), ("kb-2", 0.7),
                                                         ("kb-3", 0.2)]  # fmt: skip
    assert event.passages[0].text == "Open Settings > Security to reset it."
    assert event.k == 3  # no k attribute: every document went into the prompt
    labels = {"app": "support-bot", "index": "default", "retriever": "BM25Retriever"}
    assert event.labels.model_dump() == {**labels, "segment": "default"}
    assert event.event_id == event_id(s)  # derived: a re-exported span is stored once
    assert abs(event.timestamp - start) < timedelta(milliseconds=1)


def test_documents_are_ranked_by_their_index_not_their_attribute_order():
    attrs = retriever_attrs(docs=[])
    for i in (2, 0, 1):
        attrs[f"retrieval.documents.{i}.document.content"] = f"text {i}"
    event = one_event(attrs)
    assert [p.text for p in event.passages] == ["text 0", "text 1", "text 2"]


@pytest.mark.parametrize(
    ("env", "attrs", "resource", "expected"),
    [
        ({}, {"metadata": {"retriever": "bm25", "index": "kb-7", "segment": "billing"}},
         None, {"app": "support-bot", "index": "kb-7", "retriever": "bm25", "segment": "billing"}),
        ({"RAGMON_OTLP_INDEX_ATTRIBUTES": "rag.index"}, {}, {"service.name": "bot",
         "rag.index": "kb-2"}, {"app": "bot", "index": "kb-2", "retriever": "BM25Retriever"}),
        ({"RAGMON_OTLP_APP_ATTRIBUTES": "rag.app,service.name"}, {"rag.app": "span-level"},
         {"service.name": "bot", "rag.app": "resource-level"}, {"app": "span-level"}),
        ({"RAGMON_OTLP_APP_ATTRIBUTES": "rag.app,service.name"}, {}, None,
         {"app": "support-bot"}),
        ({}, {}, {"service.name": "support bot/eu"}, {"app": "support_bot_eu"}),
        ({"RAGMON_OTLP_RETRIEVER_ATTRIBUTES": "none"}, {}, None, {"retriever": "default"}),
        ({"RAGMON_OTLP_SEGMENT_ATTRIBUTES": "metadata.tier"}, {"metadata": {"tier": "gold"}},
         None, {"segment": "gold"}),
        ({}, {"metadata": {"retriever": ""}}, None, {"retriever": "BM25Retriever"}),
    ],
    ids=["openinference-metadata", "resource-attribute", "span-over-resource",
         "fallback", "sanitised", "mapping-off", "custom-metadata-key", "empty-skipped"],
)  # fmt: skip
def test_labels_come_from_the_mapping(env, attrs, resource, expected):
    metadata = attrs.pop("metadata", None)
    event = one_event(retriever_attrs(metadata=metadata, **attrs), resource, **env)
    labels = event.labels.model_dump()
    assert {key: labels[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("env", "attrs", "n_docs", "k", "kept"),
    [
        ({}, {"metadata": {"k": 2}}, 3, 2, 3),
        ({"RAGMON_OTLP_K_ATTRIBUTES": "rag.k"}, {"rag.k": "2"}, 3, 2, 3),
        ({"RAGMON_OTLP_K_ATTRIBUTES": "rag.k"}, {"rag.k": 2.0}, 3, 2, 3),
        ({}, {}, 150, 100, 150),  # k at most 100
        ({}, {}, 250, 100, 200),  # the top 200 documents are kept
    ],
)
def test_k_comes_from_an_attribute_or_the_number_of_documents(env, attrs, n_docs, k, kept):
    docs = [(f"d{i}", f"text {i}", None) for i in range(n_docs)]
    metadata = attrs.pop("metadata", None)
    event = one_event(retriever_attrs(docs=docs, metadata=metadata, **attrs), **env)
    assert (event.k, len(event.passages)) == (k, kept)
    assert event.passages[-1].id == f"d{kept - 1}"


def test_k_comes_from_the_app_setting_when_no_attribute_says():
    docs = [(f"d{i}", f"text {i}", None) for i in range(10)]
    env = {"RAGMON_OTLP_K": "support-bot=4,7"}
    assert one_event(retriever_attrs(docs=docs), **env).k == 4
    assert one_event(retriever_attrs(docs=docs), {"service.name": "other"}, **env).k == 7
    assert one_event(retriever_attrs(docs=docs, metadata={"k": 2}), **env).k == 2


def test_k_from_the_number_of_documents_is_counted_and_said_in_the_event():
    out = mapped([span(retriever_attrs(metadata={"k": 2})), span(retriever_attrs())])
    assert [e.k for e in out.events] == [2, 3]
    assert [(e.metadata or {}).get("k_from") for e in out.events] == [None, "documents"]
    assert out.repairs == {"k_from_documents": 1}


def test_the_default_retriever_label_tells_two_vector_stores_apart():
    def retriever(provider):
        meta = {"ls_retriever_name": "vectorstore", "ls_vector_store_provider": provider}
        return one_event(retriever_attrs(metadata=meta), name="VectorStoreRetriever")

    assert retriever("Chroma").labels.retriever == "VectorStoreRetriever:Chroma"
    assert retriever("FAISS").labels.retriever == "VectorStoreRetriever:FAISS"
    assert one_event(retriever_attrs(), name="BM25").labels.retriever == "BM25"


def nested_export(metadata: dict) -> tuple[list, list]:
    """An ensemble (a chain above it) over two retrievers, one of them a wrapper over a third:
    the spans as OpenInference sends them, children first, the metadata inherited by all."""
    chain = span({"openinference.span.kind": "CHAIN", "input.value": "q"}, name="RunnableSequence")
    outer = span(retriever_attrs(metadata=metadata), name="EnsembleRetriever", parent=chain)
    wrapper = span(retriever_attrs(metadata=metadata), name="Reranked", parent=outer)
    # a non-retriever step between the wrapper and its inner retriever
    step = span({"openinference.span.kind": "CHAIN", "input.value": "q"}, parent=wrapper)
    inner = span(retriever_attrs(metadata=metadata), name="BM25", parent=step)
    vector = span(retriever_attrs(metadata=metadata), name="VectorStoreRetriever", parent=outer)
    return [inner, step, wrapper, vector, outer, chain], [outer, wrapper, inner, vector]


def test_a_nested_retriever_span_is_skipped_and_counted():
    spans, (outer, *_) = nested_export({"retriever": "hybrid", "k": 4})
    out = mapped(spans)
    (event,) = out.events
    assert event.event_id == event_id(outer) and event.labels.retriever == "hybrid"
    assert (out.nested, out.ignored, out.rejected) == (3, 2, [])


def test_a_nested_retriever_span_is_recorded_under_its_own_name_never_inherited_labels():
    meta = {"retriever": "hybrid", "index": "kb-1", "segment": "billing", "k": 4}
    spans, order = nested_export(meta)
    out = mapped(spans, RAGMON_OTLP_NESTED="own")
    events = {e.event_id: e for e in out.events}
    assert list(events) == [event_id(s) for s in (order[2], order[1], order[3], order[0])]
    labels = [events[event_id(s)].labels.model_dump() for s in order]
    assert [lb["retriever"] for lb in labels] == ["hybrid", "Reranked", "BM25",
                                                  "VectorStoreRetriever"]  # fmt: skip
    assert [lb["index"] for lb in labels] == ["kb-1", "default", "default", "default"]
    assert {lb["segment"] for lb in labels} == {"billing"}  # the query's, not the retriever's
    assert [events[event_id(s)].k for s in order] == [4, 3, 3, 3]  # what each one returned
    assert out.repairs == {} and out.nested == 0


def test_nesting_is_read_within_one_trace_only():
    outer = span(retriever_attrs(), name="Outer")
    other_trace = span(retriever_attrs(), name="Inner", trace_id=b"\x07" * 16, parent=outer)
    out = mapped([other_trace, outer])
    assert [e.event_id for e in out.events] == [event_id(outer)] and out.nested == 0
    (orphan,) = out.orphans  # its parent is not in the export: held for it (in its own trace)
    assert orphan.awaits == (b"\x07" * 16).hex() + outer.span_id.hex()


def test_every_span_says_what_it_knows_to_the_spans_held_for_it():
    chain = span({"openinference.span.kind": "CHAIN"}, name="chain")
    outer = span(retriever_attrs(), name="Outer", parent=chain)
    step = span({"openinference.span.kind": "CHAIN"}, parent=outer)
    root = span({"openinference.span.kind": "CHAIN"})
    codes = {code for _, _, code in mapped([chain, root]).arrivals}
    assert codes == {"r"}  # no retriever above either: a span waiting for them is an event
    arrivals = dict((s, code) for _, s, code in mapped([outer, step]).arrivals)
    assert arrivals == {event_id(outer).replace("-", ""): "n",  # a retriever: nested under it
                        event_id(step).replace("-", ""): "n"}  # fmt: skip
    ((_, _, code),) = mapped([step]).arrivals  # its parent elsewhere: waiters wait for it in turn
    assert code == event_id(outer).replace("-", "")


def test_a_loop_of_parent_links_ends():
    a = span(retriever_attrs(), span_id=b"\x01" * 8, trace_id=b"\x02" * 16)
    b = span({"openinference.span.kind": "CHAIN"}, span_id=b"\x03" * 8, parent=a)
    a.parent_span_id = b.span_id
    out = mapped([a, b])
    assert out.nested == 1 and out.events == []  # a retriever above itself: never an event twice


@pytest.mark.parametrize(
    "value", ["has space", "support bot/eu", "x" * 80, "é", "ok-1", 5, 2.5, "", "  "]
)
def test_the_sdk_and_otlp_repair_a_label_value_alike(value):
    from ragmon.client.events import build_event

    fixes: dict[str, int] = {}
    now = datetime.now(UTC)
    sent = build_event("q", [("a", "t")], 1, {"segment": value}, timestamp=now, fixes=fixes)
    out = mapped([span(retriever_attrs(metadata={"segment": value}))])
    (event,) = out.events
    assert event.labels.segment == sent.get("labels", {}).get("segment", "default")
    assert out.repairs.get("labels_repaired", 0) == fixes.get("labels_repaired", 0)
    assert fixes.get("labels_repaired", 0) == (value not in ("ok-1", 5, 2.5, ""))


def test_passage_ids_fall_back_to_metadata_then_the_text():
    attrs = retriever_attrs(docs=[(7, "seven", None), (None, "from metadata", None),
                                  (None, "no id at all", None)])  # fmt: skip
    attrs["retrieval.documents.1.document.metadata"] = json.dumps({"id": "kb-meta"})
    ids = [p.id for p in one_event(attrs).passages]
    assert ids[:2] == ["7", "kb-meta"] and ids[2].startswith("sha1:")


def test_a_score_in_a_document_metadata_is_its_score_as_the_hook_reads_it():
    """OpenInference's LangChain instrumentor records a document's metadata, never a score: a
    score the app put into `Document.metadata["score"]` is read there, by OTLP and the hook."""
    from types import SimpleNamespace

    from ragmon.client.events import passage

    metas = [{"score": 0.8}, {"score": 0.1}, {"score": "high"}, {"score": float("nan")}]
    attrs = retriever_attrs(docs=[("a", "one", None), ("b", "two", 0.5), ("c", "three", None),
                                  ("d", "four", None)])  # fmt: skip
    for i, meta in enumerate(metas):
        attrs[f"retrieval.documents.{i}.document.metadata"] = json.dumps(meta)
    assert [p.score for p in one_event(attrs).passages] == [0.8, 0.5, None, None]
    hook = passage(SimpleNamespace(page_content="one", metadata=metas[0]))
    assert hook is not None and hook["score"] == 0.8


@pytest.mark.parametrize(
    "attrs",
    [
        {"openinference.span.kind": "LLM", "input.value": "hi"},
        {"openinference.span.kind": "CHAIN", "input.value": "hi"},
        {"http.method": "GET"},  # not an OpenInference span at all
        # LlamaIndex's inner `_retrieve` step: its arguments as JSON, no documents
        {"openinference.span.kind": "RETRIEVER", "input.mime_type": "application/json",
         "input.value": json.dumps({"qb": {"query_str": "q", "embedding": None}})},
    ],
    ids=["llm", "chain", "plain-span", "nested-retrieve-step"],
)  # fmt: skip
def test_other_spans_are_ignored_and_counted(attrs):
    out = mapped([span(attrs), span(retriever_attrs())])
    assert (len(out.events), out.ignored, out.rejected) == (1, 1, [])


@pytest.mark.parametrize(
    "value",
    [{"query": "reset password"}, {"qb": {"query_str": "reset password", "embedding": None}}],
)
def test_a_json_input_with_documents_gives_its_query(value):
    attrs = retriever_attrs(**{"input.value": json.dumps(value),
                               "input.mime_type": "application/json"})  # fmt: skip
    assert one_event(attrs).query == "reset password"


def test_a_retriever_span_without_documents_is_an_empty_retrieval_not_ignored():
    out = mapped([span(retriever_attrs(docs=[]))])
    # an empty retrieval is a real (the worst) outcome: recorded and measured, never dropped
    assert out.ignored == 0 and out.rejected == [] and len(out.events) == 1
    assert out.events[0].passages == [] and out.events[0].trace_id


def _old() -> int:
    return int((datetime.now(UTC) - timedelta(days=40)).timestamp() * 1e9)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: span(retriever_attrs(query=None)), "input.value: missing"),
        (lambda: span(retriever_attrs(query="__REDACTED__")), "OPENINFERENCE_HIDE_INPUTS"),
        (lambda: span(retriever_attrs(), dropped=4), "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
        (lambda: span({**retriever_attrs(docs=[]),
                       "retrieval.documents.0.document.content": "a",
                       "retrieval.documents.2.document.content": "c"}), "gap"),
        (lambda: span({**retriever_attrs(docs=[]), "retrieval.documents.0.document.id": "x"}),
         "document.content: missing"),
        (lambda: span({**retriever_attrs(docs=[]), "retrieval.documents.0.document.content": ""}),
         "document.content: empty"),
        (lambda: span(retriever_attrs(), start_ns=_old()), "timestamp"),
        (lambda: span(retriever_attrs(metadata={"k": "many"})), "k"),
        (lambda: span(retriever_attrs(metadata={"k": 0})), "k"),
        (lambda: span(retriever_attrs(metadata={"k": "²"})), "k"),
        (lambda: span(retriever_attrs(**{"input.value": "{}",
                                         "input.mime_type": "application/json"})), "no query"),
    ],
    ids=["no-query", "redacted", "dropped-attributes", "gap", "no-content", "empty-content",
         "too-old",
         "k-not-a-number", "k-zero", "k-superscript",
         "json-without-query"],
)  # fmt: skip
def test_bad_retriever_spans_are_rejected_with_a_reason(make, says):
    bad = make()
    out = mapped([bad, span(retriever_attrs())])
    assert len(out.events) == 1 and len(out.rejected) == 1
    (reason,) = out.rejected
    assert reason.startswith(f"span {bad.span_id.hex()} (") and says in reason, reason
    assert out.message().startswith("ragmon rejected 1 of 2 retriever spans: span ")


def test_a_key_that_only_looks_like_a_document_is_not_one():
    attrs = {**retriever_attrs(), "retrieval.documents.\u00b2.document.content": "x",
             "retrieval.documents.1.notes": "y"}  # fmt: skip
    event = one_event(attrs)
    assert [p.id for p in event.passages] == ["kb-1", "kb-2", "kb-3"]


def test_message_shows_the_first_reasons_and_counts_the_rest():
    out = mapped([span(retriever_attrs(query=None)) for _ in range(5)])
    assert out.message().count("input.value: missing") == MESSAGES_SHOWN
    assert out.message().endswith("(and 2 more)")
    assert Mapped().message() == ""


# ---- the wire -------------------------------------------------------------------------------


def test_protobuf_and_otlp_json_decode_to_the_same_request():
    request = export([span(retriever_attrs()), span({"openinference.span.kind": "LLM"})])
    from_json = otlp.decode(otlp_json(request), otlp.JSON)
    from_proto = otlp.decode(request.SerializeToString(), otlp.PROTOBUF)
    assert from_json == from_proto == request


@pytest.mark.parametrize(
    ("media", "body"),
    [
        (otlp.PROTOBUF, b"\xff\x00garbage"),
        (otlp.JSON, b"\xff\x00garbage"),
        (otlp.JSON, b"[1, 2"),
        (otlp.JSON, b'{"resourceSpans": 3}'),
        (otlp.JSON, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}'),
    ],
)
def test_undecodable_exports_are_400(media, body):
    with pytest.raises(otlp.OtlpError) as err:
        otlp.decode(body, media)
    assert err.value.status == 400 and "not an OTLP trace export" in str(err.value)


@pytest.mark.parametrize(
    ("content_type", "media"),
    [("application/x-protobuf", otlp.PROTOBUF), ("application/json; charset=utf-8", otlp.JSON)],
)
def test_media_types(content_type, media):
    assert otlp.media_type(content_type) == media
    assert otlp.answer_type(content_type) == media


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/grpc"])
def test_other_media_types_are_415(content_type):
    with pytest.raises(otlp.OtlpError) as err:
        otlp.media_type(content_type)
    assert err.value.status == 415
    assert otlp.answer_type(content_type) == otlp.PROTOBUF


def test_decompression_gzip_deflate_and_limits():
    body = b"x" * 5000
    assert otlp.decompress(gzip.compress(body), "gzip", 5000) == body
    assert otlp.decompress(zlib.compress(body), "deflate", 5000) == body
    assert otlp.decompress(body, None, 10) == body  # the raw body's limit is checked on read
    cases = [
        (gzip.compress(body), "gzip", 4999, 413),
        (b"not gzip", "gzip", 10_000, 400),
        (gzip.compress(body)[:-12], "gzip", 10_000, 400),
        (body, "br", 10_000, 415),
    ]
    for data, encoding, limit, status in cases:
        with pytest.raises(otlp.OtlpError) as err:
            otlp.decompress(data, encoding, limit)
        assert err.value.status == status, (encoding, limit)


@pytest.mark.parametrize("media", [otlp.PROTOBUF, otlp.JSON])
def test_answers_in_the_request_encoding(media):
    def parse(body: bytes, message):
        if media == otlp.JSON:
            return json_format.Parse(body, message)
        message.ParseFromString(body)
        return message

    full = parse(otlp.encode_response(media, 0, ""), ExportTraceServiceResponse())
    assert not full.HasField("partial_success")
    partial = parse(otlp.encode_response(media, 2, "why"), ExportTraceServiceResponse())
    assert (partial.partial_success.rejected_spans, partial.partial_success.error_message) == (
        2, "why")  # fmt: skip
    status = parse(otlp.encode_status(media, 503, "queue full"), Status())
    assert (status.code, status.message) == (14, "queue full")  # UNAVAILABLE


# ---- spans from the real OpenTelemetry SDK and its encoders ----------------------------------


def sdk_spans(n_docs: int) -> list:
    """Finished spans of the OpenTelemetry SDK: one retriever span with `n_docs` documents."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("chain") as parent:
        parent.set_attribute("openinference.span.kind", "CHAIN")
        with tracer.start_as_current_span("retrieve") as s:
            s.set_attribute("openinference.span.kind", "RETRIEVER")
            s.set_attribute("input.value", "how do I reset my password")
            for i in range(n_docs):
                s.set_attribute(f"retrieval.documents.{i}.document.id", f"d{i}")
                s.set_attribute(f"retrieval.documents.{i}.document.content", f"text {i}")
                s.set_attribute(f"retrieval.documents.{i}.document.score", 1.0 - i / 100)
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_the_sdk_encoders_protobuf_and_json_give_the_same_event():
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as to_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as to_proto

    spans = sdk_spans(10)
    proto = otlp.decode(to_proto(spans).SerializeToString(), otlp.PROTOBUF)
    from_json = otlp.decode(to_json(spans).to_json().encode(), otlp.JSON)
    assert from_json == proto
    out = map_request(proto, DEFAULT_MAP)
    (event,) = out.events
    assert out.ignored == 1 and event.labels.app == "sdk-app" and event.k == 10
    assert [p.id for p in event.passages] == [f"d{i}" for i in range(10)]
    retrieve = next(s for s in spans if s.name == "retrieve")
    assert event.event_id == f"{retrieve.context.trace_id:032x}-{retrieve.context.span_id:016x}"


def test_a_span_over_the_sdk_attribute_limit_is_rejected_not_truncated():
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as to_proto

    # 3 attributes per document: past 128 the SDK drops the oldest (the query, the top ranks)
    out = map_request(to_proto(sdk_spans(50)), DEFAULT_MAP)
    assert out.events == [] and len(out.rejected) == 1
    assert "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in out.rejected[0]


_KEYS = st.sampled_from(
    ["input.value", "input.mime_type", "metadata", "retrieval.documents", "rag.k",
     "openinference.span.kind"]
    + [f"retrieval.documents.{i}.document.{f}" for i in (0, 1, 2, 7)
       for f in ("id", "content", "score", "metadata")]
)  # fmt: skip
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(),
    st.text(max_size=30), st.sampled_from(["application/json", "RETRIEVER", "{}", '{"k": 3}',
                                           '{"query": "q"}', "__REDACTED__"]),
    st.lists(st.text(max_size=5), max_size=3),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=8), st.integers(0, 3))
def test_any_retriever_span_is_an_event_a_reason_or_ignored_never_an_error(attrs, dropped):
    s = span({"openinference.span.kind": "RETRIEVER", **attrs}, dropped=dropped)
    env = {"RAGMON_OTLP_K_ATTRIBUTES": "rag.k,metadata.k"}
    out = mapped([s], None, **env)
    assert len(out.events) + len(out.rejected) + out.ignored == 1
    for event in out.events:  # what is accepted is a valid event
        assert event.passages is not None and 1 <= event.k <= 100
