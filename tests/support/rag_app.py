"""The retrieval step of a small RAG app, run in its own process by the integration tests.

    python -m tests.support.rag_app MODE RAGMON_URL [nested [skip|own]]

Two real retrievers over the same small knowledge base: a LangChain `BaseRetriever` ranking
with BM25 (rank_bm25), and a LlamaIndex `VectorStoreIndex` retriever over a bag-of-words
embedding (deterministic, no model to download). MODE says how ragmon hears of them:

- `otlp-protobuf` / `otlp-json`: OpenInference's instrumentors and an OpenTelemetry SDK
  exporting OTLP/HTTP (protobuf with gzip, or JSON) to RAGMON_URL/v1/traces. No ragmon code:
  the process checks at the end that it never imported `ragmon`. `otlp-simple`: protobuf
  through a `SimpleSpanProcessor` (each span exported alone as it ends: Phoenix's default);
  `otlp-split`: through a `BatchSpanProcessor` of 2 spans a batch (batches cut between inner
  and outer spans).
- `hooks`: ragmon's LangChain callback handler and LlamaIndex event handler, through the SDK.

`nested`: retrievers that call others, as apps build them: a LangChain `EnsembleRetriever`
over two BM25 retrievers, a custom LangChain retriever that re-ranks an inner one (invoked with
`run_manager.get_child()`, as LangChain documents), and a LlamaIndex retriever; the hooks run
with `nested=` the last argument (the server's `RAGMON_OTLP_NESTED` is the test's to set).

Prints one JSON line per retrieval, `{"framework", "query", "texts"}` (the ranking the app
got), then `{"imported_ragmon": bool}`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from typing import Any

KB = [
    "To restore a deleted folder, open Backups, choose History and pick the folder's last copy.",
    "Backups run every night at 02:00 in the account's time zone and keep 30 days of history.",
    "Deleted files stay in the trash for 30 days; empty the trash to free their storage.",
    "Invoices are sent on the first of the month to the billing contact's email address.",
    "To change the billing contact, open Settings, then Billing, and edit the contact email.",
    "A refund for an annual plan is prorated to the unused months and paid within ten days.",
    "Two-factor authentication is turned on under Security with an authenticator app.",
    "If you lose your two-factor device, use one of the recovery codes saved at setup.",
    "Shared links expire after 7 days unless the owner sets another expiry date.",
    "Storage quotas are per workspace; admins can buy extra storage in 100 GB steps.",
    "The desktop app syncs changes every five minutes or at once when you press Sync.",
    "Sync conflicts keep both versions; the newer copy gets the device name as suffix.",
]
LANGCHAIN_QUERIES = [
    ("how do I restore a deleted folder", "recovery"),
    ("when are invoices sent", "billing"),
    ("how do I change the billing contact email", "billing"),
    ("what happens to shared links after a week", "sharing"),
]
LLAMAINDEX_QUERIES = [
    ("lost my two-factor device recovery codes", "security"),
    ("how often does the desktop app sync", "sync"),
    ("refund for an annual plan", "billing"),
]
INDEX = "kb-v1"
TOP = 4


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def langchain_retriever() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from rank_bm25 import BM25Okapi

    class BM25(BaseRetriever):
        """The top `k` documents of `docs` by BM25 (Okapi) score."""

        docs: list[Document]
        k: int = TOP

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            scores = BM25Okapi([words(d.page_content) for d in self.docs]).get_scores(words(query))
            order = sorted(range(len(self.docs)), key=lambda i: (-scores[i], i))
            return [self.docs[i] for i in order[: self.k]]

    docs = [Document(page_content=t, metadata={"id": f"kb-{i:02d}"}) for i, t in enumerate(KB)]
    return BM25(docs=docs)


def nested_retrievers() -> dict[str, Any]:
    """LangChain retrievers over other retrievers, by the `retriever` label the app gives them."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class Reranked(BaseRetriever):
        """The inner retriever's top documents, shortest first: a wrapper that changes the
        ranking, so the inner one's measures differ from its own."""

        inner: BaseRetriever
        k: int = TOP - 1

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            docs = self.inner.invoke(query, config={"callbacks": run_manager.get_child()})
            return sorted(docs, key=lambda d: len(d.page_content))[: self.k]

    halves = [langchain_retriever(), langchain_retriever()]
    halves[1].docs = halves[1].docs[::-1]  # the same documents, ties broken the other way
    return {
        "ensemble": EnsembleRetriever(retrievers=halves, weights=[0.5, 0.5]),
        "reranked": Reranked(inner=langchain_retriever()),
    }


