"""The wire contract: the event a RAG app sends and the answers it gets (docs/api.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, model_validator
from pydantic_core import PydanticCustomError

from ragmon.core.identity import REVIEWER_PATTERN
from ragmon.core.measure_table import MEASURES
from ragmon.core.wire import (  # noqa: F401 - re-exported: the contract's limits, defined once
    LABEL_KEYS,
    LABEL_PATTERN,
    MAX_BATCH,
    MAX_CLOCK_SKEW,
    MAX_EVENT_AGE,
    MAX_EVENT_ID_CHARS,
    MAX_ID_CHARS,
    MAX_K,
    MAX_METADATA_BYTES,
    MAX_METADATA_KEYS,
    MAX_PASSAGES,
    MAX_QUERY_CHARS,
    MAX_SCORE,
    MAX_TEXT_CHARS,
    MAX_TRACE_ID_CHARS,
    Status,
    event_id_problem,
)

LabelValue = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
# A number an app sends: finite, so that no sum it enters (shared by every app's events of a
# transaction) can fail, and no NaN or infinity is stored.
Finite = Annotated[float, Field(allow_inf_nan=False)]


class Passage(BaseModel):
    """One retrieved passage, in the app's rank order."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1, max_length=MAX_ID_CHARS, description="The app's id of the passage."
    )
    text: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="The passage text as retrieved."
    )
    score: float | None = Field(
        default=None,
        allow_inf_nan=False,
        ge=-MAX_SCORE,
        le=MAX_SCORE,
        description=f"The retriever's score (optional): a finite number, |score| <= {MAX_SCORE:g}.",
    )
    grade: int | None = Field(
        default=None,
        strict=True,
        ge=0,
        le=3,
        description="A known 0-3 grade (golden set, user feedback), used instead of the judge.",
    )


class Labels(BaseModel):
    """Prometheus labels of the event; a missing key becomes `default`."""

    model_config = ConfigDict(extra="forbid")

    app: LabelValue = "default"
    index: LabelValue = "default"
    retriever: LabelValue = "default"
    segment: LabelValue = Field(
        default="default",
        description="A query class (intent, customer tier): aggregates hide which class collapsed.",
    )


FIELD_INVALID = "field_invalid"


def invalid(field: str, detail: str) -> PydanticCustomError:
    """A check across fields that names the one at fault: the 422 answer puts `field` in `loc`
    and `detail` in `msg` (`ragmon.api.service`), read from the error's context."""
    return PydanticCustomError(
        FIELD_INVALID, "{field}: {detail}", {"field": field, "detail": detail}
    )


class RetrievalEvent(BaseModel):
    """One production retrieval: the query and its ranked passages."""

    model_config = ConfigDict(extra="forbid")

    event_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_EVENT_ID_CHARS,
        description="Optional; a client-made UUID makes retries idempotent.",
    )
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(
        strict=True, ge=1, le=MAX_K, description="How many passages went into the LLM prompt."
    )
    passages: list[Passage] = Field(
        max_length=MAX_PASSAGES,
        description="Ranked best first; 0 <= len <= 200. Fewer than k, or none, is a real "
        "outcome and is measured (empty slots score 0); send 2k so F_e can be computed.",
    )
    relevant_total: int | None = Field(
        default=None,
        strict=True,
        ge=0,
        description="The true number of relevant passages, when known.",
    )
    labels: Labels = Field(default_factory=Labels)
    timestamp: datetime | None = Field(
        default=None,
        description="RFC 3339; when the retrieval happened (default: receipt); <= 35 days old.",
    )
    trace_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TRACE_ID_CHARS,
        description="The app's trace or request id, returned by GET; never a metric label.",
    )
    metadata: dict[str, str | int | Finite | bool] | None = Field(
        default=None,
        description=f"Kept with the event for debugging, never a metric label; at most "
        f"{MAX_METADATA_KEYS} keys and {MAX_METADATA_BYTES} bytes as JSON.",
    )

    @model_validator(mode="after")
    def _check(self) -> RetrievalEvent:
        problem = event_id_problem(self.event_id) if self.event_id is not None else None
        if problem:
            raise invalid("event_id", problem.removeprefix("event_id: "))
        if self.metadata is not None:
            if len(self.metadata) > MAX_METADATA_KEYS:
                raise invalid("metadata", f"at most {MAX_METADATA_KEYS} keys")
            size = len(json.dumps(self.metadata, separators=(",", ":")).encode())
            if size > MAX_METADATA_BYTES:
                raise invalid("metadata", f"at most {MAX_METADATA_BYTES} bytes as JSON, got {size}")
        if self.timestamp is not None:
            ts = self.timestamp
            if ts.tzinfo is None:
                raise invalid("timestamp", "needs a timezone offset (RFC 3339), e.g. ...Z")
            now = datetime.now(UTC)
            if ts < now - MAX_EVENT_AGE:
                raise invalid("timestamp", "older than 35 days")
            if ts > now + MAX_CLOCK_SKEW:
                raise invalid("timestamp", "in the future")
        return self


class RetrievalBatch(BaseModel):
    """Up to 1000 events; a bad item rejects the whole batch."""

    model_config = ConfigDict(extra="forbid")

    events: list[RetrievalEvent] = Field(min_length=1, max_length=MAX_BATCH)


class Accepted(BaseModel):
    event_id: str
    status: Status


class BatchAccepted(BaseModel):
    results: list[Accepted]


# Every measure `compute` returns, null when undefined for the event (`ragmon.core.measure_table`).
Measures = create_model(
    "Measures",
    **{m.key: (float | None, Field(default=None, description=m.help)) for m in MEASURES},  # type: ignore[call-overload]
)


