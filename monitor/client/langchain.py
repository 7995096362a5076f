"""LangChain hook: a callback handler that records every retriever call through the SDK.

    from ragmon.client import RetrievalMonitor
    from ragmon.client.langchain import RagmonCallbackHandler

    monitor = RetrievalMonitor("http://ragmon:8000", labels={"app": "support-bot"})
    handler = RagmonCallbackHandler(monitor, labels={"retriever": "bm25"})
    docs = retriever.invoke(question, config={"callbacks": [handler]})

The query comes from `on_retriever_start`, the ranked documents from `on_retriever_end`. Run
metadata (`retriever.with_config(metadata={"retriever": "bm25", "k": 4})`) may set the labels
and `k`; without `k`, every document returned counts as in the prompt. The event's `trace_id`
is the retriever run's `run_id` (as LangSmith shows it), unless run metadata sets `trace_id`.
The handler only calls `RetrievalMonitor.record()`, which never blocks and never raises.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from ragmon.client.hooks import record_retrieval
from ragmon.client.recorder import RetrievalMonitor

try:
    from langchain_core.callbacks import BaseCallbackHandler
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "ragmon.client.langchain needs langchain-core: pip install 'ragmon[langchain]'"
    ) from exc

MAX_OPEN_RUNS = 10_000  # started retrievals awaiting their end (a run that never ends is dropped)


class RagmonCallbackHandler(BaseCallbackHandler):
    """Records each retriever run (query, ranked documents) with `monitor.record()`."""

    raise_error = False
    run_inline = True  # record() does no I/O: no executor hop in async chains

    def __init__(
        self,
        monitor: RetrievalMonitor,
        *,
        k: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.monitor = monitor
        self.k = k
        self.labels = dict(labels or {})
        self._open: dict[UUID, tuple[str, float, dict[str, Any] | None]] = {}

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if len(self._open) >= MAX_OPEN_RUNS:
            self._open.pop(next(iter(self._open)), None)
        self._open[run_id] = (query, time.time(), metadata)

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        started = self._open.pop(run_id, None)
        if started is None:
            return
        query, at, metadata = started
        record_retrieval(
            self.monitor,
            query,
            documents,
            k=self.k,
            labels=self.labels,
            context=metadata,
            timestamp=at,
            trace_id=run_id,
        )

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._open.pop(run_id, None)
