"""RagmonRecallLoss's simulation (`tests.stats.recall_alert_sim`): its arithmetic is the rules'
(checked with promtool on the same input), and a small fixed-seed run meets the bars. The full
run is `nice python -m tests.stats.recall_alert_sim` (tests/stats/README.md has its table)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import yaml

from ragmon.settings import Settings
from tests.grafana.queries import alert_unit_test, rule_groups
from tests.stats.alert_sim import firing
from tests.stats.recall_alert_sim import (
    ALERT,
    DAY,
    WEEK,
    Rule,
    counters,
    delays,
    evaluate,
    null_weeks,
    query_values,
)
from tests.stats.test_alert_sim import SERIES, _annotations, _selector, _values

STEP = 10  # minutes between samples and evaluations in the promtool cross-check
RULE = Rule.of(Settings())


def test_repeated_questions_over_a_stationary_week_fire_nothing() -> None:
    for rate in (1, 5, 60):
        assert null_weeks(rate, RULE, series=2, weeks=1, seed=11) == (0, 2)


def test_a_recall_loss_at_one_event_a_minute_is_alerted_within_a_day() -> None:
    got = delays(1, RULE, series=4, seed=12)
    assert max(got) <= DAY and min(got) >= RULE.for_minutes, got


def test_without_a_loss_nothing_fires_where_a_loss_would() -> None:
    """The same series with `share` 0: the delay is infinite (no firing in two days)."""
    assert delays(1, RULE, series=2, seed=12, share=0.0) == [float("inf")] * 2


def test_the_simulation_computes_what_the_rules_compute(promtool: str, tmp_path: Path) -> None:
    """One series at 1 event a minute losing recall 8 days in: the recorded means, variance
    and threshold, and the alert at every other hour of the 12 after, as promtool has them."""
    rng = np.random.default_rng(13)
    normal, lost = query_values(rng, 300)
    start = DAY + WEEK
    c, s, q = counters(rng, 1, start + 12 * 60, normal, lost, start, 0.3)
    c, s, q = c[STEP - 1 :: STEP], s[STEP - 1 :: STEP], q[STEP - 1 :: STEP]
    got = evaluate(c, s, q, RULE, step=STEP)
    fires = firing(got["condition"], RULE.for_minutes, STEP, lag=0)
    labels = {**SERIES, "job": "ragmon", "instance": "api:8000"}
    name = "ragmon_retrieval_ra_nwg_pooled"
    n = len(c)
    inputs = [
        {"series": _selector("ragmon_retrieval_ndcg_count", labels), "values": _values(c)},
        {"series": _selector(f"{name}_count", labels), "values": _values(c)},
        {"series": _selector(f"{name}_sum", labels), "values": _values(s)},
        {"series": _selector(f"{name}_sum_squares_total", labels), "values": _values(q)},
        {"series": _selector("ragmon_alert_drop_z", {"job": "ragmon"}),
         "values": f"{RULE.z}+0x{n - 1}"},
        {"series": _selector("ragmon_alert_min_events", {"job": "ragmon"}),
         "values": f"{RULE.min_events}+0x{n - 1}"},
    ]  # fmt: skip
    times = [start // STEP + 6 * h for h in range(0, 12, 2)]
    exprs, alerts = [], []
    for i in times:
        for rec, key in (("mean1d", "mean1d"), ("var7d", "var7d"), ("drop_threshold", "threshold")):
            want = float(got[key][i])
            exprs.append(
                {"expr": f"abs(ragmon:retrieval_ra_nwg_pooled:{rec} - {want!r}) "
                         f"<= bool {1e-9 * max(1.0, abs(want))!r}",
                 "eval_time": f"{i * STEP}m",
                 "exp_samples": [{"labels": _selector("", SERIES), "value": 1}]}
            )  # fmt: skip
        alerts.append((f"{i * STEP}m", bool(fires[i]), float(got["mean1d"][i])))
    assert any(f for _, f, _ in alerts) and not all(f for _, f, _ in alerts)  # both outcomes
    (rule,) = [r for g in rule_groups() for r in g["rules"] if r.get("alert") == ALERT]
    lbl = {**SERIES, **rule["labels"]}
    cases = [{"eval_time": t, "alertname": ALERT,
              "exp_alerts": [{"exp_labels": lbl, "exp_annotations": _annotations(rule, lbl, v)}]
              if f else []} for t, f, v in alerts]  # fmt: skip
    order = sorted((g["name"] for g in rule_groups()), key=lambda name: "alerts" in name)
    doc = {"rule_files": [], "evaluation_interval": f"{STEP}m", "group_eval_order": order,
           "tests": [{"interval": f"{STEP}m", "input_series": inputs,
                      "promql_expr_test": exprs, "alert_rule_test": cases}]}  # fmt: skip
    path = tmp_path / "recall-cross-check.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=10**9))
    test, _ = alert_unit_test(path, ALERT, rule_groups(), tmp_path)
    r = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
