"""Grade the records' passages with the configured judge, as the workers would."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ragmon.core.golden import Record
from ragmon.settings import Settings
from ragmon.workers.grading import on_both_scales
from ragmon.workers.judges.base import Judge, JudgeError

if TYPE_CHECKING:
    from ragmon.store import Store

QUERY_CONCURRENCY = 8  # queries graded at once (the judge's own semaphore bounds the calls)
# Stop: every further call would fail the same (a connection error comes after all retries).
FATAL = {"budget_exhausted", "client_error", "connection_error"}


@dataclass
class Outcome:
    """Judge grades by (query, text), and what went wrong."""

    grades: dict[tuple[str, str], int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed_records: int = 0
    stopped: str | None = None


class Progress:
    """One stderr line every few seconds (long LLM runs)."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 2.0) -> None:
        self.total, self.stream, self.every_s = total, stream or sys.stderr, every_s
        self.done = self.judged = self.failed = 0
        self.started = self.last = time.monotonic()

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            print(
                f"calibrate: {self.done}/{self.total} records, {self.judged} passages judged, "
                f"{self.failed} records failed, {now - self.started:.0f} s",
                file=self.stream,
                flush=True,
            )


async def judge_records(
    records: Sequence[Record], judge: Judge, progress: Progress | None = None
) -> Outcome:
    """Grade every record's top 2K: each distinct (query, text) once, queries concurrently."""
    out = Outcome()
    by_query: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_query[r.query].append(r)
    gate = asyncio.Semaphore(QUERY_CONCURRENCY)

    async def one_query(query: str, recs: list[Record]) -> None:
        async with gate:
            for r in recs:
                if out.stopped:
                    return
                todo: dict[str, str] = {}
                for pid, text, _ in r.passages[: r.depth]:
                    if (query, text) not in out.grades and text not in todo.values():
                        todo[pid] = text
                if todo:
                    try:
                        grades = await judge.grade(query, list(todo.items()))
                    except JudgeError as exc:
                        out.failures[exc.reason] += 1
                        out.failed_records += 1
                        if exc.reason in FATAL:
                            out.stopped = f"{exc.reason}: {exc}"
                        if progress:
                            progress.failed += 1
                    else:
                        # a utility5 judge's 1-5 grades, compared on the known grades' 0-3
                        umbrela = on_both_scales(list[int | None](grades), judge)[0]
                        for text, g in zip(todo.values(), umbrela, strict=True):
                            assert g is not None  # the judge grades every passage asked
                            out.grades[(query, text)] = g
                        if progress:
                            progress.judged += len(todo)
                if progress:
                    progress.done += 1
                    progress.tick()

    await asyncio.gather(*(one_query(q, rs) for q, rs in by_query.items()))
    if progress:
        progress.tick(force=True)
    return out


def make_judge(settings: Settings) -> tuple[Judge, Store | None]:
    """The configured judge, and the store an LLM judge shares the fleet's limits through."""
    if settings.judge == "lexical":
        from ragmon.workers.judges.lexical import LexicalJudge

        return LexicalJudge(), None
    from ragmon.workers.judges.llm import OpenAIJudge

    store: Store | None = None
    if settings.redis_url:  # the fleet's rate limits, budget and cost counters
        from ragmon.store import Store

        store = Store.connect(settings)
    return OpenAIJudge(settings, store), store
