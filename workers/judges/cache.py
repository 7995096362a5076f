"""The judgment cache: what a judge model already answered for a (query, passage text).

Apart from the judges because the job, not a judge, decides what to ask: it reads the cache
before asking and writes back every answer the judge gave, including the grades of an event
that failed half-way, so a retried job pays only for the rest. `keep` is the one place that
writes it. Entries are keyed by the judge's identity (model, prompt version, mode): a new
model, prompt or mode never reuses another's grades. The utility probe's p's live beside the
grades under the model and `utility.PROMPT_VERSION`.

Entries are also keyed by the event's app unless RAGMON_SHARED_CACHE=true: a hit would
otherwise tell one app that another asked the same question about the same passage (and a
grade would be reused across tenants). Shared, the fleet pays once per (query, passage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragmon.core.identity import JudgeIdentity
from ragmon.workers.judges import utility

if TYPE_CHECKING:
    from ragmon.store import Store
    from ragmon.store.records import StoredEvent


@dataclass(frozen=True)
class JudgmentCache:
    """One judge identity's cached answers in the store (kept RAGMON_CACHE_TTL_DAYS)."""

    store: Store
    identity: JudgeIdentity
    #: Whose answers these are: the event's app, or None for the fleet's shared cache.
    app: str | None

    @classmethod
    def of(cls, store: Store, identity: JudgeIdentity, event: StoredEvent) -> JudgmentCache:
        """The cache an event reads and writes: its app's, or the shared one."""
        return cls(store, identity, scope(store, event))

    def grades(self, query: str, texts: Sequence[str]) -> list[int | None]:
        """The cached grade of each text (None where this identity was never asked)."""
        who = self.identity
        return self.store.cached_grades(who.model, who.cache_version, query, texts, self.app)

    def ps(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """The utility probe's cached p(NO-RESPONSE) of each text (None where not probed)."""
        model = self.identity.model
        return self.store.cached_p(model, utility.PROMPT_VERSION, query, texts, self.app)

    def keep(self, query: str, answers: Sequence[tuple[str, float | None]]) -> None:
        """Remember the judge's grades, `(text, grade)`; None (not answered) is skipped."""
        who = self.identity
        self._keep(who.cache_version, query, answers)

    def keep_ps(self, query: str, answers: Sequence[tuple[str, float | None]]) -> None:
        """Remember the utility probe's p's, `(text, p)`."""
        self._keep(utility.PROMPT_VERSION, query, answers)

    def _keep(self, version: str, query: str, answers: Sequence[tuple[str, float | None]]) -> None:
        known = [(text, value) for text, value in answers if value is not None]
        self.store.cache_grades(self.identity.model, version, query, known, self.app)


def scope(store: Store, event: StoredEvent) -> str | None:
    """The app whose cache an event uses; None when RAGMON_SHARED_CACHE shares one cache."""
    return None if store.settings.shared_cache else event["labels"]["app"]
