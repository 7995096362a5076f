"""OpenInference retriever spans → retrieval events: the mapping, with no I/O.

An OpenInference RETRIEVER span (`openinference.span.kind`) carries the query in `input.value`
and the ranked documents in `retrieval.documents.{i}.document.{id,content,score,metadata}`: the
outermost one of a call is one event, what the app put into its prompt. A retriever span under
another one (an ensemble's members, a wrapper's inner retriever) is nested: skipped, or recorded
under its own name (`RAGMON_OTLP_NESTED`), never under the labels it inherited; one whose
ancestry leaves the export is held for it (`ragmon.api.nesting`). A GenAI retrieval span
(`ragmon.api.genai`) is read as a retriever span. Every other span is ignored (and counted). A
retriever span that cannot be an event is rejected with a reason, which the exporter gets back
in OTLP's partial success. Labels and `k` come from span or resource attributes through
`SpanMap` (settings `RAGMON_OTLP_*`); the event id is derived from the trace and span ids, so a
re-exported span is stored once. `ragmon.api.otlp` reads the export off the wire.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pydantic import ValidationError

from ragmon.api import genai, nesting
from ragmon.api.nesting import Orphan, Tree, ancestry, arrival
from ragmon.api.schemas import RetrievalEvent
from ragmon.client.events import InvalidEvent, passage
from ragmon.core.wire import LABEL_KEYS, MAX_PASSAGES, MAX_SCORE, default_k, label_value
from ragmon.settings import Settings

SPAN_KIND = "openinference.span.kind"
RETRIEVER = "RETRIEVER"
QUERY = "input.value"
QUERY_TYPE = "input.mime_type"
JSON_INPUT = "application/json"  # the QUERY_TYPE of arguments in JSON, the query among them
METADATA = "metadata"
DOCUMENTS = "retrieval.documents"
DOCUMENTS_DOT = DOCUMENTS + "."
REDACTED = "__REDACTED__"  # OpenInference's placeholder under OPENINFERENCE_HIDE_INPUTS
SPAN_NAME = "span.name"  # a pseudo-attribute: the span's name
JOIN = "+"  # `span.name+metadata.ls_vector_store_provider`: the parts present, joined by ":"
MESSAGES_SHOWN = 3
_QUERY_KEYS = ("query", "query_str", "question", "input")
UNKNOWN_SERVICE = "unknown_service"  # the SDK's service.name when the app sets none


@dataclass(frozen=True)
class SpanMap:
    """The attribute names each label (and `k`) is read from; the first one present wins."""

    app: tuple[str, ...]
    index: tuple[str, ...]
    retriever: tuple[str, ...]
    segment: tuple[str, ...]
    k: tuple[str, ...]
    k_by_app: dict[str, int] = field(default_factory=dict)  # `*`: any other app
    nested: str = "skip"  # or "own": a nested retriever span under its own name

    @classmethod
    def from_settings(cls, settings: Settings) -> SpanMap:
        return cls(
            app=settings.otlp_app_attributes,
            index=settings.otlp_index_attributes,
            retriever=settings.otlp_retriever_attributes,
            segment=settings.otlp_segment_attributes,
            k=settings.otlp_k_attributes,
            k_by_app=settings.otlp_k,
            nested=settings.otlp_nested,
        )


@dataclass
class Mapped:
    """What a trace export holds for ragmon: events, and the spans ignored or rejected."""

    events: list[RetrievalEvent] = field(default_factory=list)
    ignored: int = 0
    nested: int = 0  # retriever spans under another retriever span, skipped
    orphans: list[Orphan] = field(default_factory=list)  # their parent elsewhere: held
    arrivals: list[tuple[str, str, str]] = field(default_factory=list)  # (app, span, code)
    rejected: list[str] = field(default_factory=list)  # one reason per rejected span
    #: repairs made so that spans could be events: `labels_repaired` (as the SDK counts it),
    #: `k_from_documents` (no k attribute nor RAGMON_OTLP_K: measured at the documents returned)
    repairs: Counter[str] = field(default_factory=Counter)

    def message(self) -> str:
        """OTLP's partial-success `error_message`: the count and the first reasons."""
        if not self.rejected:
            return ""
        total = len(self.events) + len(self.rejected)
        shown = "; ".join(self.rejected[:MESSAGES_SHOWN])
        extra = len(self.rejected) - MESSAGES_SHOWN
        more = f" (and {extra} more)" if extra > 0 else ""
        return f"ragmon rejected {len(self.rejected)} of {total} retriever spans: {shown}{more}"


