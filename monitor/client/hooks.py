"""What the framework hooks (`langchain`, `llamaindex`) share: one retrieval → one `record()`.

Labels and `k` may come from the framework's own per-call context (LangChain run `metadata`,
LlamaIndex `instrument_tags`), with the same keys the OTLP receiver reads from OpenInference's
`metadata`: `app`, `index`, `retriever`, `segment` and `k`; a `trace_id` there replaces the
framework's run id as the event's `trace_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragmon.client.recorder import RetrievalMonitor
from ragmon.core.wire import LABEL_KEYS, MAX_K, MAX_PASSAGES, default_k


def record_retrieval(
    monitor: RetrievalMonitor,
    query: Any,
    passages: Any,
    *,
    k: int | None,
    labels: Mapping[str, str],
    context: Mapping[str, Any] | None,
    timestamp: Any = None,
    trace_id: Any = None,
) -> None:
    """Record one retrieval (the top MAX_PASSAGES passages); never raises, never blocks.

    `trace_id`: the framework's id of the run (a `trace_id` in the context wins)."""
    try:
        ranked = list(passages or ())[:MAX_PASSAGES]
        merged = dict(labels)
        if context:
            for key in LABEL_KEYS:
                if isinstance(context.get(key), str):
                    merged[key] = context[key]
            asked = context.get("k")
            if isinstance(asked, int) and not isinstance(asked, bool) and 1 <= asked <= MAX_K:
                k = asked
            if isinstance(context.get("trace_id"), str):
                trace_id = context["trace_id"]
        k = k or default_k(len(ranked))
    except Exception:  # record() counts and logs (once a minute) what it cannot read
        ranked, merged, k = passages, dict(labels), k or 1
    monitor.record(query, ranked, k=k, labels=merged, timestamp=timestamp, trace_id=trace_id)
