"""Grades for one event: known grades first, then the judgment cache, then the judge."""

from __future__ import annotations

from monitor.store import event_day
from workers.judges.base import Judge

KNOWN, CACHE, JUDGE = "known", "cache", "judge"


def judged_depth(event: dict) -> int:
    """How many passages the measures use: the top 2K (F_e's N̂_p); deeper ones stay unjudged."""
    return min(len(event["passages"]), 2 * event["k"])


async def grade_event(
    event: dict, judge: Judge, store: object
) -> tuple[list[int | None], list[str | None]]:
    """Return `(grades, sources)`, one per passage; passages past the top 2K stay `None`.

    Raises the judge's `JudgeError` when it cannot grade a passage that needs it.
    `store` is the `monitor.store.Store` (its judgment cache).
    """
    passages = event["passages"]
    depth = judged_depth(event)
    grades: list[int | None] = [None] * len(passages)
    sources: list[str | None] = [None] * len(passages)
    todo: list[int] = []
    for i in range(depth):
        g = passages[i].get("grade")
        if g is not None:
            grades[i], sources[i] = g, KNOWN
        else:
            todo.append(i)
    if not todo:
        return grades, sources

    query = event["query"]
    texts = [passages[i]["text"] for i in todo]
    cached = store.cached_grades(judge.model, judge.prompt_version, query, texts)
    misses = []
    for i, g in zip(todo, cached, strict=True):
        if g is None:
            misses.append(i)
        else:
            grades[i], sources[i] = g, CACHE
    day = event_day(event)
    store.incr("judge_cache_hits", len(todo) - len(misses), day=day)
    store.incr("judge_cache_misses", len(misses), day=day)
    if misses:
        new = await judge.grade(query, [(passages[i]["id"], passages[i]["text"]) for i in misses])
        for i, g in zip(misses, new, strict=True):
            grades[i], sources[i] = g, JUDGE
        store.cache_grades(
            judge.model,
            judge.prompt_version,
            query,
            [(passages[i]["text"], grades[i]) for i in misses],
        )
    return grades, sources
