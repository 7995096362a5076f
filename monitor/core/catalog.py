"""Every Prometheus metric ragmon exports: name, type, labels and help, written once.

`/metrics`, the table of docs/metrics.md (`ragmon metrics --markdown`), the dashboards' and
alerts' name checks all read this table. After adding or changing a metric, run
`python scripts/regenerate.py` (it rewrites docs/metrics.md; tests/test_generated.py fails until
you do).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ragmon.core.measure_table import MEASURES
from ragmon.core.measures import HISTOGRAM_MEASURES
from ragmon.core.signals import SIGNALS as SIGNAL_TABLE
from ragmon.core.wire import LABEL_KEYS

SERIES_LABELS = LABEL_KEYS  # the per-series metrics' labels: an event's labels, in their order

LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
               3600.0, 7200.0, 21600.0, 86400.0)  # fmt: skip
JUDGE_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)


@dataclass(frozen=True)
class Metric:
    """One exported metric family. `name` has no `_total` suffix for counters."""

    name: str
    type: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    of: str = ""  # for a histogram's sum of squares: the histogram's store key

    @property
    def key(self) -> str:
        """The short name the store uses (`ragmon_` stripped)."""
        return self.name.removeprefix("ragmon_")


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
        "RAGMON_OTLP_NESTED), ignored (any other span), rejected (a retriever span that cannot "
        "be an event).",
        ("outcome",),
    ),
    Metric(
        "ragmon_otlp_repairs",
        "counter",
        "Repairs that made events of /v1/traces spans, by kind: labels_repaired (a label value "
        "outside [A-Za-z0-9_.:-] or over 64 characters, repaired as the SDK repairs it), "
        "k_from_documents (no k attribute nor RAGMON_OTLP_K: measured at the documents "
        "returned).",
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
        "server_error on the event's last try), by series and reason: they "
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
        "ragmon_signal_queries_distinct",
        "gauge",
        "Distinct queries (case and runs of white space ignored) among each series' accepted "
        "events of the current UTC day by their timestamp: a HyperLogLog estimate (standard "
        "error 0.81 %).",
        SERIES_LABELS,
    ),
)

# People's grades against the judge's (docs/agreement.md). `reference` is `human` for people's
# grades, or the first judge's identity for the second judge (RAGMON_SECOND_JUDGE_MODEL);
# `bound` is `estimate`, `low` or `high` (the 95 % interval), so a dashboard draws a band.
AGREEMENT_LABELS = ("app", "judge", "reference")
ESTIMATE_LABELS = (*SERIES_LABELS, "measure")
_FEW_PAIRS = "absent below 30 pairs from 10 events"
_FEW_LABELS = "absent below 10 graded units from 10 events (or queries)"
JUDGING: tuple[Metric, ...] = (
    Metric(
        "ragmon_judge_agreement_pairs",
        "gauge",
        "Passages graded by both the judge identity (judge=model/prompt_version/mode) and the "
        "reference (reference=human: people's grades; else the first judge's identity), by app.",
        AGREEMENT_LABELS,
    ),
    Metric(
        "ragmon_judge_agreement_exact",
        "gauge",
        f"Share of those passages given the same 0-3 grade, with its 95 % interval (bound="
        f"estimate, low or high); {_FEW_PAIRS}.",
        (*AGREEMENT_LABELS, "bound"),
    ),
    Metric(
        "ragmon_judge_agreement_quadratic_kappa",
        "gauge",
        f"Quadratic-weighted Cohen's kappa of the judge with the reference (a grade off by one "
        f"costs a ninth of one off by three), with its 95 % interval (bound=estimate, low or "
        f"high); {_FEW_PAIRS}.",
        (*AGREEMENT_LABELS, "bound"),
    ),
    Metric(
        "ragmon_judge_agreement_unweighted_kappa",
        "gauge",
        f"Unweighted Cohen's kappa of the judge with the reference (any other grade is a "
        f"disagreement; lower than the quadratic-weighted one when most disagreements are near "
        f"misses), with its 95 % interval (bound=estimate, low or high); {_FEW_PAIRS}.",
        (*AGREEMENT_LABELS, "bound"),
    ),
    Metric(
        "ragmon_judge_agreement_difference",
        "gauge",
        f"Mean grade of the judge minus the reference's on the same passages (> 0: the judge "
        f"over-grades), with its 95 % interval (bound=estimate, low or high); {_FEW_PAIRS}.",
        (*AGREEMENT_LABELS, "bound"),
    ),
    Metric(
        "ragmon_judge_agreement_confusion",
        "gauge",
        "Passages by the reference's grade and the judge's grade (the 4x4 confusion matrix).",
        (*AGREEMENT_LABELS, "reference_grade", "judge_grade"),
    ),
    Metric(
        "ragmon_estimate_judge_only",
        "gauge",
        "Last 7 days: the series' mean of the measure (ndcg, precision, hit) with the judge's "
        "grades, over its judged events.",
        ESTIMATE_LABELS,
    ),
    Metric(
        "ragmon_estimate_corrected",
        "gauge",
        f"Last 7 days: the PPI++ corrected mean of the measure from people's and the judge's "
        f"grades, with its 95 % interval (bound=estimate, low or high); {_FEW_LABELS}.",
        (*ESTIMATE_LABELS, "bound"),
    ),
    Metric(
        "ragmon_estimate_human_labels",
        "gauge",
        "Last 7 days: units people graded for the corrected mean (passages for precision; "
        "events whose passages were all graded for ndcg and hit).",
        ESTIMATE_LABELS,
    ),
    Metric(
        "ragmon_estimate_effective_labels",
        "gauge",
        "Last 7 days: how many people's grades alone the corrected mean is worth (its interval "
        f"is as narrow as that many would give); {_FEW_LABELS}.",
        ESTIMATE_LABELS,
    ),
)

# The anchor set's daily re-judging (judge drift): the latest complete run, and the first run of
# the same judge identity (its baseline), by judge identity.
ANCHOR: tuple[Metric, ...] = (
    Metric(
        "ragmon_judge_anchor_kappa",
        "gauge",
        "The anchor set's latest complete re-judging (daily): quadratic-weighted kappa of the "
        "judge with the set's grades, with its 95 % interval (bound=estimate, low or high).",
        ("judge", "bound"),
    ),
    Metric(
        "ragmon_judge_anchor_baseline_kappa",
        "gauge",
        "The same on the judge identity's first re-judging of the anchor set (its baseline): the "
        "RagmonJudgeDrift alert fires when the latest interval lies below it.",
        ("judge", "bound"),
    ),
    Metric(
        "ragmon_judge_anchor_difference",
        "gauge",
        "The anchor set's latest re-judging: the judge's mean grade minus the set's (> 0: it "
        "over-grades), with its 95 % interval (bound=estimate, low or high).",
        ("judge", "bound"),
    ),
    Metric(
        "ragmon_judge_anchor_passages",
        "gauge",
        "Passages of the anchor set the latest complete re-judging graded.",
        ("judge",),
    ),
    Metric(
        "ragmon_judge_anchor_run_timestamp_seconds",
        "gauge",
        "When the latest complete re-judging of the anchor set ran (unix seconds): more than a "
        "day old means the daily run is not happening (no worker --with-scheduler, budget).",
        ("judge",),
    ),
    Metric(
        "ragmon_judge_anchor_blind",
        "gauge",
        "1 for why the judge drift watch cannot measure agreement now, 0 for the other reasons "
        "(all 0: it can): no_run (never re-judged), no_set (nothing to re-judge yet), too_few "
        "(the set needs 30 passages from 10 questions), incomplete (the judge did not grade "
        "every passage), late (no run for twice RAGMON_ANCHOR_EVERY_HOURS).",
        ("reason",),
    ),
    Metric(
        "ragmon_judge_anchor_set_passages",
        "gauge",
        "Passages of the anchor set at its latest re-judging (agreement needs 30 from 10 "
        "questions; the set grows as people grade, up to RAGMON_ANCHOR_SIZE).",
        (),
    ),
    Metric(
        "ragmon_judge_anchor_set_questions",
        "gauge",
        "Distinct questions the anchor set's passages come from, at its latest re-judging.",
        (),
    ),
)

# How much is judged (docs/sampling.md). With RAGMON_SAMPLING=fixed the plan is a forecast: the
# fixed rate per series, and the pace and run-out of the budget at that rate.
SAMPLING: tuple[Metric, ...] = (
    Metric(
        "ragmon_judge_spend_today_usd",
        "gauge",
        "Judge spend of the current UTC day in USD, every model (RAGMON_DAILY_BUDGET_USD caps it).",
    ),
    Metric(
        "ragmon_judge_app_spend_today_usd",
        "gauge",
        "Judge spend of the current UTC day in USD of one app's events (the apps that spent).",
        ("app",),
    ),
    Metric(
        "ragmon_judge_app_budget_usd",
        "gauge",
        "An app's own daily judge budget in USD (RAGMON_APP_DAILY_BUDGET_USD; the apps that "
        "have one, `*` counting for each app that spent today): at it, the app's events are "
        "stored, not judged.",
        ("app",),
    ),
    Metric(
        "ragmon_sampling_pace",
        "gauge",
        "The day's forecast spend at the current rates over RAGMON_DAILY_BUDGET_USD "
        "(1: the budget lasts to midnight UTC; above 1: it runs out sooner; 0: no budget).",
    ),
    Metric(
        "ragmon_sampling_budget_runout_timestamp_seconds",
        "gauge",
        "When the day's budget would run out at the current rates (unix seconds); "
        "+Inf when it lasts the day.",
    ),
    Metric(
        "ragmon_sampling_rate",
        "gauge",
        "The probability with which a new event of the series is judged now (its events' "
        "inclusion probability; RAGMON_SAMPLE_RATE with RAGMON_SAMPLING=fixed).",
        SERIES_LABELS,
    ),
)

ALL: tuple[Metric, ...] = (
    QUALITY + SUM_SQUARES + (WEIGHT_SQUARES,) + OPERATIONS + SIGNALS + JUDGING + ANCHOR + SAMPLING
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
    """The metrics table of docs/metrics.md, generated from this catalog."""
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for m in ALL:
        name = f"{m.name}_total" if m.type == "counter" else m.name
        rows.append(f"| `{name}` | {m.type} | {', '.join(m.labels) or '—'} | {m.help} |")
    return "\n".join(rows)
