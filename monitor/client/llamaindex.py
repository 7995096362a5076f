"""LlamaIndex hook: an instrumentation event handler that records every retrieval via the SDK.

    from llama_index.core.instrumentation import get_dispatcher
    from ragmon.client import RetrievalMonitor
    from ragmon.client.llamaindex import RagmonEventHandler

    monitor = RetrievalMonitor("http://ragmon:8000", labels={"app": "support-bot"})
    get_dispatcher().add_event_handler(RagmonEventHandler(monitor=monitor))

Every `BaseRetriever.retrieve()` (alone or inside a query engine) emits a `RetrievalEndEvent`
with the query and the ranked nodes: one event each. `instrument_tags({"retriever": "bm25"})`
around a call may set the labels and `k`; without `k`, every node returned counts as in the
prompt. The event's `trace_id` is the retrieval's instrumentation `span_id`, unless the
tags set `trace_id`. The handler only calls `RetrievalMonitor.record()`, which never blocks
and never raises.
"""

from __future__ import annotations

from typing import Any

from ragmon.client.hooks import record_retrieval
from ragmon.client.recorder import RetrievalMonitor

try:
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events import BaseEvent
    from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "ragmon.client.llamaindex needs llama-index-core: pip install 'ragmon[llamaindex]'"
    ) from exc


class RagmonEventHandler(BaseEventHandler):
    """Records each `RetrievalEndEvent` (query, ranked nodes) with `monitor.record()`."""

    monitor: RetrievalMonitor
    k: int | None = None
    labels: dict[str, str] = {}

    @classmethod
    def class_name(cls) -> str:
        return "RagmonEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if not isinstance(event, RetrievalEndEvent):
            return
        query = event.str_or_query_bundle
        record_retrieval(
            self.monitor,
            query if isinstance(query, str) else getattr(query, "query_str", None),
            event.nodes,
            k=self.k,
            labels=self.labels,
            context=event.tags,
            timestamp=event.timestamp,
            trace_id=event.span_id,
        )
