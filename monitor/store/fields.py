"""The names Python and the Lua scripts share, each spelled once: the fields of an event's hash,
its statuses, and the counter and histogram fields the scripts write.

Python reads and writes them by these names; the scripts get them in their generated header
(`scripts.Script`: `F.status`, `S.queued`, `N.events_labeled`, `H.sum` ...), never as literals
of their own, so renaming one here renames it everywhere.
"""

from __future__ import annotations

from enum import StrEnum


class Field(StrEnum):
    """The fields of an event's hash (`Keys.event`)."""

    PAYLOAD = "p"  # the sealed event JSON (none for a sampled-out event)
    STATUS = "s"  # a `Status`
    RECEIVED = "rt"  # when the API received it, unix seconds
    RESULT = "r"  # the result JSON, once done or failed
    ERROR = "e"  # the last judge error while the event waits for a retry
    SERIES = "sr"  # the series FINISH counted it in (after folding), for EXPLORE_INDEX
    INDEXED = "ix"  # set once EXPLORE_INDEX has indexed it
    ATTEMPTS = "at"  # how many times a drain job claimed it (CLAIM counts, RETRY reads)


class Name(StrEnum):
    """Counters and histograms the scripts write: catalog metric keys (`Metric.key`), and the
    per-day, per-series counts the drift report reads (`ragmon.report.ops`)."""

    EVENTS_RECEIVED = "events_received"
    EVENTS_SAMPLED_OUT = "events_sampled_out"
    EVENTS_LABELED = "events_labeled"
    EVENTS_FAILED = "events_failed"
    SERIES_FOLDED = "series_folded"
    LABELING_LAG = "labeling_lag_seconds"
    EVENTS = "events"  # per day: events measured, by series
    K_SUM = "k_sum"  # per day: the sum of their k, by series
    GRADES = "grades"  # lifetime: by grade; per day: by series and grade
    RETRIEVAL_WEIGHT_SQUARES = "retrieval_weight_squares"  # lifetime: by series, sum of w^2
    SIGNAL_SHORT = "signal_short"  # by series: accepted events with M < K (INGEST)
    PASSAGES_DUPLICATE = "passages_duplicate"  # by series: repeated passage ids (INGEST)
    SIGNAL_EMPTY_QUERIES = "signal_empty_queries"  # by series: empty queries new that day (INGEST)


class Kind(StrEnum):
    """The classes of bytes an app holds in Redis, each kept for its own window
    (`ragmon.store.ledger`)."""

    IDEM = "idem"  # the short-lived key of an event not judged (the idempotency window)
    TEXTS = "texts"  # a judged (or waiting) event's texts (RAGMON_TEXT_TTL_DAYS)
    RECORD = "record"  # a judged event's compact record (RAGMON_RESULT_TTL_DAYS)
    GRADES = "grades"  # people's grades
    ANCHORS = "anchors"  # the anchor set and its runs (kept until deleted)
    SAMPLING = "sampling"  # the sampling planner's hourly traffic counts
    PACE = "pace"  # the fleet's pacing counts of a planning interval (its fields, per app)
    ESTIMATES = "estimates"  # the worker's summary of its corrected estimates (until replaced)
    HOLD = "hold"  # OTLP retriever spans held for their parent span (kept until decided)


class Part(StrEnum):
    """The last part of a histogram's fields `name|labels...|<part>`."""

    BUCKET = "b"  # followed by the bucket's index: `b0`, `b1` ... (last: +Inf)
    SUM = "sum"
    SUMSQ = "sumsq"
    COUNT = "count"


class HourPart(StrEnum):
    """The last part of the explorer's hourly sums `<measure>|<part>` (`Keys.explore_hour`)."""

    COUNT = "n"  # judged events
    SUM = "s"  # of w y, w = 1 / the event's inclusion probability (1 unless sampling is planned)
    SUMSQ = "q"  # of w y^2
    # the weights' excess over 1: sum(w) = n + wx, sum(w^2) = n + vx (0 in hours before weights)
    WEIGHT_EXCESS = "wx"
    WEIGHT2_EXCESS = "vx"


class SummaryField(StrEnum):
    """The fields of a series' overview summary (`Keys.explore_summary`): the hour it was made
    for, then `<window>|<measure>|<HourPart>` for the recent and the before window."""

    HOUR = "h"
    RECENT = "r"
    BEFORE = "b"


class Slot(StrEnum):
    """Placeholders in the explorer's key templates, filled by the scripts."""

    SERIES = "{S}"
    MEASURE = "{M}"
    HOUR = "{H}"
    APP = "{A}"
    REF = "{R}"
    DAY = "{D}"
