"""The judge interface: an async method that grades passages for a query, and `aclose`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ragmon.core.identity import JudgeIdentity


class JudgeError(Exception):
    """The judge could not grade; `reason` is a short metric label (e.g. `timeout`, `http_500`).

    `retryable` says whether waiting and trying again may help (rate limits, outages), as
    opposed to a request the provider refuses for good. `grades`, when set, holds the grades
    the judge did get before it failed (None where not), one per passage asked, so that the
    caller caches them and a retry pays only for the rest; `reasons`, when set, why each
    passage without a grade has none (its own failure's reason, None where graded).
    """

    def __init__(
        self,
        reason: str,
        message: str = "",
        retryable: bool = False,
        grades: Sequence[int | None] | None = None,
        reasons: Sequence[str | None] | None = None,
    ) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.retryable = retryable
        self.grades = list(grades) if grades is not None else None
        self.reasons = list(reasons) if reasons is not None else None

    def passage_reasons(self, n: int) -> list[str | None]:
        """Why each of the `n` passages asked has no grade: its own reason when known, else
        this failure's (None where it got a grade)."""
        grades = self.grades or [None] * n
        own = self.reasons or [None] * n
        return [
            None if g is not None else (r or self.reason) for g, r in zip(grades, own, strict=True)
        ]


class PartialGrades(JudgeError):
    """Some passages could not be graded for a lasting reason (refusal, malformed answer after
    repair, budget): the others' grades, None where it failed, and each failure's reason."""

    def __init__(self, grades: Sequence[int | None], reasons: Sequence[str | None]) -> None:
        first = next(r for r in reasons if r is not None)
        message = f"{sum(r is not None for r in reasons)} passages not graded"
        super().__init__(first, message, grades=grades, reasons=reasons)
        self.grades: list[int | None] = list(grades)


class Judge(Protocol):
    """Grades each passage's relevance to the query on the 0-3 TREC DL / UMBRELA scale."""

    #: The `model` label of the judge's call metrics (requests, tokens, cost).
    model: str
    #: Model, prompt version (bumped whenever the prompt or the grading rule changes) and mode:
    #: what every grade it gives carries, and the judgment cache's namespace.
    identity: JudgeIdentity
    #: True when a passage's grade depends on the other passages of the same call (the lexical
    #: judge's IDF): its grades are then neither cached nor shared between events, or they
    #: would depend on which event was judged first.
    per_call: bool

    async def grade(self, query: str, passages: Sequence[tuple[str, str]]) -> list[int]:
        """One grade per `(passage_id, text)`, in order; raises `JudgeError` on failure, or
        `PartialGrades` when only some passages failed, all for lasting reasons."""
        ...

    async def aclose(self) -> None:
        """Release what the judge holds (an HTTP client); the job calls it when it is done."""
        ...
