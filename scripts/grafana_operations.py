"""The "Operations" dashboard as data (source of grafana/dashboards/ragmon-operations.json)."""

from __future__ import annotations

from typing import Any

from grafana_panels import BAND, DS, bounded, dashboard, row, stat, target, timeseries


def judging_panels() -> list[dict[str, Any]]:
    """The judge against people, a second judge and the anchor set (docs/agreement.md), each
    with its 95 % interval dashed."""
    who = "{{app}}: {{judge}} vs {{reference}}"
    p: list[dict[str, Any]] = [row("The judge against people (docs/agreement.md)")]
    for name, title, desc, unit in (
        ("quadratic_kappa", "Judge agreement: quadratic-weighted kappa",
         "Quadratic-weighted kappa of each judge identity with people's grades (reference "
         "human) or with the first judge (a second judge's), by app: 1 is perfect, 0 chance; "
         "a near miss costs little. Empty until 30 passages of 10 events were graded by both.",
         "none"),
        ("exact", "Judge agreement: same grade",
         "Share of passages the judge gave the same 0-3 grade as the reference, by app.",
         "percentunit"),
        ("difference", "Judge minus people: mean grade",
         "The judge's mean grade minus the reference's on the same passages: above 0 the judge "
         "over-grades (LLM judges often do).", "none"),
    ):  # fmt: skip
        p.append(timeseries(title, desc, bounded(f"ragmon_judge_agreement_{name}",
                                                 'app=~".+"', who),
                            unit=unit, fieldConfig={"defaults": {"unit": unit},
                                                    "overrides": [BAND]}))  # fmt: skip
    p.append(
        timeseries(
            "Judge drift: the anchor set",
            "Kappa of the judge with the anchor set's grades at its daily re-judging and at the "
            "judge identity's first run (its baseline): RagmonJudgeDrift fires when the "
            "interval falls below the baseline.",
            [*bounded("ragmon_judge_anchor_kappa", 'judge=~".+"', "{{judge}}"),
             target('ragmon_judge_anchor_baseline_kappa{bound="estimate"}',
                    "{{judge}} baseline")],
            fieldConfig={"defaults": {"unit": "none"}, "overrides": [BAND]},
        )
    )  # fmt: skip
    return p


def sampling_panels() -> list[dict[str, Any]]:
    """How much is judged and what it costs (docs/sampling.md): the day's spend, the pace of
    the budget and each series' rate (RAGMON_SAMPLING=planned)."""
    p: list[dict[str, Any]] = [row("Sampling (docs/sampling.md)")]
    p.append(
        timeseries("Judge spend today", "USD spent on the judge since midnight UTC, every "
                   "model, in all and per app, beside each app's own budget "
                   "(RAGMON_APP_DAILY_BUDGET_USD); with RAGMON_SAMPLING=planned the rates keep "
                   "it within RAGMON_DAILY_BUDGET_USD until midnight.",
                   [target("max(ragmon_judge_spend_today_usd)", "spent today"),
                    target("max by (app) (ragmon_judge_app_spend_today_usd)", "{{app}}"),
                    target("max by (app) (ragmon_judge_app_budget_usd)", "{{app}} budget")],
                   w=6,
                   unit="currencyUSD")
    )  # fmt: skip
    p.append(
        timeseries("Budget pace", "The day's forecast spend at the current rates over the "
                   "budget: 1 lasts to midnight UTC, above 1 runs out sooner (the plan then "
                   "lowers the rates).",
                   [target("max(ragmon_sampling_pace)", "pace")], w=6, unit="none")
    )  # fmt: skip
    p.append(
        stat("Budget runs out at", "When the day's budget would run out at the current rates "
             "(empty or +Inf: it lasts the day).",
             "min(ragmon_sampling_budget_runout_timestamp_seconds) * 1000",
             unit="dateTimeAsIso")
    )  # fmt: skip
    p.append(
        timeseries("Judged share by series", "The probability with which a new event of each "
                   "series is judged: higher for small series (a daily minimum) and for "
                   "precision targets, lower for busy ones.",
                   [target("max by (app, index, retriever, segment) (ragmon_sampling_rate)",
                           "{{app}} {{index}} {{retriever}} {{segment}}")],
                   w=8, unit="percentunit", defaults={"min": 0, "max": 1})
    )  # fmt: skip
    return p


