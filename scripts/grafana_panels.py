"""ragmon's two Grafana dashboards as data: the single source of grafana/dashboards/*.json.

Edit here, then run `python scripts/build_grafana.py`. Every panel has a one-sentence
description for people who are not information-retrieval researchers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DATASOURCE_UID = "ragmon-prometheus"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'app=~"$app", index=~"$index", retriever=~"$retriever", segment=~"$segment"'

# (key, title, unit, description) of the quality measures shown as means over time.
MEASURES: tuple[tuple[str, str, str, str], ...] = (
    (
        "ndcg",
        "nDCG@K",
        "none",
        "How close the prompt's passages are to the best possible order of the passages judged "
        "for the query: 1 = the most relevant ones came first, 0 = none of the top K is relevant.",
    ),
    (
        "t",
        "T",
        "none",
        "Relevant passages that reached the prompt minus a penalty for the irrelevant ones "
        "around them (Schwartz et al.); higher is better and its scale grows with K.",
    ),
    (
        "f_e",
        "F_e",
        "none",
        "Balance of finding the relevant passages and not padding the prompt with others, with "
        "the number of relevant passages estimated from the top 2K; 1 is perfect.",
    ),
    (
        "harm",
        "Harm@K",
        "percentunit",
        "Share of the prompt taken by distractors: passages on the topic that do not answer "
        "and can mislead the LLM; lower is better.",
    ),
    (
        "precision",
        "Precision@K",
        "percentunit",
        "Share of the passages put in the prompt that are relevant to the query.",
    ),
    (
        "hit",
        "Hit rate",
        "percentunit",
        "Share of queries with at least one relevant passage in the prompt; a miss means the "
        "LLM had nothing to answer from.",
    ),
)
TITLES = {key: title for key, title, _, _ in MEASURES} | {"rr": "RR@K", "k_over_np": "K/N̂p"}
UNITS = {key: unit for key, _, unit, _ in MEASURES} | {"rr": "none", "k_over_np": "none"}

REGIME_NOTE = """**Which measure to trust: K / N̂p**

K is how many passages go into the prompt; N̂p estimates how many relevant passages exist
for the query (counted in the top 2K).

* **K / N̂p below 1**: there are more relevant passages than prompt slots. Trust **T**:
  it rewards every relevant passage the prompt gets and tracks answer quality best here.
* **K / N̂p well above 1** (say over 2): few relevant passages exist, so what matters is
  whether they are ranked first. Trust **nDCG@K**.
* In between, read both.

Source: Schwartz et al., conclusions. Needs events sent with 2K passages."""


# T can be negative, so its histogram's _sum goes down as well as up and rate() would read
# every decrease as a counter reset. delta() gives the same ratio for series that never reset
# (ragmon's aggregates live in Redis and survive restarts of the API).
SIGNED = frozenset({"t"})


def mean(key: str, window: str = "$window", by: str = "", extra: str = "") -> str:
    """rate(_sum)/rate(_count) of a quality histogram over the selected series (delta for T)."""
    agg = f"sum by ({by}) " if by else "sum "
    m = f"ragmon_retrieval_{key}"
    fn = "delta" if key in SIGNED else "rate"
    return (
        f"{agg}({fn}({m}_sum{{{SEL}}}[{window}]{extra}))\n"
        f"/ {agg}({fn}({m}_count{{{SEL}}}[{window}]{extra}))"
    )


def quantile(q: float, key: str, window: str = "$window") -> str:
    """The q-quantile of a quality histogram over the selected series."""
    return (
        f"histogram_quantile({q}, sum by (le) "
        f"(rate(ragmon_retrieval_{key}_bucket{{{SEL}}}[{window}])))"
    )


def target(expr: str, legend: str = "", **extra: Any) -> dict[str, Any]:
    """One Prometheus query of a panel (refIds are set by the panel)."""
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "range": True, **extra}


def panel(
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    w: int = 8,
    h: int = 8,
    unit: str = "none",
    **extra: Any,
) -> dict[str, Any]:
    """A panel; `extra` keys are merged into it (fieldConfig, options, transformations)."""
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    p: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "gridPos": {"w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }
    for key, value in extra.items():
        if key == "defaults":
            p["fieldConfig"]["defaults"].update(value)
        else:
            p[key] = value
    return p


def timeseries(title: str, description: str, targets: list, **kw: Any) -> dict[str, Any]:
    """A time-series panel with a bottom legend and a shared tooltip."""
    kw.setdefault("options", {})
    kw["options"] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
        **kw["options"],
    }
    return panel("timeseries", title, description, targets, **kw)


def stat(title: str, description: str, expr: str, **kw: Any) -> dict[str, Any]:
    """A single-number panel (last value of an instant query)."""
    kw.setdefault("w", 4)
    kw.setdefault("h", 4)
    t = target(expr, instant=True, range=False)
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    options |= {"colorMode": "value", "graphMode": "none", "textMode": "auto"}
    return panel("stat", title, description, [t], options=options, **kw)


def heatmap(key: str) -> dict[str, Any]:
    """The distribution of one quality measure over time (histogram buckets)."""
    expr = f"sum by (le) (increase(ragmon_retrieval_{key}_bucket{{{SEL}}}[$__rate_interval]))"
    options = {
        "calculate": False,
        "yAxis": {"axisPlacement": "left", "unit": UNITS[key]},
        "rowsFrame": {"layout": "le"},
        "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64},
        "cellGap": 1,
        "tooltip": {"mode": "single", "yHistogram": True},
        "legend": {"show": True},
    }
    return panel(
        "heatmap",
        f"{TITLES[key]} distribution",
        f"How many events scored in each band of {TITLES[key]} over time: a band that empties "
        "or a new dark band shows a change the mean can hide.",
        [target(expr, "{{le}}", format="heatmap")],
        options=options,
    )


def row(title: str) -> dict[str, Any]:
    """A row header spanning the dashboard."""
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {}}


def layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flow panels left to right on Grafana's 24-column grid; ids in order."""
    x = y = line_h = 0
    for pid, p in enumerate(panels, start=1):
        p["id"] = pid
        if p["type"] == "row":
            y += line_h
            p["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y, x, line_h = y + 1, 0, 0
            continue
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            y, x, line_h = y + line_h, 0, 0
        p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        x, line_h = x + w, max(line_h, h)
    return panels


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    """A multi-select variable filled from Prometheus label values, "All" by default."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
        "regex": "",
    }


def datasource_variable() -> dict[str, Any]:
    """The Prometheus to read: the provisioned one by default, any other on import."""
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": True, "text": "ragmon Prometheus", "value": DATASOURCE_UID},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def dashboard(
    uid: str, title: str, description: str, variables: list, panels: list
) -> dict[str, Any]:
    """A complete dashboard JSON model (Grafana 10/11 schema)."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["ragmon"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "1m",
        "time": {"from": "now-24h", "to": "now"},
        "schemaVersion": 39,
        "version": 1,
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["ragmon"],
                "title": "ragmon",
                "asDropdown": False,
                "includeVars": False,
                "keepTime": True,
            }
        ],
        "panels": layout(panels),
    }