def llamaindex_retriever() -> Any:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode

    class BagOfWords(BaseEmbedding):
        """Hashed bag-of-words vectors, L2-normalised: deterministic and offline."""

        dims: int = 256

        def _vector(self, text: str) -> list[float]:
            v = [0.0] * self.dims
            for w in words(text):
                v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dims] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            return [x / norm for x in v]

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._vector(text)

    nodes = [TextNode(text=t, id_=f"kb-{i:02d}") for i, t in enumerate(KB)]
    index = VectorStoreIndex(nodes, embed_model=BagOfWords(model_name="bag-of-words"))
    return index.as_retriever(similarity_top_k=TOP)


def otlp(mode: str, url: str) -> Any:
    """An OpenTelemetry tracer provider exporting to ragmon, with OpenInference instrumented."""
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if mode != "otlp-json":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", compression=Compression.Gzip)
    else:
        from opentelemetry.exporter.otlp.json.http.trace_exporter import (
            OTLPSpanExporter as JsonExporter,
        )

        exporter = JsonExporter(endpoint=f"{url}/v1/traces")
    resource = Resource.create({"service.name": f"rag-{mode.removeprefix('otlp-')}",
                                "rag.index": INDEX})  # fmt: skip
    provider = TracerProvider(resource=resource)
    if mode == "otlp-simple":
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif mode == "otlp-split":
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=2))
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    return provider


def run(mode: str, url: str, kind: str = "plain", nested: str = "skip") -> None:
    li = llamaindex_retriever()
    if kind == "nested":
        langchain = [(query, segment, name, r) for name, r in nested_retrievers().items()
                     for query, segment in LANGCHAIN_QUERIES]  # fmt: skip
    else:
        lc = langchain_retriever()
        langchain = [(query, segment, "bm25", lc) for query, segment in LANGCHAIN_QUERIES]
    out: list[dict] = []
    if mode == "hooks":
        from llama_index.core.instrumentation import get_dispatcher
        from llama_index.core.instrumentation.dispatcher import instrument_tags

        from ragmon.client import RetrievalMonitor
        from ragmon.client.langchain import RagmonCallbackHandler
        from ragmon.client.llamaindex import RagmonEventHandler

        monitor = RetrievalMonitor(url, labels={"app": "rag-hooks"})
        handler = RagmonCallbackHandler(monitor, labels={"index": INDEX}, nested=nested)  # type: ignore[arg-type]
        get_dispatcher().add_event_handler(
            RagmonEventHandler(monitor=monitor, labels={"index": INDEX})
        )
        for query, segment, name, retriever in langchain:
            meta = {"retriever": name, "segment": segment}
            docs = retriever.with_config(metadata=meta, callbacks=[handler]).invoke(query)
            out.append({"framework": "langchain", "query": query, "retriever": name,
                        "texts": [d.page_content for d in docs]})  # fmt: skip
        for query, segment in LLAMAINDEX_QUERIES:
            with instrument_tags({"retriever": "vector", "segment": segment}):
                nodes = li.retrieve(query)
            out.append({"framework": "llamaindex", "query": query, "retriever": "vector",
                        "texts": [n.node.get_content() for n in nodes]})  # fmt: skip
        monitor.close(timeout=30)
        stats = monitor.stats()
        assert stats["sent"] == stats["recorded"] >= len(out), stats  # more: nested, own names
    else:
        from openinference.instrumentation import using_metadata

        provider = otlp(mode, url)
        for query, segment, name, retriever in langchain:
            meta = {"retriever": name, "segment": segment}
            docs = retriever.with_config(metadata=meta).invoke(query)
            out.append({"framework": "langchain", "query": query, "retriever": name,
                        "texts": [d.page_content for d in docs]})  # fmt: skip
        for query, segment in LLAMAINDEX_QUERIES:
            with using_metadata({"retriever": "vector", "segment": segment}):
                nodes = li.retrieve(query)
            out.append({"framework": "llamaindex", "query": query, "retriever": "vector",
                        "texts": [n.node.get_content() for n in nodes]})  # fmt: skip
        provider.shutdown()  # flushes the batch processor: every span is exported
    for line in out:
        print(json.dumps(line))
    print(json.dumps({"imported_ragmon": any(m.split(".")[0] == "ragmon" for m in sys.modules)}))


if __name__ == "__main__":
    run(*sys.argv[1:])
