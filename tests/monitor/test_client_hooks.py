"""The LangChain and LlamaIndex hooks, with the real frameworks, the SDK and the real API."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.retrievers import BaseRetriever as LlamaRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from monitor.client import RetrievalMonitor
from monitor.client.langchain import MAX_OPEN_RUNS, RagmonCallbackHandler
from monitor.client.llamaindex import RagmonEventHandler

TEXTS = [f"passage {i} about password resets" for i in range(6)]


class Fixed(BaseRetriever):
    """Returns TEXTS in order, or fails when asked to."""

    fail: bool = False

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.fail:
            raise RuntimeError("index offline")
        return [Document(page_content=t, metadata={"id": f"d{i}"}) for i, t in enumerate(TEXTS)]


class FixedNodes(LlamaRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1 - i / 10)
                for i, t in enumerate(TEXTS)]  # fmt: skip


def stored(api) -> list[dict]:
    client = api.store.client
    return [json.loads(client.hget(key, "p")) for key in client.scan_iter("ragmon:ev:*")]


@pytest.fixture
def monitor(api):
    m = RetrievalMonitor(api.url, labels={"app": "hooks"})
    yield m
    m.close(timeout=5)


def test_langchain_sync_async_and_failing_runs(api, monitor):
    handler = RagmonCallbackHandler(monitor, labels={"index": "kb"})
    retriever = Fixed().with_config(callbacks=[handler], metadata={"retriever": "bm25", "k": 2})
    retriever.invoke("reset password")
    asyncio.run(Fixed().ainvoke("reset password async", config={"callbacks": [handler]}))
    with pytest.raises(RuntimeError):
        Fixed(fail=True).invoke("offline", config={"callbacks": [handler]})
    assert monitor.flush(10) and handler._open == {}  # the failed run left nothing behind
    events = {e["query"]: e for e in stored(api)}
    assert set(events) == {"reset password", "reset password async"}
    sync, async_ = events["reset password"], events["reset password async"]
    assert [p["id"] for p in sync["passages"]] == [f"d{i}" for i in range(6)]
    assert sync["k"] == 2 and async_["k"] == 6  # run metadata, else every document
    assert sync["labels"] == {"app": "hooks", "index": "kb", "retriever": "bm25",
                              "segment": "default"}  # fmt: skip
    assert async_["labels"]["retriever"] == "default"


def test_langchain_runs_that_never_end_are_bounded(monitor):
    handler = RagmonCallbackHandler(monitor)
    for _ in range(MAX_OPEN_RUNS + 5):
        handler.on_retriever_start({}, "q", run_id=uuid.uuid4())
    assert len(handler._open) == MAX_OPEN_RUNS


def test_llamaindex_retrievals_with_tags(api, monitor):
    handler = RagmonEventHandler(monitor=monitor, labels={"index": "kb"}, k=3)
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    try:
        with instrument_tags({"retriever": "vector", "segment": "billing"}):
            FixedNodes().retrieve("reset password")
        FixedNodes().retrieve(QueryBundle("a query bundle"))
    finally:
        dispatcher.event_handlers.remove(handler)
    assert monitor.flush(10)
    events = {e["query"]: e for e in stored(api)}
    tagged, bundle = events["reset password"], events["a query bundle"]
    assert [p["id"] for p in tagged["passages"]] == [f"n{i}" for i in range(6)]
    assert [p["score"] for p in tagged["passages"]][:2] == [1.0, 0.9]
    assert tagged["k"] == bundle["k"] == 3
    assert tagged["labels"]["retriever"] == "vector" and tagged["labels"]["segment"] == "billing"
    assert bundle["labels"] == {"app": "hooks", "index": "kb", "retriever": "default",
                                "segment": "default"}  # fmt: skip