class _Rejected(Exception):
    """This retriever span cannot become an event (the message says why)."""


def map_request(request: ExportTraceServiceRequest, span_map: SpanMap) -> Mapped:
    """Every outermost retriever span of the export as a validated event; the others counted."""
    out = Mapped()
    retrievers: list[tuple[Span, dict[str, AnyValue], Any, dict[str, Any], str]] = []
    tree: Tree = {}
    spans: list[tuple[Span, str, bool]] = []  # every span, its app, whether a retriever
    for rs in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for span in ss.spans:
                attrs, docs = _scan(span)
                kind, problem = attrs.get(SPAN_KIND), ""
                if kind is not None:
                    retriever = kind.string_value.upper() == RETRIEVER
                elif genai.is_retrieval(attrs):  # OpenTelemetry's GenAI conventions
                    retriever = True
                    try:
                        docs = genai.as_openinference(attrs, docs, QUERY)
                    except genai.NotAnEvent as exc:
                        problem = str(exc)
                else:  # a span that lost its kind to the SDK's attribute limit
                    retriever = span.dropped_attributes_count > 0 and docs is not None
                tree[(span.trace_id, span.span_id)] = (span.parent_span_id, retriever)
                app = _Lookup(span, attrs, resource).label(span_map.app, Counter())
                spans.append((span, app or "default", retriever))
                if retriever:
                    retrievers.append((span, attrs, docs, resource, problem))
                else:
                    out.ignored += 1
    out.arrivals = [(app, nesting.key(s.trace_id, s.span_id), arrival(s, tree, r))
                    for s, app, r in spans]  # fmt: skip
    for span, attrs, docs, resource, problem in retrievers:
        nested = ancestry(span, tree)
        if nested is True and span_map.nested == "skip":
            out.nested += 1
            continue
        where = f"span {span.span_id.hex() or '?'} ({span.name[:100] or 'unnamed'})"
        try:
            if problem:
                raise _Rejected(problem)
            event = span_event(span, attrs, docs, resource, span_map, nested is True, out.repairs)
            if event is None:
                out.ignored += 1
                continue
            if not isinstance(nested, bytes):
                out.events.append(RetrievalEvent.model_validate(event))
                continue
            own = None  # its parent is in another export: held, as the one or the other
            if span_map.nested == "own":
                inner = span_event(span, attrs, docs, resource, span_map, True, Counter())
                own = RetrievalEvent.model_validate(inner)
            out.orphans.append(Orphan(RetrievalEvent.model_validate(event), own,
                                      nesting.key(span.trace_id, span.span_id),
                                      nesting.key(span.trace_id, nested)))  # fmt: skip
        except _Rejected as exc:
            out.rejected.append(f"{where}: {exc}")
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            out.rejected.append(f"{where}: {loc + ': ' if loc else ''}{msg}")
    return out


def _scan(span: Span) -> tuple[dict[str, AnyValue], dict[int, dict[str, AnyValue]] | None]:
    """The span's attributes in one pass: the documents' by index, the others by name.

    Documents is None when the span has no documents attribute at all (not even an empty list).
    A retriever span whose kind the SDK dropped (past its attribute limit the oldest go first)
    still has documents: it is mapped, so that it is rejected, not silently ignored.
    """
    attrs: dict[str, AnyValue] = {}
    docs: dict[int, dict[str, AnyValue]] | None = None
    for kv in span.attributes:
        key = kv.key
        where = _document_field(key)
        if where is not None:
            if docs is None:
                docs = {}
            index, name = where
            if index in docs:
                docs[index][name] = kv.value
            else:
                docs[index] = {name: kv.value}
            continue
        if key == DOCUMENTS:  # the structured form: a list of {document.*: ...}
            if docs is None:
                docs = {}
            for i, item in enumerate(kv.value.array_value.values):
                fields = {
                    x.key.removeprefix("document."): x.value for x in item.kvlist_value.values
                }
                docs.setdefault(i, {}).update(fields)
            continue
        attrs[key] = kv.value
    return attrs, docs


