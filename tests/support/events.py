"""Small, valid events for tests (built here, not copied from any data set)."""

from __future__ import annotations

import random
import uuid
from typing import Any


def make_event(
    n: int = 10,
    k: int = 5,
    grades: list[int | None] | None = None,
    labels: dict[str, str] | None = None,
    seed: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """An event with `n` passages; `grades` puts known grades on them (None: judged)."""
    rng = random.Random(seed)
    topics = ["password reset", "invoice refund", "sync error", "sso login", "api quota"]
    topic = rng.choice(topics)
    passages = []
    for i in range(n):
        text = f"passage {i} about {rng.choice(topics)} and {topic if i % 3 == 0 else 'other'}"
        p: dict[str, Any] = {"id": f"p{seed}-{i}", "text": text, "score": round(1 - i / n, 3)}
        if grades is not None and grades[i] is not None:
            p["grade"] = grades[i]
        passages.append(p)
    event = {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "query": f"how to fix {topic}",
        "k": k,
        "passages": passages,
        "labels": labels or {"app": "test", "retriever": "bm25"},
    }
    event.update(extra)
    return event


def ref(event: dict[str, Any]) -> str:
    """The store's `event_ref` of an event as sent (ids are scoped by `labels.app`)."""
    from ragmon.core.wire import event_ref

    return event_ref(event.get("labels", {}).get("app", "default"), event["event_id"])


def result_url(event: dict[str, Any]) -> str:
    """`GET /v1/retrievals/{id}?app=...` for an event as sent."""
    app = event.get("labels", {}).get("app", "default")
    return f"/v1/retrievals/{event['event_id']}?app={app}"
