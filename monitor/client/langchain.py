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
A retriever run inside another one (an ensemble's members, a wrapper's inner retriever) is
skipped, or with `nested="own"` recorded under its own run name, never under the metadata it
inherited: the same rule as the OTLP receiver's `RAGMON_OTLP_NESTED`.
The handler only calls `RetrievalMonitor.record()`, which never blocks and never raises.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple
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
        nested: Literal["skip", "own"] = "skip",
    ) -> None:
        if nested not in ("skip", "own"):
            raise ValueError("nested must be 'skip' or 'own'")
        self.monitor = monitor
        self.k = k
        self.labels = dict(labels or {})
        self.nested = nested
        self._open: dict[UUID, _Run] = {}
        self._inside: dict[UUID, None] = {}  # runs under an open retriever run

    def _under_a_retriever(self, parent_run_id: UUID | None) -> bool:
        return parent_run_id is not None and (
            parent_run_id in self._open or parent_run_id in self._inside
        )

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if self._under_a_retriever(parent_run_id):
            _bounded_put(self._inside, run_id, None)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._inside.pop(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._inside.pop(run_id, None)

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        nested = self._under_a_retriever(parent_run_id)
        if nested and self.nested == "skip":
            _bounded_put(self._inside, run_id, None)
            return
        _bounded_put(self._open, run_id, _Run(query, time.time(), metadata, name, nested))

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        self._inside.pop(run_id, None)
        run = self._open.pop(run_id, None)
        if run is None:
            return
        labels, context, k = self.labels, run.metadata, self.k
        if run.nested:  # its own name; what the enclosing call set is not about this retriever
            labels = {**labels, "retriever": run.name or "default"}
            context = {key: v for key, v in (context or {}).items() if key not in _INHERITED}
            k = None
        record_retrieval(
            self.monitor,
            run.query,
            documents,
            k=k,
            labels=labels,
            context=context,
            timestamp=run.at,
            trace_id=run_id,
        )

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._inside.pop(run_id, None)
        self._open.pop(run_id, None)


_INHERITED = frozenset({"index", "retriever", "k"})  # metadata a nested retriever never takes


class _Run(NamedTuple):
    """A retriever run awaiting its end."""

    query: str
    at: float
    metadata: dict[str, Any] | None
    name: str | None
    nested: bool


def _bounded_put(runs: dict[UUID, Any], run_id: UUID, value: Any) -> None:
    """A run that never ends is dropped once MAX_OPEN_RUNS others wait."""
    if len(runs) >= MAX_OPEN_RUNS:
        runs.pop(next(iter(runs)), None)
    runs[run_id] = value
