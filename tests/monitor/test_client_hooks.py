"""The LangChain and LlamaIndex hooks, with the real frameworks, the SDK and the real API."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.retrievers import BaseRetriever as LlamaRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ragmon.client import RetrievalMonitor
from ragmon.client.langchain import MAX_OPEN_RUNS, RagmonCallbackHandler
from ragmon.client.llamaindex import RagmonEventHandler

pytestmark = pytest.mark.server  # the real API over HTTP

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


# ---- every shape a real retriever returns arrives (the real API over HTTP, read back) ---------


def test_every_shape_and_size_of_result_arrives_and_reads_back(api, monitor):
    """Short, empty, string, oversized and labelled results are sent, not dropped: each comes
    back from GET /v1/retrievals/{id} with its passages, trace_id and metadata."""
    docs = [Document(page_content=t, metadata={"id": f"d{i}"}) for i, t in enumerate(TEXTS)]
    nodes = FixedNodes().retrieve("reset password")
    cases = {  # name: (passages, k, expected passage ids in order)
        "langchain": (docs, 4, [f"d{i}" for i in range(6)]),
        "langchain_scored": ([(d, 0.5) for d in docs[:2]], 4, ["d0", "d1"]),  # short: M < K
        "llamaindex": (nodes, 3, [f"n{i}" for i in range(6)]),
        "strings": (TEXTS[:3], 3, [_sha(t) for t in TEXTS[:3]]),
        "dicts": (
            [{"id": "a", "text": "x", "score": 2.0}, {"id": "b", "text": "y"}],
            2,
            ["a", "b"],
        ),
        "tuples": ([("a", "x"), ("b", "y", 0.1)], 5, ["a", "b"]),
        "empty": ([], 5, []),
        "none": (None, 1, []),
        "empty_chunk": (["", "real text"], 2, [_sha("real text")]),
        "long_chunk": (["w " * 20_000], 1, [_sha("w " * 20_000)]),
    }
    ids = {}
    for name, (passages, k, _) in cases.items():
        ids[name] = monitor.record(
            f"query {name}",
            passages,
            k,
            labels={"retriever": "r1", "experiment": name},  # an unknown key: metadata
            trace_id=f"trace-{name}",
            metadata={"user_tier": "gold"},
        )
    assert monitor.flush(10)
    stats = monitor.stats()
    assert stats["sent"] == len(cases) and stats["invalid"] == stats["rejected"] == 0, stats
    assert stats["passages_skipped_empty"] == 1 and stats["passages_truncated"] == 1
    assert stats["labels_to_metadata"] == len(cases)
    for name, (_, k, expected) in cases.items():
        r = api.client.get(f"/v1/retrievals/{ids[name]}", params={"app": "hooks"})
        assert r.status_code == 200, (name, r.text)
        got = r.json()
        assert got["query"] == f"query {name}" and got["k"] == k
        assert [p["id"] for p in got["passages"]] == expected, name
        assert got["trace_id"] == f"trace-{name}"
        assert got["metadata"] == {"user_tier": "gold", "experiment": name}
        assert got["labels"]["retriever"] == "r1"
    long = api.client.get(f"/v1/retrievals/{ids['long_chunk']}", params={"app": "hooks"}).json()
    assert len(long["passages"][0]["text"]) == 32768


def test_hooks_pass_the_run_id_as_trace_id(api, monitor):
    handler, seen = RagmonCallbackHandler(monitor), RunIds()
    Fixed().invoke("langchain run", config={"callbacks": [handler, seen]})
    Fixed().invoke(
        "langchain tagged",
        config={"callbacks": [handler], "metadata": {"trace_id": "req-42"}},
    )
    li = RagmonEventHandler(monitor=monitor)
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(li)
    try:
        FixedNodes().retrieve("llamaindex run")
    finally:
        dispatcher.event_handlers.remove(li)
    assert monitor.flush(10)
    events = {e["query"]: e for e in stored(api)}
    assert events["langchain run"]["trace_id"] == str(seen.run_ids[0])
    assert events["langchain tagged"]["trace_id"] == "req-42"
    assert events["llamaindex run"]["trace_id"].startswith("FixedNodes.retrieve-")  # span_id


class RunIds(BaseCallbackHandler):
    """Notes the run id LangChain gives each retriever run."""

    def __init__(self) -> None:
        self.run_ids: list[uuid.UUID] = []

    def on_retriever_start(self, serialized, query, *, run_id, **kwargs) -> None:
        self.run_ids.append(run_id)


def _sha(text: str) -> str:
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()