def _quality_variables() -> list[dict[str, Any]]:
    base = "ragmon_retrieval_ndcg_count"
    # Each variable offers the values that exist under the ones chosen before it.
    names = ("app", "index", "retriever", "segment")
    chain = []
    for i, name in enumerate(names):
        scope = ", ".join(f'{n}=~"${n}"' for n in names[:i])
        series = f"{base}{{{scope}}}" if scope else base
        chain.append((name, name.capitalize(), f"label_values({series}, {name})"))
    window = {
        "name": "window",
        "label": "Averaging window",
        "type": "interval",
        "query": "5m,15m,1h,6h,1d",
        "current": {"selected": True, "text": "1h", "value": "1h"},
        "options": [
            {"selected": v == "1h", "text": v, "value": v} for v in ["5m", "15m", "1h", "6h", "1d"]
        ],
        "auto": False,
        "hide": 0,
        "refresh": 2,
    }
    return [*(query_variable(*c) for c in chain), window]


def retrieval_quality() -> dict[str, Any]:
    """The "Retrieval quality" dashboard."""
    range_mean = {k: mean(k, "$__range") for k in ("ndcg", "t", "hit", "harm", "precision")}
    p: list[dict[str, Any]] = [row("Overview for the selected range")]
    p.append(
        stat(
            "Events judged",
            "Retrievals judged and measured in the selected time range (after sampling).",
            f"sum(increase(ragmon_retrieval_ndcg_count{{{SEL}}}[$__range]))",
            defaults={"decimals": 0},
        )
    )
    for key in ("ndcg", "t", "hit", "harm", "precision"):
        desc = next(d for k, _, _, d in MEASURES if k == key)
        p.append(
            stat(f"{TITLES[key]} (range mean)", desc, range_mean[key], unit=UNITS[key],
                 defaults={"decimals": 3 if UNITS[key] == "none" else 1})
        )  # fmt: skip

    p.append(row("Mean over time (window: $window)"))
    for key, title, unit, desc in MEASURES:
        p.append(timeseries(f"{title} (mean)", desc, [target(mean(key), title)], unit=unit))

    p.append(row("Per retriever, side by side"))
    measures = [k for k, _, _, _ in MEASURES]
    table_targets = [
        target(mean(k, "$__range", by="retriever"), TITLES[k], instant=True, range=False,
               format="table")
        for k in measures
    ]  # fmt: skip
    renames = {f"Value #{chr(ord('A') + i)}": TITLES[k] for i, k in enumerate(measures)}
    p.append(
        panel(
            "table",
            "Scorecard per retriever (selected range)",
            "Each retriever's mean of every measure over the selected time range: compare "
            "retrievers on the same traffic at a glance.",
            table_targets,
            w=24,
            h=6,
            defaults={"decimals": 3},
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True}, "renameByName": renames},
                },
            ],
            options={"showHeader": True, "cellHeight": "sm"},
        )
    )
    for key, title, unit, desc in MEASURES:
        p.append(
            timeseries(f"{title} by retriever", desc,
                       [target(mean(key, by="retriever"), "{{retriever}}")], unit=unit)
        )  # fmt: skip

    p.append(row("Distributions"))
    for key in ("ndcg", "t", "f_e", "harm", "precision", "rr"):
        p.append(heatmap(key))
    for key in ("ndcg", "t", "f_e"):
        p.append(
            timeseries(
                f"{TITLES[key]}: p10 and median",
                f"The {TITLES[key]} that 10% of queries fall below (the bad tail) and the "
                "median query's: a falling p10 with a steady median means a class of queries "
                "got worse.",
                [target(quantile(0.1, key), "p10"), target(quantile(0.5, key), "median")],
                unit=UNITS[key],
            )
        )
    p.append(
        timeseries(
            "Harm@K: median and p90",
            "The share of distractors in the prompt for the median query and for the worst "
            "10% of queries; lower is better.",
            [target(quantile(0.5, "harm"), "median"), target(quantile(0.9, "harm"), "p90")],
            unit="percentunit",
        )
    )

    p.append(row("Which measure to trust: the K / N̂p regime"))
    p.append(
        panel("text", "Reading K / N̂p", "When to trust T and when nDCG@K.", [], h=9,
              options={"mode": "markdown", "content": REGIME_NOTE})
    )  # fmt: skip
    p.append(
        timeseries(
            "K / N̂p: median and quartiles",
            "Prompt slots per relevant passage available: below 1 trust T, well above 1 "
            "trust nDCG@K.",
            [target(quantile(q, "k_over_np"), label) for q, label in
             ((0.25, "p25"), (0.5, "median"), (0.75, "p75"))],
            h=9,
        )
    )  # fmt: skip
    share = (
        'sum(rate(ragmon_retrieval_k_over_np_bucket{{{sel}, le=~"{le}"}}[$window]))\n'
        "/ sum(rate(ragmon_retrieval_k_over_np_count{{{sel}}}[$window]))"
    )
    p.append(
        timeseries(
            "Share of queries per regime",
            "Share of queries where T is the better guide (K/N̂p ≤ 1) and where nDCG@K is "
            "(K/N̂p > 2).",
            [
                target(share.format(sel=SEL, le="1|1.0"), "K/N̂p ≤ 1: trust T"),
                target("1 - (" + share.format(sel=SEL, le="2|2.0") + ")", "K/N̂p > 2: trust nDCG"),
            ],
            unit="percentunit",
            h=9,
            defaults={"min": 0, "max": 1},
        )
    )

    p.append(row("Week over week"))
    for key in ("ndcg", "t", "hit"):
        p.append(
            timeseries(
                f"{TITLES[key]}: this week vs a week ago",
                f"The mean {TITLES[key]} now and at the same time a week earlier: a gap that "
                "opens after a deploy points at the change.",
                [target(mean(key), "now"), target(mean(key, extra=" offset 1w"), "a week ago")],
                unit=UNITS[key],
                options={"legend": {"displayMode": "list", "placement": "bottom",
                                    "showLegend": True}},
                fieldConfig={"defaults": {"unit": UNITS[key]}, "overrides": [{
                    "matcher": {"id": "byName", "options": "a week ago"},
                    "properties": [{"id": "custom.lineStyle",
                                    "value": {"fill": "dash", "dash": [10, 10]}}],
                }]},
            )
        )  # fmt: skip
    change = (
        "("
        + mean("ndcg", "$__range", by="retriever")
        + ")\n- ("
        + mean("ndcg", "$__range", by="retriever", extra=" offset 1w")
        + ")"
    )
    p.append(
        panel(
            "bargauge",
            "nDCG@K change vs a week ago, per retriever",
            "Mean nDCG@K over the selected range minus the same range a week earlier: "
            "negative bars are retrievers that got worse.",
            [target(change, "{{retriever}}", instant=True, range=False)],
            w=24,
            h=6,
            defaults={
                "decimals": 3,
                "thresholds": {"mode": "absolute", "steps": [
                    {"color": "red", "value": None}, {"color": "green", "value": 0}]},
            },
            options={"orientation": "horizontal", "displayMode": "basic",
                     "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        )
    )  # fmt: skip
    return dashboard(
        "ragmon-quality",
        "ragmon: Retrieval quality",
        "How good the passages your RAG app puts into its prompts are, judged per passage.",
        _quality_variables(),
        p,
    )


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
        timeseries("Queue depth", "Events waiting for a worker; a line that keeps climbing "
                   "means the workers do not keep up.",
                   [target("max(ragmon_queue_depth)", "waiting")], w=12)
    )  # fmt: skip
    lag = "histogram_quantile({q}, sum by (le) (rate(ragmon_labeling_lag_seconds_bucket[{r}])))"
    p.append(
        timeseries(
            "Labelling lag percentiles",
            "Time from the API receiving an event to its measures being stored, for the "
            "median, the 90th and the 99th percentile event.",
            [target(lag.format(q=q, r=rate), f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
            w=12,
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


DASHBOARDS: tuple[Callable[[], dict[str, Any]], ...] = (retrieval_quality, operations)