class HumanGradeShown(BaseModel):
    """One person's grade of a passage."""

    reviewer: str
    grade: int
    graded_by: str = Field(description="`human:<reviewer>`.")
    note: str | None = None
    at: str = Field(description="When it was given (or last changed), UTC.")


class PassageResult(BaseModel):
    """One passage as judged: where its grade came from, and whether it repeats an earlier one."""

    rank: int
    id: str
    score: float | None = None
    grade: int | None = Field(default=None, description="null: not graded (unjudged).")
    grade_source: Literal["known", "cache", "judge"] | None = None
    graded_by: str | None = Field(
        default=None,
        description="Who gave `grade`: the judge identity `model/prompt_version/mode` (also for "
        "a grade from the judgment cache, which is keyed by it), or `known`.",
    )
    human_grades: list[HumanGradeShown] | None = Field(
        default=None,
        description="People's grades of this passage (`POST /v1/grades`), beside the judge's: "
        "they never replace `grade` nor change the measures.",
    )
    duplicate_of: int | None = Field(
        default=None,
        description="The rank of the earlier passage with the same id: a repeat is not judged "
        "again and scores as not relevant.",
    )
    text: str | None = Field(default=None, description="Absent when text storage is off.")
    text_sha: str | None = Field(
        default=None, description="Text storage off: the hash kept in place of the text."
    )


class RetrievalResult(BaseModel):
    """What `GET /v1/retrievals/{event_id}` answers."""

    event_id: str
    status: Status
    k: int | None = None
    labels: dict[str, str] | None = None
    query: str | None = Field(default=None, description="Absent when text storage is off.")
    query_sha: str | None = Field(
        default=None, description="Text storage off: the hash of the normalized query."
    )
    timestamp: str | None = Field(default=None, description="When the retrieval happened.")
    trace_id: str | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    inclusion_probability: float | None = Field(
        default=None,
        description="The probability with which the event was chosen for judging (1.0: every "
        "event is); every mean that pools events weighs it by 1 / this.",
    )
    passages: list[PassageResult] | None = None
    judged_at_k: float | None = Field(
        default=None, description="Share of the top K's distinct passages that have a grade."
    )
    grades: list[int | None] | None = None
    grade_source: list[str | None] | None = None
    duplicate_of: list[int | None] | None = None
    unjudged: dict[str, int] | None = Field(
        default=None,
        description="Passages the judge could not grade for good, by reason (they score as "
        "not relevant).",
    )
    measures: Measures | None = None  # type: ignore[valid-type]
    judge: str | None = Field(
        default=None, description="The identity of the judge that graded the event."
    )
    utility: list[int | None] | None = Field(
        default=None,
        description="RAGMON_JUDGE_SCALE=utility5: each passage's 1-5 utility grade (RA-nWG's "
        "input); `grades` then holds them mapped to 0-3.",
    )
    p_no_response: list[float | None] | None = Field(
        default=None,
        description="RAGMON_UTILITY=on: each top-K passage's p(NO-RESPONSE) from the utility "
        "probe (UDCG's input).",
    )
    udcg_missing: str | None = Field(
        default=None,
        description="Why UDCG is null with RAGMON_UTILITY=on (no_logprobs, no_llm, or a judge "
        "failure's reason).",
    )
    error: str | None = Field(
        default=None,
        description="Why the event failed, or while it is queued the last judge error (its "
        "job waits for a retry).",
    )


MAX_NOTE_CHARS = 2000


class HumanGrade(BaseModel):
    """A person's 0-3 grade of one passage of a judged event."""

    model_config = ConfigDict(extra="forbid")

    app: LabelValue = Field(description="The event's app (its `labels.app`).")
    event_id: str = Field(min_length=1, max_length=MAX_EVENT_ID_CHARS)
    passage_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    grade: int = Field(strict=True, ge=0, le=3, description="On the judge's 0-3 scale.")
    reviewer: str = Field(
        pattern=REVIEWER_PATTERN,
        description="Who graded: 1-64 letters, digits or `_.@:+-`; one grade per reviewer "
        "and passage (a new grade or note by the same reviewer replaces theirs).",
    )
    note: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)


class GradeBatch(BaseModel):
    """Up to 1000 grades; a bad item rejects the whole request."""

    model_config = ConfigDict(extra="forbid")

    grades: list[HumanGrade] = Field(min_length=1, max_length=MAX_BATCH)


class GradeStored(BaseModel):
    event_id: str
    passage_id: str
    reviewer: str
    status: Literal["created", "updated", "unchanged"] = Field(
        description="unchanged: the same grade and note were already stored (a repeat changes "
        "nothing)."
    )


class GradesAccepted(BaseModel):
    results: list[GradeStored]


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    detail: list[ErrorDetail] | str


class EventSummary(BaseModel):
    """One event of a search (`GET /v1/retrievals`)."""

    event_id: str
    status: Status
    labels: dict[str, str]
    timestamp: str | None = None
    k: int | None = None
    measures: dict[str, float] | None = None
    grade_sources: dict[str, int] | None = Field(
        default=None, description="How many passages got their grade from each source."
    )
    trace_id: str | None = None


class EventPage(BaseModel):
    """A page of a search: pass `next_cursor` as `cursor` (same other parameters) for the next."""

    events: list[EventSummary]
    next_cursor: str | None = Field(default=None, description="null: no more events.")
    scanned: int = Field(description="Index entries read for this page.")
    partial: bool = Field(
        description="The page stopped at the scan budget before filling: few events match; "
        "continue with `next_cursor`."
    )
