"""The metrics of the judge's oversight (agreement with people and a second judge, corrected
estimates, the anchor set's drift watch) and of the sampling plan: part of the catalog
(`ragmon.core.catalog.ALL`), written once."""

from __future__ import annotations

from ragmon.core.metric import SERIES_LABELS, Metric

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
