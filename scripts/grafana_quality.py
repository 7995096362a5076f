"""The "Retrieval quality" dashboard as data (source of grafana/dashboards/ragmon-quality.json).

Every panel has a one-sentence description for people who are not IR researchers.
"""

from __future__ import annotations

from typing import Any

from grafana_panels import (
    BAND,
    bounded,
    dashboard,
    explorer_link,
    explorer_variable,
    panel,
    query_variable,
    row,
    stat,
    target,
    timeseries,
)

from ragmon.core.measure_table import MEASURES as TABLE

SEL = 'app=~"$app", index=~"$index", retriever=~"$retriever", segment=~"$segment"'

# (key, title, unit, description) of the quality measures shown as means over time: those the
# measure table gives a panel description, in its order but led by nDCG@K, the one most readers
# know.
MEASURES: tuple[tuple[str, str, str, str], ...] = tuple(
    (m.key, m.dashboard_title, m.unit, m.panel)
    for m in sorted(TABLE, key=lambda m: m.key != "ndcg")
    if m.panel
)
TITLES = {m.key: m.dashboard_title for m in TABLE}
UNITS = {m.key: m.unit for m in TABLE}

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


def covered(window: str, by: str = "") -> str:
    """The share of the accepted events that the judged ones stand for: each judged event weighs
    1 / its inclusion probability in a quality histogram's _count (1 with a fixed rate, then
    divided by it), and every accepted event is counted once in the signals' histograms
    (`ragmon:retrieval_coverage:share1d` is the same for a day)."""
    agg = f"sum by ({by}) " if by else "sum "
    return (
        f"{agg}(increase(ragmon_retrieval_ndcg_count{{{SEL}}}[{window}]))\n"
        f"/ {agg}(increase(ragmon_signal_results_count{{{SEL}}}[{window}]))\n"
        "/ scalar(max(ragmon_sampling_fixed_rate) or vector(1))"
    )


def quantile(q: float, key: str, window: str = "$window") -> str:
    """The q-quantile of a quality histogram over the selected series."""
    return (
        f"histogram_quantile({q}, sum by (le) "
        f"(rate(ragmon_retrieval_{key}_bucket{{{SEL}}}[{window}])))"
    )


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
    return [*(query_variable(*c) for c in chain), window, explorer_variable()]


def _link_to_explorer(panels: list[dict[str, Any]]) -> None:
    """Every data panel links to the explorer's events behind it: its labels (the clicked
    retriever on a per-retriever panel), its time range, sorted worst first by its measure."""
    for p in panels:
        if p["type"] in ("row", "text"):
            continue
        legends = " ".join(t.get("legendFormat", "") for t in p["targets"])
        per_field = ("retriever",) if "{{retriever}}" in legends else ()
        first = p["targets"][0]["expr"]
        sort = next((m.key for m in TABLE if m.explore and f"retrieval_{m.key}_" in first), None)
        p["fieldConfig"]["defaults"]["links"] = [explorer_link(per_field, sort)]


def corrected_panels() -> list[dict[str, Any]]:
    """The corrected estimates of the last 7 days (docs/agreement.md), beside the judge-only
    means, each with its 95 % interval."""
    title = "Corrected with people's grades (docs/agreement.md)"
    p: list[dict[str, Any]] = [row(title, collapsed=True)]
    for key in ("ndcg", "precision", "hit"):
        sel = f'{SEL}, measure="{key}"'
        judge_only = target(f"ragmon_estimate_judge_only{{{sel}}}", "{{retriever}} judge only")
        p.append(
            timeseries(
                f"{TITLES[key]} corrected with people's grades (last 7 days)",
                f"The last 7 days' mean {TITLES[key]} with the judge's grades alone, and "
                "corrected with people's grades (PPI++) with its 95 % interval (dashed): a "
                "judge-only mean outside the interval is the judge's bias. Empty until 10 "
                "units of 10 events were graded by people.",
                [*bounded("ragmon_estimate_corrected", sel, "{{retriever}} corrected"),
                 judge_only],
                unit=UNITS[key],
                fieldConfig={"defaults": {"unit": UNITS[key]}, "overrides": [BAND]},
            )
        )  # fmt: skip
    return p


