"""Judges grade passages 0-3 for a query; see `base.Judge`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragmon.workers.judges.base import Judge, JudgeError

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store import Store

__all__ = ["Judge", "JudgeError", "make_judge"]


def make_judge(settings: Settings, store: Store) -> Judge:
    """The judge `RAGMON_JUDGE` names (created per job: it may hold an HTTP client)."""
    if settings.judge == "lexical":
        from ragmon.workers.judges.lexical import LexicalJudge

        return LexicalJudge()
    from ragmon.workers.judges.llm import OpenAIJudge

    return OpenAIJudge(settings, store)
