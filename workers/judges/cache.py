"""The judgment cache: what a judge model already answered for a (query, passage text).

Apart from the judges because the job, not a judge, decides what to ask: it reads the cache
before asking and writes back every answer the judge gave, including the grades of an event
that failed half-way, so a retried job pays only for the rest. `keep` is the one place that
writes it. Entries are keyed by the judge's `prompt_version` (a new prompt never reuses old
grades); the utility probe's p's live beside the grades under `utility.PROMPT_VERSION`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragmon.workers.judges import utility

if TYPE_CHECKING:
    from ragmon.store import Store


@dataclass(frozen=True)
class JudgmentCache:
    """One judge model's cached answers in the store (kept RAGMON_CACHE_TTL_DAYS)."""

    store: Store
    model: str

    def grades(self, prompt_version: str, query: str, texts: Sequence[str]) -> list[int | None]:
        """The cached grade of each text (None where the judge was never asked)."""
        return self.store.cached_grades(self.model, prompt_version, query, texts)

    def ps(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """The utility probe's cached p(NO-RESPONSE) of each text (None where not probed)."""
        return self.store.cached_p(self.model, utility.PROMPT_VERSION, query, texts)

    def keep(
        self, prompt_version: str, query: str, answers: Sequence[tuple[str, float | None]]
    ) -> None:
        """Remember the judge's answers, `(text, grade or p)`; None (not answered) is skipped."""
        known = [(text, value) for text, value in answers if value is not None]
        self.store.cache_grades(self.model, prompt_version, query, known)