def signal_panels() -> list[dict[str, Any]]:
    """The retrieval signals of every accepted event, judged or not (docs/signals.md): one
    panel per judge-free alert, then the query mix and a score-based predictor."""
    by = "app, index, retriever, segment"
    events = f"sum by ({by}) (rate(ragmon_signal_results_count{{{SEL}}}[$window]))"
    empties = f'sum by ({by}) (rate(ragmon_signal_results_bucket{{{SEL}, le="0.0"}}[$window]))'
    empty = f"{empties}\n/ {events}"
    scored = (
        f"sum by ({by}) (rate(ragmon_signal_top_score_count{{{SEL}}}[$window]))\n"
        f"/ ({events}\n- {empties})"
    )
    legend = "{{retriever}} {{index}} {{segment}}"
    no_scores = "no scores sent (docs/signals.md: how to send them)"

    def signal_mean(key: str) -> str:  # delta: scores may be negative (as T)
        return (
            f"sum by ({by}) (delta(ragmon_signal_{key}_sum{{{SEL}}}[$window]))\n"
            f"/ sum by ({by}) (delta(ragmon_signal_{key}_count{{{SEL}}}[$window]))"
        )

    return [
        row("Signals of every event, no judge (docs/signals.md)", collapsed=True),
        timeseries(
            "Empty results (share) by retriever",
            "Share of retrievals that returned no passage, every accepted event counted "
            "(sampled out or not): a jump is an index outage, seen before any judged mean "
            "moves (alerts RagmonEmptyResultsHigh and, for series under 30 a minute, "
            "RagmonEmptyResultsHighSlow).",
            [target(empty, legend)],
            unit="percentunit",
            defaults={"min": 0},
        ),
        timeseries(
            "Events received by retriever",
            "Retrievals accepted per second, judged or not: a line that drops to zero is a "
            "series that stopped sending (alert RagmonSeriesStopped).",
            [target(events, legend)],
            unit="reqps",
        ),
        timeseries(
            "Top score (mean) by retriever",
            "The retriever's own score of its first passage, averaged: a fall means weaker "
            "matches, a move either way a changed scale (alert RagmonTopScoreShift). Retrievers "
            "score on different scales: compare a line with its own past. A retriever that "
            "sends no scores has no line (Scored events, below).",
            [target(signal_mean("top_score"), legend)],
            defaults={"noValue": no_scores},
        ),
        timeseries(
            "Scored events (share) by retriever",
            "Share of the retrievals with results whose every passage carried a score: the "
            "score panels (top score, gap, QPP) count only those. 0 is a retriever that sends "
            "no scores, as LangChain's stock retrievers (docs/signals.md says how to send them).",
            [target(scored, legend)],
            unit="percentunit",
            defaults={"min": 0, "max": 1},
        ),
        timeseries(
            "Query length (mean words) by retriever",
            "Words per query: a shift means a different query mix (new users, a new "
            "feature), a common cause of quality changes.",
            [target(signal_mean("query_words"), legend)],
        ),
        timeseries(
            "QPP: WIG (mean) by retriever",
            "A quality estimate from the scores alone (weighted information gain): it "
            "correlates weakly with judged nDCG@K (docs/signals.md), so read its change "
            "within a series, not its level.",
            [target(signal_mean("qpp_wig"), legend)],
            defaults={"noValue": no_scores},
        ),
    ]


# The first row's change panels: (measure, the change that turns it red: a fall, or for
# Harm@K a rise), in the alerts' terms (docs/grafana.md).
# The "Events the means cover" stat is red below 90 %.
COVERED_GREEN = {"mode": "absolute", "steps": [{"color": "red", "value": None},
                                               {"color": "green", "value": 0.9}]}  # fmt: skip
CHANGES = (("ndcg", -0.03), ("hit", -0.05), ("t", -0.1), ("harm", 0.05))
# The per-retriever time series the first row shows: the measures the quality alerts watch.
FIRST_SERIES = ("ndcg", "t", "hit", "harm")


def change(key: str, by: str = "") -> str:
    """The mean over the selected range minus the same range a week earlier."""
    return (
        f"({mean(key, '$__range', by=by)})\n- ({mean(key, '$__range', by=by, extra=' offset 1w')})"
    )


def _red_when(limit: float) -> dict[str, Any]:
    """Thresholds that colour a change red past `limit` (below it, or above a positive one)."""
    if limit < 0:
        steps = [{"color": "red", "value": None}, {"color": "green", "value": limit}]
    else:
        steps = [{"color": "green", "value": None}, {"color": "red", "value": limit}]
    return {"mode": "absolute", "steps": steps}


