"""OpenTelemetry GenAI retrieval spans, read as OpenInference retriever spans: no I/O.

The GenAI semantic conventions (open-telemetry/semantic-conventions#2924) name a retrieval span
by `gen_ai.operation.name` = `retrieval`, its query `gen_ai.retrieval.query.text`, its `k`
`gen_ai.retrieval.top_k` (earlier `gen_ai.request.top_k`), its index `gen_ai.data_source.id`,
and its ranking `gen_ai.retrieval.documents`: a list of `{"id", "score", ...}` objects,
structured or as a JSON string (the Python SDK has no structured attributes). The conventions
require only id and score; ragmon judges the text, so a document must also carry `content`
(or `text`). Such a span is given OpenInference's query and documents, so `ragmon.api.spans`
maps it, nests it and rejects it exactly as an OpenInference retriever span.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

OPERATION = "gen_ai.operation.name"
RETRIEVAL = "retrieval"
QUERY_TEXT = "gen_ai.retrieval.query.text"
DOCUMENTS = "gen_ai.retrieval.documents"
TOP_K = ("gen_ai.retrieval.top_k", "gen_ai.request.top_k")
DATA_SOURCE = "gen_ai.data_source.id"
TEXT_KEYS = ("content", "text")  # beside the conventions' id and score
OPT_IN = "content capture is opt-in in the conventions: turn it on in the instrumentation"


class NotAnEvent(ValueError):
    """A GenAI retrieval span that cannot be an event (the message says why)."""


def is_retrieval(attrs: dict[str, AnyValue]) -> bool:
    """A GenAI retrieval span: its operation, or else its retrieval attributes, say so."""
    op = attrs.get(OPERATION)
    if op is not None and op.WhichOneof("value") == "string_value":
        return op.string_value.lower() == RETRIEVAL
    return QUERY_TEXT in attrs or DOCUMENTS in attrs


def as_openinference(
    attrs: dict[str, AnyValue], docs: dict[int, dict[str, AnyValue]] | None, query_key: str
) -> dict[int, dict[str, AnyValue]]:
    """Put the span's GenAI query under `query_key` and return its documents by rank, in
    OpenInference's fields (`id`, `content`, `score`); OpenInference's own, when the span also
    has them, win. Raises `NotAnEvent` when the query or the documents were not captured."""
    if query_key not in attrs:
        if QUERY_TEXT not in attrs:
            raise NotAnEvent(f"{QUERY_TEXT}: missing (the query; {OPT_IN})")
        attrs[query_key] = attrs[QUERY_TEXT]
    if docs is not None:
        return docs
    if DOCUMENTS not in attrs:
        raise NotAnEvent(f"{DOCUMENTS}: missing (the ranking; {OPT_IN})")
    return _documents(attrs[DOCUMENTS])


def _documents(raw: AnyValue) -> dict[int, dict[str, AnyValue]]:
    kind = raw.WhichOneof("value")
    items: list[Any]
    if kind == "string_value":
        try:
            data = json.loads(raw.string_value)
        except (ValueError, RecursionError):
            raise NotAnEvent(f"{DOCUMENTS}: not JSON") from None
        if not isinstance(data, list):
            raise NotAnEvent(f"{DOCUMENTS}: not a list of documents")
        items = [_from_json(x, i) for i, x in enumerate(data)]
    elif kind == "array_value":
        items = []
        for i, x in enumerate(raw.array_value.values):
            if x.WhichOneof("value") != "kvlist_value":
                raise NotAnEvent(f"{DOCUMENTS}[{i}]: not an object")
            items.append({kv.key: kv.value for kv in x.kvlist_value.values})
    else:
        raise NotAnEvent(f"{DOCUMENTS}: not a list of documents")
    out = {}
    for rank, item in enumerate(items):
        text = next((item[k] for k in TEXT_KEYS if k in item), None)
        if text is None:
            raise NotAnEvent(
                f"{DOCUMENTS}[{rank}]: no content (ragmon judges the text: send `content` "
                "beside `id` and `score`)"
            )
        doc = {"content": text}
        for name in ("id", "score"):
            if name in item:
                doc[name] = item[name]
        out[rank] = doc
    return out


def _from_json(item: Any, rank: int) -> dict[str, AnyValue]:
    if not isinstance(item, dict):
        raise NotAnEvent(f"{DOCUMENTS}[{rank}]: not an object")
    return {k: v for k, v in ((k, _any(v)) for k, v in item.items()) if v is not None}


def _any(value: Any) -> AnyValue | None:
    """A JSON scalar as an `AnyValue`; None for what a document field cannot be."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int) and abs(value) < 2**63:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return None
