"""Every Prometheus metric ragmon exports: name, type, labels and help, written once (the
judge's oversight and the sampling plan in `judging_metrics`).

`/metrics`, the table of docs/metrics.md (`ragmon metrics --markdown`), the dashboards' and
alerts' name checks all read this table. After adding or changing a metric, run
`python scripts/regenerate.py` (it rewrites docs/metrics.md; tests/test_generated.py fails until
you do).
"""

from __future__ import annotations

from dataclasses import replace

from ragmon.core.judging_metrics import ANCHOR, JUDGING, SAMPLING
from ragmon.core.measure_table import MEASURES
from ragmon.core.measures import HISTOGRAM_MEASURES
from ragmon.core.memory_metrics import MEMORY
from ragmon.core.metric import SERIES_LABELS, Metric
from ragmon.core.signals import SIGNALS as SIGNAL_TABLE

LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
               3600.0, 7200.0, 21600.0, 86400.0)  # fmt: skip
JUDGE_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)


QUALITY: tuple[Metric, ...] = tuple(
    Metric(f"ragmon_retrieval_{m.key}", "histogram", m.help, SERIES_LABELS, m.buckets)
    for m in MEASURES
    if m.histogram
)

# The sum of squared values per quality series: with _sum and _count it gives the variance,
# so the drop alerts can require a fall larger than its standard error.
SUM_SQUARES: tuple[Metric, ...] = tuple(
    Metric(
        f"ragmon_retrieval_{m}_sum_squares",
        "counter",
        f"Sum of squared values of ragmon_retrieval_{m}: with its _sum and _count, the variance "
        "(for the quality alerts' standard error).",
        SERIES_LABELS,
        of=f"retrieval_{m}",
    )
    for m in HISTOGRAM_MEASURES
)

# The sum of squared weights per quality series: with planned sampling each judged event adds
# 1 / its inclusion probability to the histograms' _count; the alerts read their standard
# errors at Kish's effective number of judged events, _count^2 / this.
WEIGHT_SQUARES = Metric(
    "ragmon_retrieval_weight_squares",
    "counter",
    "Sum over judged events of their weight squared (weight: 1 / the inclusion probability "
    "with RAGMON_SAMPLING=planned, else 1): with a quality histogram's _count (the sum of "
    "weights) it gives the effective number of judged events, _count^2 / this, at which the "
    "quality alerts read standard errors; the number judged when every event weighs 1.",
    SERIES_LABELS,
)