def first_screen() -> list[dict[str, Any]]:
    """At most 12 panels that answer "is retrieval getting worse, where, since when": the
    week-over-week changes, each retriever's level and change, and the alerted measures per
    retriever over time."""
    p: list[dict[str, Any]] = [row("Is retrieval getting worse? Where? Since when?")]
    p.append(
        stat(
            "Events the means cover",
            "The share of the range's accepted events that its judged events stand for (each "
            "1 / its inclusion probability): below 100 % some went unjudged (the budget ran "
            "out, the judge failed, or they are still queued), and every mean here covers only "
            "that share.",
            covered("$__range"),
            unit="percentunit",
            defaults={"decimals": 0, "thresholds": COVERED_GREEN, "color": {"mode": "thresholds"}},
        )
    )
    p.append(
        stat(
            "nDCG@K (range mean)",
            next(d for k, _, _, d in MEASURES if k == "ndcg"),
            mean("ndcg", "$__range"),
            defaults={"decimals": 3},
        )
    )
    for key, limit in CHANGES:
        worse = "a rise" if limit > 0 else "a fall"
        p.append(
            stat(
                f"{TITLES[key]} vs a week earlier",
                f"The selected range's mean {TITLES[key]} minus the same range a week "
                f"earlier: red is {worse} of {abs(limit):g} or more.",
                change(key),
                unit=UNITS[key],
                defaults={"decimals": 3, "thresholds": _red_when(limit), "color":
                          {"mode": "thresholds"}},
            )
        )  # fmt: skip
    measures = [k for k, _, _, _ in MEASURES]
    table_targets = [
        target(mean(k, "$__range", by="retriever"), TITLES[k], instant=True, range=False,
               format="table")
        for k in measures
    ] + [target(covered("$__range", by="retriever"), "covered", instant=True, range=False,
                format="table")]  # fmt: skip
    titles = [TITLES[k] for k in measures] + ["events covered"]
    renames = {f"Value #{chr(ord('A') + i)}": t for i, t in enumerate(titles)}
    p.append(
        panel(
            "table",
            "Scorecard per retriever (selected range)",
            "Each retriever's mean of every measure over the selected time range: a retriever "
            "poor from its first day shows here, where no change does.",
            table_targets,
            w=12,
            h=8,
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
    p.append(
        panel(
            "bargauge",
            "nDCG@K change vs a week ago, per retriever",
            "Mean nDCG@K over the selected range minus the same range a week earlier: "
            "negative bars are retrievers that got worse.",
            [target(change("ndcg", by="retriever"), "{{retriever}}", instant=True,
                    range=False)],
            w=12,
            h=8,
            defaults={"decimals": 3, "thresholds": _red_when(0.0)},
            options={"orientation": "horizontal", "displayMode": "basic",
                     "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        )
    )  # fmt: skip
    for key, title, unit, desc in MEASURES:
        if key in FIRST_SERIES:
            p.append(
                timeseries(f"{title} by retriever", desc,
                           [target(mean(key, by="retriever"), "{{retriever}}")], unit=unit, w=12)
            )  # fmt: skip
    return p


def retrieval_quality() -> dict[str, Any]:
    """The "Retrieval quality" dashboard: the first screen, then rows opened on demand."""
    p = first_screen()
    p.append(row("Mean over time (window: $window)", collapsed=True))
    for key, title, unit, desc in MEASURES:
        p.append(timeseries(f"{title} (mean)", desc, [target(mean(key), title)], unit=unit))

    p.append(row("Every measure per retriever", collapsed=True))
    for key, title, unit, desc in MEASURES:
        if key not in FIRST_SERIES:
            p.append(
                timeseries(f"{title} by retriever", desc,
                           [target(mean(key, by="retriever"), "{{retriever}}")], unit=unit)
            )  # fmt: skip

    p.append(row("Distributions", collapsed=True))
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

    p.append(row("UDCG coverage (RAGMON_UTILITY=on)", collapsed=True))
    p.append(
        timeseries(
            "Events with UDCG",
            "Share of judged events that got a UDCG: below 1 means the utility probe is off or "
            "the endpoint returns no logprobs (Operations dashboard: events without UDCG).",
            [target(
                f"sum(rate(ragmon_retrieval_udcg_count{{{SEL}}}[$window]))\n"
                f"/ sum(rate(ragmon_retrieval_ndcg_count{{{SEL}}}[$window]))", "with UDCG")],
            unit="percentunit",
            defaults={"min": 0, "max": 1},
        )
    )  # fmt: skip

    p.append(row("Which measure to trust: the K / N̂p regime", collapsed=True))
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

    p.extend(corrected_panels())

    p.append(row("Week over week", collapsed=True))
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
    p.extend(signal_panels())
    _link_to_explorer(p)
    return dashboard(
        "ragmon-quality",
        "ragmon: Retrieval quality",
        "How good the passages your RAG app puts into its prompts are, judged per passage.",
        _quality_variables(),
        p,
    )