@functools.lru_cache(maxsize=4096)
def _document_field(key: str) -> tuple[int, str] | None:
    """`retrieval.documents.3.document.content` → (3, "content"); None for another key.
    Cached: every retriever span repeats the same few hundred keys."""
    if not key.startswith(DOCUMENTS_DOT):
        return None
    index, sep, name = key[len(DOCUMENTS_DOT) :].partition(".document.")
    if not (sep and index.isascii() and index.isdigit()):
        return None
    return (int(index) if len(index) <= 9 else 10**9, name)  # past 10**9: a gap, rejected


def span_event(
    span: Span,
    attrs: dict[str, AnyValue],
    docs: dict[int, dict[str, AnyValue]] | None,
    resource: dict[str, Any],
    span_map: SpanMap,
    nested: bool = False,
    repairs: Counter[str] | None = None,
) -> dict[str, Any] | None:
    """The wire event of one retriever span; None for a framework's nested retrieval step.

    LlamaIndex wraps `_retrieve` (JSON arguments, no documents) in `retrieve` (the query and
    the documents): a retriever span with a JSON input and no documents is that inner step, and
    its parent span carries the retrieval. A `nested` span (under another retriever span) is
    named by its own attributes: `metadata.*` keys are inherited from the enclosing call, so
    they never give it its `index`, `retriever` or `k`; its `k` is the documents it returned
    (they went to the enclosing retriever, not into the prompt).
    """
    if span.dropped_attributes_count:
        raise _Rejected(
            f"the span dropped {span.dropped_attributes_count} attributes "
            "(OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, 128 by default): its ranking may be incomplete"
        )
    query = _query(attrs, has_documents=docs is not None)
    if query is None:
        return None
    passages = _passages(docs or {})
    repairs = Counter() if repairs is None else repairs
    lookup = _Lookup(span, attrs, resource)
    own = _Lookup(span, attrs, resource, own=True) if nested else lookup
    labels = {}
    for key in LABEL_KEYS:
        value = (own if key in ("index", "retriever") else lookup).label(
            getattr(span_map, key), repairs
        )
        if value is not None:
            labels[key] = value
    metadata = {"span_id": span.span_id.hex(), "span_name": span.name[:256]}
    k = None if nested else lookup.first(span_map.k)
    if k is None and not nested:
        k = span_map.k_by_app.get(labels.get("app", "default"), span_map.k_by_app.get("*"))
    if k is None:
        k = default_k(len(passages))
        if not nested:  # never silently: counted, and said in the event
            repairs["k_from_documents"] += 1
            metadata["k_from"] = "documents"
    event: dict[str, Any] = {
        "query": query,
        "k": _integer(k),
        "passages": passages,
        "labels": labels,
    }
    if span.start_time_unix_nano:
        event["timestamp"] = datetime.fromtimestamp(span.start_time_unix_nano / 1e9, UTC)
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    if trace_id.strip("0") and span_id.strip("0"):
        event["event_id"] = f"{trace_id}-{span_id}"
        event["trace_id"] = trace_id
    event["metadata"] = metadata
    return event


def _query(attrs: dict[str, AnyValue], has_documents: bool) -> str | None:
    raw = attrs.get(QUERY)
    if raw is None or raw.WhichOneof("value") != "string_value":
        if has_documents:
            raise _Rejected(f"{QUERY}: missing (the query)")
        return None
    text = raw.string_value
    if text == REDACTED:
        raise _Rejected(f"{QUERY} is redacted (OPENINFERENCE_HIDE_INPUTS): ragmon needs the query")
    mime = attrs.get(QUERY_TYPE)
    if mime is None or mime.string_value != JSON_INPUT:
        return text
    if not has_documents:
        return None  # a nested step (see span_event)
    found = _query_in_json(text)
    if found is None:
        raise _Rejected(f"{QUERY}: no query in its JSON (keys {', '.join(_QUERY_KEYS)})")
    return found


def _query_in_json(text: str) -> str | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return None
    for _ in range(3):  # {"qb": {"query_str": ...}}: look a few levels down
        if isinstance(data, str):
            return data
        if not isinstance(data, dict):
            return None
        for key in _QUERY_KEYS:
            if isinstance(data.get(key), str):
                return data[key]
        nested = [v for v in data.values() if isinstance(v, dict | str)]
        if len(nested) != 1:
            return None
        data = nested[0]
    return None