OPERATIONS: tuple[Metric, ...] = (
    Metric("ragmon_events_received", "counter", "Events accepted by the API (202 or sampled out)."),
    Metric(
        "ragmon_events_rejected",
        "counter",
        "Requests refused by the API, by reason (invalid, too_large, backpressure, "
        "unauthorized, forbidden, store_unavailable, app_storage: an app at "
        "RAGMON_APP_STORAGE_MB, memory_high: an app among those holding most while Redis is "
        "past RAGMON_MEMORY_HIGH of its maxmemory, timeout: a body not received within "
        "RAGMON_BODY_TIMEOUT_S, or "
        "cut off for room past RAGMON_MAX_CONNECTIONS); an OTLP retriever span that cannot be "
        "an event counts as invalid.",
        ("reason",),
    ),
    Metric(
        "ragmon_otlp_spans",
        "counter",
        "Spans received on /v1/traces, by outcome: event (a retriever span, stored as an event), "
        "nested (a retriever span under another one in the same export, skipped: "
        "RAGMON_OTLP_NESTED), held (its parent in another export: ragmon_otlp_holds_total), "
        "ignored (any other span), rejected (a retriever span that cannot be an event).",
        ("outcome",),
    ),
    Metric(
        "ragmon_otlp_holds",
        "counter",
        "What became of /v1/traces retriever spans whose parent was in another export: held, "
        "then nested (skipped), own (RAGMON_OTLP_NESTED=own), released or expired (events); "
        "full (not held: an event at once); again (a re-export).",
        ("outcome",),
    ),
    Metric(
        "ragmon_otlp_repairs",
        "counter",
        "Repairs that made events of /v1/traces spans, by kind: labels_repaired (a label value "
        "outside [A-Za-z0-9_.:-] or over 64 characters, repaired as the SDK repairs it), "
        "k_from_documents (no k attribute nor RAGMON_OTLP_K: measured at the documents "
        "returned), unknown_service (the app named by the OpenTelemetry SDK's default "
        "service.name, unknown_service...: set OTEL_SERVICE_NAME; the API logs a warning).",
        ("repair",),
    ),
    Metric("ragmon_events_sampled_out", "counter", "Events accepted but not judged (sampling)."),
    Metric(
        "ragmon_series_folded",
        "counter",
        "Events recorded with index, retriever and segment other because their series was past "
        "the series budget (RAGMON_MAX_SERIES_PER_APP, RAGMON_MAX_SERIES), by app; app=other: "
        "an app without any series of its own.",
        ("app",),
    ),
    Metric("ragmon_events_labeled", "counter", "Events judged and measured (each counted once)."),
    Metric(
        "ragmon_passages_duplicate",
        "counter",
        "Passages whose id repeats an earlier one in the same ranking, of every accepted event "
        "(counted at ingest): a wasted slot, not judged again, scored as not relevant.",
        SERIES_LABELS,
    ),
    Metric(
        "ragmon_passages_unjudged",
        "counter",
        "Passages of the top 2K of measured events that the judge could not grade for good "
        "(refused, malformed after repair, budget_exhausted..., or a passing failure such as "
        "server_error from the event's second try), by series and reason: they "
        "score as not relevant, and judged@K shows the coverage.",
        (*SERIES_LABELS, "reason"),
    ),
    Metric(
        "ragmon_events_failed",
        "counter",
        "Events that could not be judged after all retries, by reason.",
        ("reason",),
    ),
    Metric(
        "ragmon_queue_depth",
        "gauge",
        "Events waiting to be judged, every app: pending, or held by a drain job.",
    ),
    Metric(
        "ragmon_jobs_waiting_retry",
        "gauge",
        "Events waiting out a retry delay after a passing judge failure (timeout, 429, 5xx, "
        "connection); they stay queued meanwhile. (The name is from when a job held them.)",
    ),
    Metric(
        "ragmon_labeling_lag_seconds",
        "histogram",
        "Time from receipt by the API to the event's measures stored.",
        (),
        LAG_BUCKETS,
    ),
    Metric(
        "ragmon_judge_requests",
        "counter",
        "Calls to the judge, by model and outcome (ok, or the failure reason).",
        ("model", "outcome"),
    ),
    Metric(
        "ragmon_judge_tokens",
        "counter",
        "Tokens used by the judge, by model and type (input, output).",
        ("model", "type"),
    ),
    Metric("ragmon_judge_cost_usd", "counter", "Judge spend in USD, by model.", ("model",)),
    Metric(
        "ragmon_judge_latency_seconds",
        "histogram",
        "Latency of one judge call, by model.",
        ("model",),
        JUDGE_LATENCY_BUCKETS,
    ),
    Metric(
        "ragmon_utility_probes",
        "counter",
        "RAGMON_UTILITY=on: p(NO-RESPONSE) values obtained, by how (exact: the abstain token was "
        "in the top logprobs; bound: it was not, the lowest listed probability bounds it; cache).",
        ("how",),
    ),
    Metric(
        "ragmon_udcg_missing",
        "counter",
        "RAGMON_UTILITY=on: events measured without UDCG, by reason (no_logprobs: the endpoint "
        "returns none; no_llm: lexical judge; or the judge failure's reason).",
        ("reason",),
    ),
    Metric(
        "ragmon_evaluations_exported",
        "counter",
        "RAGMON_OTLP_EXPORT_ENDPOINT: evaluation records by outcome (sent; failed: the receiver "
        "refused or was unreachable; dropped: still queued when the drain job ended).",
        ("outcome",),
    ),
    Metric("ragmon_judge_cache_hits", "counter", "Passages graded from the judgment cache."),
    Metric("ragmon_judge_cache_misses", "counter", "Passages the judgment cache did not have."),
    Metric(
        "ragmon_grades", "counter", "Grades given (judge, cache or known), by grade.", ("grade",)
    ),
    Metric(
        "ragmon_alert_drop_margin",
        "gauge",
        "Quality-drop alerts: the smallest fall of a series' hourly mean below its 7-day mean "
        "that may alert, by measure (RAGMON_ALERT_MARGIN_NDCG, RAGMON_ALERT_MARGIN_T).",
        ("measure",),
    ),
    Metric(
        "ragmon_alert_drop_z",
        "gauge",
        "Quality alerts: how many standard errors a fall must also exceed, and a level "
        "must be past its line by (Harm@K above 0.3; Hit@K below 0.62, and below 0.6) "
        "(RAGMON_ALERT_Z).",
    ),
    Metric(
        "ragmon_alert_min_events",
        "gauge",
        "Quality alerts: events a series needs in the last hour before any may fire "
        "(RAGMON_ALERT_MIN_EVENTS).",
    ),
    Metric(
        "ragmon_judge_budget_exhausted",
        "gauge",
        "1 while today's judge spend is at RAGMON_DAILY_BUDGET_USD (events are stored, not "
        "judged).",
    ),
)

