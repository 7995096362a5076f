"""The wire contract: the event a RAG app sends and the answers it gets (README "HTTP API")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, model_validator

from monitor.limits import (  # noqa: F401 - re-exported: the contract's limits, defined once
    LABEL_KEYS,
    LABEL_PATTERN,
    MAX_BATCH,
    MAX_CLOCK_SKEW,
    MAX_EVENT_AGE,
    MAX_EVENT_ID_CHARS,
    MAX_ID_CHARS,
    MAX_K,
    MAX_PASSAGES,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    event_id_problem,
)
from monitor.measure_table import MEASURES

LabelValue = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
Status = Literal["queued", "done", "failed", "sampled_out"]


class Passage(BaseModel):
    """One retrieved passage, in the app's rank order."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1, max_length=MAX_ID_CHARS, description="The app's id of the passage."
    )
    text: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="The passage text as retrieved."
    )
    score: float | None = Field(default=None, description="The retriever's score (optional).")
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
        min_length=1,
        max_length=MAX_PASSAGES,
        description="Ranked best first; k <= len <= 200; send 2k so F_e can be computed.",
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

    @model_validator(mode="after")
    def _check(self) -> RetrievalEvent:
        problem = event_id_problem(self.event_id) if self.event_id is not None else None
        if problem:
            raise ValueError(problem)
        if len(self.passages) < self.k:
            raise ValueError(
                f"passages: need at least k={self.k} passages, got {len(self.passages)}"
            )
        if self.timestamp is not None:
            ts = self.timestamp
            if ts.tzinfo is None:
                raise ValueError("timestamp: needs a timezone offset (RFC 3339), e.g. ...Z")
            now = datetime.now(UTC)
            if ts < now - MAX_EVENT_AGE:
                raise ValueError("timestamp: older than 35 days")
            if ts > now + MAX_CLOCK_SKEW:
                raise ValueError("timestamp: in the future")
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


# Every measure `compute` returns, null when undefined for the event (`monitor.measure_table`).
Measures = create_model(
    "Measures",
    **{m.key: (float | None, Field(default=None, description=m.help)) for m in MEASURES},  # type: ignore[call-overload]
)


class RetrievalResult(BaseModel):
    """What `GET /v1/retrievals/{event_id}` answers."""

    event_id: str
    status: Status
    k: int | None = None
    labels: dict[str, str] | None = None
    grades: list[int | None] | None = None
    grade_source: list[str | None] | None = None
    measures: Measures | None = None  # type: ignore[valid-type]
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
    error: str | None = None


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    detail: list[ErrorDetail] | str
