"""The Python SDK: `RetrievalMonitor.record()` from a RAG app, never touching its latency.

`recorder` holds the buffer and starts the `encoder` and `sender` threads; `events` builds and
validates wire events (pure).
"""

from ragmon.client.events import InvalidEvent, build_event, encode_event, passage
from ragmon.client.recorder import RetrievalMonitor

__all__ = ["InvalidEvent", "RetrievalMonitor", "build_event", "encode_event", "passage"]
