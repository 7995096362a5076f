"""Demo traffic: deterministic rankings of the demo knowledge base by three retrievers.

Each retriever is a noisy ranker of the author-intended grades (`queries.jsonl`): a passage's
score is `means[grade] + noise * gauss()`, so the retrievers differ only in how well their
scores separate answers from on-topic distractors and unrelated passages:

- `hybrid-v2` (good): answers well above distractors, little noise;
- `bm25` (medium): distractors that share the topic words score almost as high as answers;
- `dense-v1` (worse): distractors outscore answers and a third of the answers are missed.

`demo_events` adds a regression: in the most recent 7 UTC days `bm25` ranks like a broken
index rebuild (answers pushed below distractors), while the other two stay as they were.

Pure functions: the only I/O is reading the packaged data files with `importlib.resources`.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

__all__ = [
    "DEPTH",
    "K",
    "LABELS",
    "PROFILES",
    "REGRESSED",
    "REGRESSION_DAYS",
    "RETRIEVERS",
    "Profile",
    "demo_events",
    "load_events",
    "load_golden",
    "load_kb",
    "load_queries",
    "make_event",
]

K = 5
DEPTH = 2 * K  # passages sent per event, so F_e can be computed
RETRIEVERS = ("hybrid-v2", "bm25", "dense-v1")
LABELS = {"app": "support-bot", "index": "kb-2026-10"}
REGRESSION_DAYS = 7
MAX_DAYS = 30  # events stay well inside the API's 35-day limit
_POOL = 16  # candidates scored per event: every graded passage plus unrelated ones
_EVENT_NAMESPACE = uuid.UUID("6f1c2a4e-3b5d-4e8f-9a0b-1c2d3e4f5a6b")


@dataclass(frozen=True)
class Profile:
    """How a retriever scores a passage of each intended grade (0-3)."""

    means: tuple[float, float, float, float]
    noise: float
    miss: float = 0.0  # chance that a relevant (grade >= 2) passage is not retrieved at all
    scale: tuple[float, float] = (1.0, 0.0)  # reported score = a * raw + b, for realism


PROFILES: dict[str, Profile] = {
    "hybrid-v2": Profile(means=(0.0, 1.0, 2.3, 3.0), noise=0.6, scale=(0.25, 0.1)),
    "bm25": Profile(means=(0.2, 1.6, 1.6, 1.9), noise=0.9, scale=(3.0, 8.0)),
    "dense-v1": Profile(means=(0.6, 1.5, 1.0, 1.1), noise=1.0, miss=0.35, scale=(0.08, 0.55)),
}
#: Rankings of the regression window, by retriever (the others keep their profile).
REGRESSED: dict[str, Profile] = {
    "bm25": Profile(means=(0.2, 1.8, 0.7, 0.8), noise=0.7, scale=(3.0, 8.0)),
}


def _read_jsonl(name: str) -> list[dict[str, Any]]:
    text = resources.files("ragmon.demo").joinpath("data", name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_kb() -> list[dict[str, Any]]:
    """The passages: `{id, topic, segment, text}`."""
    return _read_jsonl("kb.jsonl")


def load_queries() -> list[dict[str, Any]]:
    """The queries: `{id, query, segment, grades}` (intended grades > 0 by passage id)."""
    return _read_jsonl("queries.jsonl")


def load_events() -> list[dict[str, Any]]:
    """One HTTP event per query and retriever, without grades."""
    return _read_jsonl("events.jsonl")


def load_golden() -> list[dict[str, Any]]:
    """The events of `load_events` with the intended grade on every passage."""
    return _read_jsonl("golden.jsonl")


def make_event(
    query: dict[str, Any],
    texts: dict[str, str],
    retriever: str,
    seed: int | str,
    *,
    degraded: bool = False,
    with_grades: bool = False,
) -> dict[str, Any]:
    """One event: the top `DEPTH` passages of `texts` for `query` as `retriever` ranks them.

    `query` is a `queries.jsonl` record; `texts` maps every passage id to its text.
    """
    rng = random.Random(f"{seed}")
    profile = (REGRESSED.get(retriever) if degraded else None) or PROFILES[retriever]
    grades: dict[str, int] = query["grades"]
    candidates = [
        pid for pid in sorted(grades) if not (grades[pid] >= 2 and rng.random() < profile.miss)
    ]
    others = [pid for pid in texts if pid not in grades]
    candidates += rng.sample(others, max(0, _POOL - len(candidates)))
    scored = []
    for pid in candidates:
        g = grades.get(pid, 0)
        scored.append((profile.means[g] + profile.noise * rng.gauss(0.0, 1.0), pid, g))
    scored.sort(key=lambda s: (-s[0], s[1]))
    a, b = profile.scale
    passages = []
    for raw, pid, g in scored[:DEPTH]:
        p: dict[str, Any] = {"id": pid, "text": texts[pid], "score": round(a * raw + b, 4)}
        if with_grades:
            p["grade"] = g
        passages.append(p)
    return {
        "query": query["query"],
        "k": K,
        "passages": passages,
        "labels": {**LABELS, "retriever": retriever, "segment": query["segment"]},
    }


def demo_events(
    days: int = 14,
    per_day: int = 60,
    seed: int = 2026,
    now: datetime | None = None,
    *,
    with_grades: bool = False,
) -> list[dict[str, Any]]:
    """`days * per_day` events spread over the last `days` UTC days (today included).

    Retrievers take turns, queries are drawn at random; `event_id` is a uuid5 of the seed and
    the event's index, so replaying the same call is idempotent. Events of the most recent
    `REGRESSION_DAYS` UTC days use the `REGRESSED` profiles (the built-in regression).
    `with_grades` puts the intended grade on every passage (a golden set).
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be 1-{MAX_DAYS}, got {days!r}")
    if per_day < 1:
        raise ValueError(f"per_day must be >= 1, got {per_day!r}")
    if now is not None and now.tzinfo is None:
        raise ValueError("now must be timezone-aware (e.g. datetime.now(UTC))")
    now = (now or datetime.now(UTC)).astimezone(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    texts = {p["id"]: p["text"] for p in load_kb()}
    queries = load_queries()
    events: list[dict[str, Any]] = []
    index = 0
    for back in range(days - 1, -1, -1):  # oldest day first
        day_start = today - timedelta(days=back)
        span = (now - day_start).total_seconds() if back == 0 else 86400.0
        for _ in range(per_day):
            rng = random.Random(f"demo-traffic:{seed}:{index}")
            retriever = RETRIEVERS[index % len(RETRIEVERS)]
            query = rng.choice(queries)
            event = make_event(
                query,
                texts,
                retriever,
                seed=f"{seed}:{index}",
                degraded=back < REGRESSION_DAYS,
                with_grades=with_grades,
            )
            ts = day_start + timedelta(seconds=rng.uniform(0.0, max(0.0, span - 1.0)))
            event_id = uuid.uuid5(_EVENT_NAMESPACE, f"{seed}:{index}")
            events.append(
                {
                    "event_id": str(event_id),
                    **event,
                    "timestamp": ts.isoformat(timespec="seconds").replace("+00:00", "Z"),
                }
            )
            index += 1
    return events