# Signals of every accepted event, judged or not, written at ingest (`ragmon.core.signals`):
# per series, under the same series budget as the quality histograms.
SIGNALS: tuple[Metric, ...] = (
    *(
        Metric(f"ragmon_signal_{s.key}", "histogram", s.help, SERIES_LABELS, s.buckets)
        for s in SIGNAL_TABLE
    ),
    *(
        Metric(
            f"ragmon_signal_{s.key}_sum_squares",
            "counter",
            f"Sum of squared values of ragmon_signal_{s.key}: with its _sum and _count, the "
            "variance (for the score-drop alert).",
            SERIES_LABELS,
            of=f"signal_{s.key}",
        )
        for s in SIGNAL_TABLE
        if s.sum_squares
    ),
    Metric(
        "ragmon_signal_short",
        "counter",
        "Accepted events with fewer passages than K (M < K, empty results included), by series.",
        SERIES_LABELS,
    ),
    Metric(
        "ragmon_signal_empty_queries",
        "counter",
        "Empty results (M = 0) of accepted events, each normalized query counted once a UTC "
        "day per series (a HyperLogLog's growth): a user's retries of one empty query count "
        "once (the empty-result alerts).",
        SERIES_LABELS,
    ),
    Metric(
        "ragmon_signal_queries_distinct",
        "gauge",
        "Distinct queries (case and runs of white space ignored) among each series' accepted "
        "events of the current UTC day by their timestamp: a HyperLogLog estimate (standard "
        "error 0.81 %).",
        SERIES_LABELS,
    ),
)

ALL: tuple[Metric, ...] = (
    QUALITY
    + SUM_SQUARES
    + (WEIGHT_SQUARES,)
    + OPERATIONS
    + SIGNALS
    + JUDGING
    + ANCHOR
    + SAMPLING
    + MEMORY
)
BY_NAME: dict[str, Metric] = {m.name: m for m in ALL}


def with_bounds(bounds: dict[str, tuple[float, ...]]) -> tuple[Metric, ...]:
    """`ALL` with the quality histograms' buckets for the configured parameters
    (`measures.histogram_bounds`: T's lowest follow RAGMON_T_ALPHA)."""
    return tuple(
        replace(m, buckets=bounds[m.key.removeprefix("retrieval_")]) if m in QUALITY else m
        for m in ALL
    )


def exposed_names() -> set[str]:
    """Every sample name that can appear in `/metrics` (with _total, _bucket, ... suffixes)."""
    names: set[str] = set()
    for m in ALL:
        if m.type == "counter":
            names |= {f"{m.name}_total", f"{m.name}_created"}
        elif m.type == "histogram":
            names |= {f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"}
        else:
            names.add(m.name)
    return names


def markdown_table() -> str:
    """The metrics table of docs/metrics.md, generated from this catalog: the per-series labels
    written once, and the quality histograms' sums of squares as one row."""
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    squares = set(SUM_SQUARES)
    for m in ALL:
        if m in squares:
            continue
        name = f"{m.name}_total" if m.type == "counter" else m.name
        rest = [x for x in m.labels if x not in SERIES_LABELS]
        labels = ", ".join((["series"] if set(SERIES_LABELS) <= set(m.labels) else []) + rest)
        rows.append(f"| `{name}` | {m.type} | {labels or '—'} | {m.help} |")
        if m is QUALITY[-1]:
            rows.append(
                "| `ragmon_retrieval_<measure>_sum_squares_total` | counter | series | Sum of "
                "squared values of each quality histogram above: with its _sum and _count, the "
                "variance (for the quality alerts' standard error). |"
            )
    return "\n".join(rows)