def operations() -> dict[str, Any]:
    """The "Operations" dashboard."""
    rate = "$__rate_interval"

    def total(name: str) -> str:
        return f"sum(rate({name}[{rate}])) or vector(0)"

    p: list[dict[str, Any]] = [row("Health")]
    p += [
        stat("API scraped", "1 when Prometheus can read ragmon's /metrics; 0 means ragmon is "
             "down or unreachable.", 'min(up{job=~"$job"})',
             defaults={"mappings": [{"type": "value", "options": {
                 "0": {"text": "DOWN", "color": "red"}, "1": {"text": "UP", "color": "green"}}}]}),
        stat("Queue depth", "Events waiting to be judged; it should stay near zero.",
             "max(ragmon_queue_depth)", defaults={"decimals": 0}),
        stat("Judge budget", "Whether today's judge spend reached RAGMON_DAILY_BUDGET_USD "
             "(then events are stored but not judged until midnight UTC).",
             "max(ragmon_judge_budget_exhausted)",
             defaults={"mappings": [{"type": "value", "options": {
                 "0": {"text": "OK", "color": "green"},
                 "1": {"text": "SPENT", "color": "red"}}}]}),
        stat("Events received /s", "Retrievals the API accepted per second.",
             f"sum(rate(ragmon_events_received_total[{rate}]))", unit="reqps"),
        stat("Labelling lag p90", "90% of events got their measures within this time after "
             "the API received them.",
             "histogram_quantile(0.9, sum by (le) "
             f"(rate(ragmon_labeling_lag_seconds_bucket[{rate}])))", unit="s"),
        stat("Judge spend, last 24h", "USD spent on the LLM judge over the last 24 hours.",
             "sum(increase(ragmon_judge_cost_usd_total[1d])) or vector(0)", unit="currencyUSD",
             defaults={"decimals": 2}),
    ]  # fmt: skip

    p.append(row("Events"))
    p.append(
        timeseries(
            "Events per second by outcome",
            "What happened to the retrievals your app sent: received, judged (labelled), "
            "failed after retries, refused, or skipped by sampling.",
            [
                target(total("ragmon_events_received_total"), "received"),
                target(total("ragmon_events_labeled_total"), "labelled"),
                target(total("ragmon_events_failed_total"), "failed"),
                target(total("ragmon_events_rejected_total"), "rejected"),
                target(total("ragmon_events_sampled_out_total"), "sampled out"),
            ],
            w=12,
            unit="ops",
        )
    )
    for name, title, desc in (
        ("rejected", "Rejected by reason", "Requests the API refused, by reason: invalid "
         "input, too large, queue full (backpressure) or a missing or wrong API key."),
        ("failed", "Failed by reason", "Events that could not be judged after all retries, by "
         "reason; they have no measures."),
    ):  # fmt: skip
        p.append(
            timeseries(title, desc,
                       [target(f"sum by (reason) (rate(ragmon_events_{name}_total[{rate}]))",
                               "{{reason}}")], w=6, unit="ops")
        )  # fmt: skip

    p.append(row("Backlog and lag"))
    p.append(
        timeseries("Queue depth", "Events waiting to be judged, every app; a line that keeps "
                   "climbing means the workers do not keep up.",
                   [target("max(ragmon_queue_depth)", "waiting")], w=8)
    )  # fmt: skip
    p.append(
        timeseries("Events waiting to retry", "Events held for a retry after a passing judge "
                   "failure (timeout, 429, 5xx, endpoint unreachable); they stay queued "
                   "meanwhile. GET /v1/retrievals/{id} and the worker log say why.",
                   [target("max(ragmon_jobs_waiting_retry)", "waiting to retry")], w=8)
    )  # fmt: skip
    lag = "histogram_quantile({q}, sum by (le) (rate(ragmon_labeling_lag_seconds_bucket[{r}])))"
    p.append(
        timeseries(
            "Labelling lag percentiles",
            "Time from the API receiving an event to its measures being stored, for the "
            "median, the 90th and the 99th percentile event.",
            [target(lag.format(q=q, r=rate), f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
            w=8,
            unit="s",
        )
    )

    p.append(row("Judge"))
    p.append(
        timeseries("Judge requests by outcome", "Calls to the LLM judge per second: ok, or why "
                   "they failed (rate limit, timeout, bad answer).",
                   [target(f"sum by (model, outcome) (rate(ragmon_judge_requests_total[{rate}]))",
                           "{{model}} {{outcome}}")], unit="reqps")
    )  # fmt: skip
    jl = (
        "histogram_quantile({q}, sum by (le, model) "
        "(rate(ragmon_judge_latency_seconds_bucket[{r}])))"
    )
    p.append(
        timeseries("Judge latency", "How long one call to the judge takes, median and 90th "
                   "percentile, per model.",
                   [target(jl.format(q=0.5, r=rate), "{{model}} median"),
                    target(jl.format(q=0.9, r=rate), "{{model}} p90")], unit="s")
    )  # fmt: skip
    hits, misses = "ragmon_judge_cache_hits_total", "ragmon_judge_cache_misses_total"
    p.append(
        timeseries(
            "Judgment cache hit ratio",
            "Share of passages graded from the cache instead of a new judge call; higher "
            "means cheaper.",
            [target(f"sum(rate({hits}[{rate}]))\n/ (sum(rate({hits}[{rate}])) + "
                    f"sum(rate({misses}[{rate}])))", "hit ratio")],
            unit="percentunit",
            defaults={"min": 0, "max": 1},
        )
    )  # fmt: skip
    p.append(
        timeseries(
            "Events without UDCG, by reason",
            "Events measured without UDCG while RAGMON_UTILITY=on: no_logprobs (the endpoint "
            "gives none), no_llm (lexical judge) or a judge failure; UDCG is never guessed.",
            [target("sum by (reason) (rate(ragmon_udcg_missing_total[$__rate_interval])) "
                    "or vector(0)", "{{reason}}")],
            unit="ops",
        )
    )  # fmt: skip
    p.append(
        timeseries(
            "Utility probe: p(NO-RESPONSE) read",
            "How each p(NO-RESPONSE) was obtained: exact (the abstain token was listed), bound "
            "(it was not: the lowest listed probability bounds it) or cache.",
            [target("sum by (how) (rate(ragmon_utility_probes_total[$__rate_interval]))",
                    "{{how}}")],
            unit="ops",
        )
    )  # fmt: skip
    for span, label in (("1h", "hour"), ("1d", "day")):
        p.append(
            timeseries(f"Judge tokens per {label}", f"Tokens sent to and received from the "
                       f"judge over the previous {label}, by model and type.",
                       [target("sum by (model, type) "
                               f"(increase(ragmon_judge_tokens_total[{span}]))",
                               "{{model}} {{type}}")], w=6, unit="short")
        )  # fmt: skip
    for span, label in (("1h", "hour"), ("1d", "day")):
        p.append(
            timeseries(f"Judge USD per {label}", f"Judge spend over the previous {label}, by "
                       "model; compare with RAGMON_DAILY_BUDGET_USD.",
                       [target(f"sum by (model) (increase(ragmon_judge_cost_usd_total[{span}]))",
                               "{{model}}")], w=6, unit="currencyUSD")
        )  # fmt: skip

    p.extend(sampling_panels())
    p.extend(judging_panels())

    p.append(row("Grades"))
    p.append(
        timeseries(
            "Grade distribution over time",
            "Share of passages graded 0 (irrelevant), 1 (related, does not answer), 2 (answers) "
            "and 3 (perfect answer); a growing 0/1 share means worse retrieval.",
            [target(f"sum by (grade) (rate(ragmon_grades_total[{rate}]))\n"
                    f"/ scalar(sum(rate(ragmon_grades_total[{rate}])))", "grade {{grade}}")],
            w=24,
            unit="percentunit",
            defaults={"custom": {"stacking": {"mode": "normal", "group": "A"},
                                 "fillOpacity": 60, "lineWidth": 1},
                      "min": 0, "max": 1},
        )
    )  # fmt: skip
    p.append(row("Memory (docs/reliability.md)"))
    p.append(
        timeseries("Redis memory and its forecast", "What Redis uses, its maxmemory, and the "
                   "steady state forecast at the last day's rates and the retention windows, "
                   "in all and per app (RagmonMemoryForecastHigh fires past 90% of maxmemory; "
                   "past RAGMON_MEMORY_HIGH the apps holding most get 507).",
                   [target("max(ragmon_redis_used_memory_bytes)", "used"),
                    target("max(ragmon_redis_maxmemory_bytes)", "maxmemory (0: none set)"),
                    target("max(ragmon_memory_forecast_total_bytes)", "forecast"),
                    target("max by (app) (ragmon_memory_forecast_bytes)", "{{app}} forecast")],
                   w=24, unit="bytes")
    )  # fmt: skip
    job = {
        "name": "job",
        "label": "Job",
        "type": "query",
        "datasource": DS,
        "definition": "label_values(ragmon_queue_depth, job)",
        "query": {
            "query": "label_values(ragmon_queue_depth, job)",
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "multi": False,
        "includeAll": False,
        "current": {"selected": True, "text": "ragmon", "value": "ragmon"},
        "options": [],
        "hide": 0,
        "regex": "",
        "sort": 1,
    }
    return dashboard(
        "ragmon-operations",
        "ragmon: Operations",
        "Is ragmon keeping up: events, queue, lag, judge calls, tokens and spend.",
        [job],
        p,
    )