def _passages(docs: dict[int, dict[str, AnyValue]]) -> list[dict[str, Any]]:
    """The top MAX_PASSAGES documents as passages, in the order of their index."""
    order = sorted(docs)
    if order and order[-1] != len(order) - 1:
        missing = min(set(range(len(order))) - set(order))
        raise _Rejected(f"{DOCUMENTS}.{missing}: missing (the ranking has a gap)")
    out = []
    for rank in order[:MAX_PASSAGES]:
        doc = docs[rank]
        content = doc.get("content")
        if content is None or content.WhichOneof("value") != "string_value":
            raise _Rejected(f"{DOCUMENTS}.{rank}.document.content: missing")
        item: dict[str, Any] = {"text": content.string_value}
        pid = doc.get("id")
        if pid is not None and pid.WhichOneof("value") == "string_value" and pid.string_value:
            item["id"] = pid.string_value
        else:  # an int id, the id in the metadata, or the text's: the SDK's rules
            fallback = _fallback_id(None if pid is None else _value(pid), doc)
            try:
                one = passage({"id": fallback, "text": item["text"]}, rank)
            except InvalidEvent as exc:
                raise _Rejected(str(exc)) from None
            if one is None:  # the SDK skips an empty chunk; a span must say what it ranked
                raise _Rejected(f"{DOCUMENTS}.{rank}.document.content: empty")
            item = one
        if "score" in doc:
            score = _value(doc["score"])
        else:  # LangChain's: a `score` in the document's metadata, where the hook reads it too
            score = _json_object(doc.get("metadata")).get("score")
            score = score if isinstance(score, int | float) and abs(score) <= MAX_SCORE else None
        if isinstance(score, int | float) and not isinstance(score, bool):
            item["score"] = float(score)
        out.append(item)
    return out


def _fallback_id(pid: Any, doc: dict[str, AnyValue]) -> Any:
    """An id that is not a string: a number as text, else `id` in the document's metadata."""
    if isinstance(pid, int | float) and not isinstance(pid, bool):
        return str(pid)
    meta_id = _json_object(doc.get("metadata")).get("id")
    return str(meta_id) if isinstance(meta_id, str | int) else None


def _json_object(raw: Any) -> dict[str, Any]:
    """The JSON object of a `metadata` attribute (the span's or a document's), else {}."""
    if isinstance(raw, AnyValue):
        raw = _value(raw)
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


class _Lookup:
    """Attribute values of one span: its own, then its resource's, then `metadata.*` keys
    (none of those when `own`: a nested span inherits them from the enclosing call)."""

    def __init__(
        self, span: Span, attrs: dict[str, AnyValue], resource: dict[str, Any], own: bool = False
    ) -> None:
        self.span, self.attrs, self.resource, self.own = span, attrs, resource, own
        self._metadata: dict[str, Any] | None = None

    def get(self, name: str) -> Any:
        if JOIN in name:  # the parts present, joined; nothing when the first is absent
            parts = [self.get(part) for part in name.split(JOIN)]
            if parts[0] is None or parts[0] == "":
                return None
            return ":".join(str(p) for p in parts if p is not None and p != "")
        if name == SPAN_NAME:
            return self.span.name or None
        if name in self.attrs:
            return _value(self.attrs[name])
        if name in self.resource:
            return self.resource[name]
        if name.startswith(METADATA + ".") and not self.own:
            return self.metadata().get(name[len(METADATA) + 1 :])
        return None

    def first(self, names: tuple[str, ...]) -> Any:
        for name in names:
            value = self.get(name)
            if value is not None and value != "":
                return value
        return None

    def label(self, names: tuple[str, ...], repairs: Counter[str]) -> str | None:
        """A label value repaired (`label_value`) and counted; the SDK's `unknown_service` last."""
        unknown = None
        for name in names:
            value = self.get(name)
            text = label_value(value)
            if text and text.startswith(UNKNOWN_SERVICE):
                unknown = unknown or text
            elif text:
                if text != str(value):
                    repairs["labels_repaired"] += 1
                return text
        if unknown:
            repairs[UNKNOWN_SERVICE] += 1
        return unknown

    def metadata(self) -> dict[str, Any]:
        """OpenInference's `metadata` attribute (a JSON object), where apps put their own keys."""
        if self._metadata is None:
            self._metadata = _json_object(self.get(METADATA))
        return self._metadata


def _integer(value: Any) -> Any:
    """`k` from an attribute: an int, an integral float or a decimal string; else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    return value


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)
