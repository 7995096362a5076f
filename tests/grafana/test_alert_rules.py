"""Alert rules: promtool checks and unit tests, the guards matter, Grafana's copy is equivalent."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.grafana.queries import (
    GRAFANA_ALERTS,
    PROM_DIR,
    QUALITY_UNIT_TESTS,
    RULE_FILES,
    UNIT_TESTS,
    alert_unit_test,
    alerts_checked_in,
    prometheus_rules,
    rule_groups,
)
from tests.support.waiting import scaled

REQUIRED_ALERTS = {
    "RagmonQualityDropNDCG", "RagmonQualityDropT", "RagmonHarmHigh", "RagmonHitRateLow",
    "RagmonLabelingLagHigh", "RagmonQueueBacklogGrowing", "RagmonJudgeErrorsHigh",
    "RagmonJudgeBudgetExhausted", "RagmonAppJudgeBudgetExhausted", "RagmonIngestRejectionsHigh",
    "RagmonDown",
    "RagmonJudgeDrift", "RagmonJudgeDriftWatchBlind", "RagmonEmptyResultsHigh",
    "RagmonEmptyResultsHighSlow",
    "RagmonSeriesStopped", "RagmonTopScoreShift", "RagmonMemoryForecastHigh", "RagmonRecallLoss",
}  # fmt: skip


def run(*args: str) -> subprocess.CompletedProcess:
    """promtool, with a deadline for an idle machine stretched by the load (`scaled`)."""
    return subprocess.run(args, capture_output=True, text=True, timeout=scaled(120))


# One promtool run per (unit test file, alert): each costs its own alert's expression.
ALERT_CASES = [
    pytest.param(path, alert, id=alert) for path in UNIT_TESTS for alert in alerts_checked_in(path)
]


def test_every_alert_is_present_and_documented() -> None:
    alerts = {r["alert"]: r for r in prometheus_rules() if "alert" in r}
    assert set(alerts) == REQUIRED_ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"], name
        assert "Look first at" in rule["annotations"]["description"], name


def test_rules_and_config_pass_promtool_check(promtool: str) -> None:
    r = run(promtool, "check", "rules", *map(str, RULE_FILES))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(promtool, "check", "config", str(PROM_DIR / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rule files found" in r.stdout


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    fired, quiet = set(), set()
    for path in UNIT_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group["alert_rule_test"]:
                (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    assert fired == REQUIRED_ALERTS
    assert quiet == REQUIRED_ALERTS


def test_every_tested_alert_has_its_own_promtool_case() -> None:
    assert len(UNIT_TESTS) == 3
    assert {alert for _, alert in (p.values for p in ALERT_CASES)} == REQUIRED_ALERTS


@pytest.mark.slow
@pytest.mark.parametrize(("path", "alert"), ALERT_CASES)
def test_promtool_unit_tests_pass(promtool: str, tmp_path: Path, path: Path, alert: str) -> None:
    test, _ = alert_unit_test(path, alert, rule_groups(), tmp_path)
    r = run(promtool, "test", "rules", str(test))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gauge", "should_fire_for"),
    [
        ("ragmon_alert_min_events", 'retriever="dense"'),  # the too-few-events guard
        ('ragmon_alert_drop_margin{measure="ndcg"', 'retriever="rerank"'),  # the margin
        ("ragmon_alert_drop_z", 'retriever="noisy"'),  # the standard-error guard
    ],
)
def test_the_unit_tests_notice_a_weakened_guard(
    promtool: str, tmp_path: Path, gauge: str, should_fire_for: str
) -> None:
    """With a guard set to 0 (the tunables ragmon exports), the quiet series fire and the unit
    tests fail."""
    _, doc = alert_unit_test(QUALITY_UNIT_TESTS, "RagmonQualityDropNDCG", rule_groups(), tmp_path)
    (series,) = [s for s in doc["tests"][0]["input_series"] if s["series"].startswith(gauge)]
    series["values"] = re.sub(r"^[\d.]+", "0", series["values"])
    doc["evaluation_interval"] = "10m"  # the samples' interval: half the steps, same firing
    copy = tmp_path / "weakened.yml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    r = run(promtool, "test", "rules", str(copy))
    assert r.returncode != 0
    assert should_fire_for in r.stdout + r.stderr


def _grafana_as_prometheus_rules(tmp_path: Path) -> Path:
    """Grafana's provisioned alerts turned back into a Prometheus rule file."""
    doc = yaml.safe_load(GRAFANA_ALERTS.read_text())
    groups = []
    for g in doc["groups"]:
        rules = []
        for r in g["rules"]:
            (query,) = [d for d in r["data"] if d["refId"] == "A"]
            (cond,) = [d for d in r["data"] if d["refId"] == r["condition"]]
            assert cond["model"] == {**cond["model"], "type": "math", "expression": "abs($A) >= 0"}
            assert query["model"]["instant"] is True
            annotations = {
                k: re.sub(r"\$values\.A\.Value", "$value", v)
                for k, v in r["annotations"].items()
                if not k.startswith("__")  # Grafana's own panel link (checked elsewhere)
            }
            rules.append(
                {"alert": r["title"], "expr": query["model"]["expr"], "for": r["for"],
                 **({"keep_firing_for": r["keepFiringFor"]} if "keepFiringFor" in r else {}),
                 "labels": r["labels"], "annotations": annotations}
            )  # fmt: skip
        groups.append({"name": g["name"], "interval": g["interval"], "rules": rules})
    path = tmp_path / "grafana-rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, allow_unicode=True))
    return path


def test_grafana_alerts_mirror_the_prometheus_alerts() -> None:
    doc = yaml.safe_load(GRAFANA_ALERTS.read_text())
    grafana = {r["title"]: r for g in doc["groups"] for r in g["rules"]}
    prom = {r["alert"]: r for r in prometheus_rules() if "alert" in r}
    assert set(grafana) == set(prom)
    uids = [r["uid"] for r in grafana.values()]
    assert len(set(uids)) == len(uids) and all(len(u) <= 40 for u in uids)
    for name, r in grafana.items():
        assert r["for"] == prom[name]["for"] and r["labels"] == prom[name]["labels"]
        assert r.get("keepFiringFor") == prom[name].get("keep_firing_for")
        assert r["data"][0]["datasourceUid"] == "ragmon-prometheus"
        assert ":" not in re.sub(
            r"\[[^\]]*\]|\{[^}]*\}|\"[^\"]*\"", "", r["data"][0]["model"]["expr"]
        ), f"{name}: a recording rule was not inlined"


@pytest.mark.slow
@pytest.mark.parametrize(("path", "alert"), ALERT_CASES)
def test_grafana_alerts_pass_the_same_unit_tests(
    promtool: str, tmp_path: Path, path: Path, alert: str
) -> None:
    """The inlined expression, without any recording rule loaded, fires exactly as the original.
    The quality alerts' tests are evaluated every 30 minutes, not 5: each step of the inlined
    7-day windows (and their hourly subqueries) reads the whole week, and their alerts are
    checked hours after each change, where both intervals agree (`for: 15m` is two evaluations
    either way). A guard dropped from the copy, or set to 0, fails it at 30 minutes as at 10."""
    groups = yaml.safe_load(_grafana_as_prometheus_rules(tmp_path).read_text())["groups"]
    test, doc = alert_unit_test(path, alert, groups, tmp_path)
    if path == QUALITY_UNIT_TESTS:
        doc["evaluation_interval"] = "30m"
        test.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    r = run(promtool, "test", "rules", str(test))
    assert r.returncode == 0, r.stdout + r.stderr


# ---- links: every alert leads to its series in the explorer and to its dashboard panel --------

SERIES = {"app": "shop", "index": "kb:1", "retriever": "bm25", "segment": "faq"}  # `:` is encoded


def _render(template: str, labels: dict[str, str], bases: dict[str, str]) -> str:
    """The annotation as Prometheus renders it (the two template forms the links use)."""
    from urllib.parse import quote_plus

    def base(m: re.Match) -> str:
        return bases.get(m.group(1), m.group(2))

    text = re.sub(
        r"\{\{ with \$externalLabels\.(\w+) \}\}\{\{ \. \}\}\{\{ else \}\}(.*?)\{\{ end \}\}",
        base,
        template,
    )
    return re.sub(
        r"\{\{ \$labels\.(\w+) \| urlquery \}\}",
        lambda m: quote_plus(labels.get(m.group(1), "")),
        text,
    )


# The panel each alert's dashboard link opens: panel ids are given in build order, so a panel
# added above shifts them, and the rules' links must follow (python scripts/regenerate.py).
# An alert of each unit test file whose links the external-labels test renders.
LINK_CASES = {"RagmonHitRateLow", "RagmonJudgeErrorsHigh", "RagmonTopScoreShift"}

ALERT_PANELS = {
    "RagmonQualityDropNDCG": "nDCG@K by retriever",
    "RagmonQualityDropT": "T by retriever",
    "RagmonHarmHigh": "Harm@K by retriever",
    "RagmonHitRateLow": "Hit rate by retriever",
    "RagmonLabelingLagHigh": "Labelling lag percentiles",
    "RagmonQueueBacklogGrowing": "Queue depth",
    "RagmonJudgeErrorsHigh": "Judge requests by outcome",
    "RagmonJudgeBudgetExhausted": "Judge budget",
    "RagmonAppJudgeBudgetExhausted": "Judge spend today",
    "RagmonJudgeDrift": "Judge drift: the anchor set",
    "RagmonJudgeDriftWatchBlind": "Judge drift: the anchor set",
    "RagmonIngestRejectionsHigh": "Rejected by reason",
    "RagmonDown": "API scraped",
    "RagmonEmptyResultsHigh": "Empty results (share) by retriever",
    "RagmonEmptyResultsHighSlow": "Empty results (share) by retriever",
    "RagmonSeriesStopped": "Events received by retriever",
    "RagmonTopScoreShift": "Top score (mean) by retriever",
    "RagmonMemoryForecastHigh": "Redis memory and its forecast",
    "RagmonRecallLoss": "RA-nWG@K against the pooled ideal by retriever",
}


def test_every_alert_links_to_the_explorer_and_its_dashboard_panel() -> None:
    import json
    from urllib.parse import parse_qsl, urlsplit

    from ragmon.core.search import parse_search
    from tests.grafana.queries import DASHBOARD_DIR
    from tests.grafana.queries import panels as every_panel

    panels = {}
    for path in DASHBOARD_DIR.glob("*.json"):
        d = json.loads(path.read_text())
        panels[d["uid"]] = {p["id"]: p["title"] for p in every_panel(d)}
    for rule in (r for r in prometheus_rules() if "alert" in r):
        name, notes = rule["alert"], rule["annotations"]
        series = "$labels.retriever" in notes["explorer_url"]  # a series' alert
        explorer = urlsplit(_render(notes["explorer_url"], SERIES, {}))
        assert explorer.scheme == "http" and explorer.netloc == "localhost:8000", name
        assert explorer.path.startswith("/ui"), name
        params = dict(parse_qsl(explorer.query))
        if explorer.path == "/ui/events":
            search = parse_search(params)  # a search the explorer accepts
            if series:
                assert search.labels == SERIES, name  # the alert's own series
                assert search.sort == rule["labels"].get("measure", search.sort), name
            elif "$labels.app" in notes["explorer_url"]:
                assert search.labels == {"app": SERIES["app"]}, name  # the alert's own app
        dashboard = urlsplit(_render(notes["dashboard_url"], SERIES, {}))
        uid = dashboard.path.split("/")[2]
        query = dict(parse_qsl(dashboard.query))
        title = panels[uid][int(query["viewPanel"])]
        if series:
            assert query["var-retriever"] == "bm25" and query["var-index"] == "kb:1", name
        assert title == ALERT_PANELS.get(name, "a panel named in ALERT_PANELS"), (name, title)
    grafana = yaml.safe_load(GRAFANA_ALERTS.read_text())
    for r in (r for g in grafana["groups"] for r in g["rules"]):
        notes = r["annotations"]
        uid, panel = notes["__dashboardUid__"], int(notes["__panelId__"])
        assert panel in panels[uid], r["title"]
        assert notes["explorer_url"].startswith("http://localhost:8000/ui"), r["title"]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "alert"), [p for p in ALERT_CASES if p.values[1] in LINK_CASES])
def test_alert_links_use_the_external_labels(
    promtool: str, tmp_path: Path, path: Path, alert: str
) -> None:
    """With the external labels ragmon_explorer_url and ragmon_grafana_url set (Prometheus'
    `global.external_labels`), every link starts with them (an alert of each file: the links
    are built alike)."""
    _, doc = alert_unit_test(path, alert, rule_groups(), tmp_path)
    bases = {"ragmon_explorer_url": "https://mon.example.com",
             "ragmon_grafana_url": "https://grafana.example.com"}  # fmt: skip
    for group in doc["tests"]:
        group["external_labels"] = bases
        for case in group["alert_rule_test"]:
            for fired in case["exp_alerts"]:
                notes = fired["exp_annotations"]
                notes["explorer_url"] = notes["explorer_url"].replace(
                    "http://localhost:8000", bases["ragmon_explorer_url"]
                )
                notes["dashboard_url"] = notes["dashboard_url"].replace(
                    "http://localhost:3000", bases["ragmon_grafana_url"]
                )
    copy = tmp_path / "external.yml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    r = run(promtool, "test", "rules", str(copy))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_level_alerts_lines_are_the_measure_tables() -> None:
    """RagmonHitRateLow and RagmonHarmHigh compare with the lines the explorer's overview and
    the report use (`Measure.line`): one number each."""
    from ragmon.core.measure_table import BY_KEY

    alerts = {r["alert"]: r["expr"] for r in prometheus_rules() if "alert" in r}
    for alert, key, op in (("RagmonHitRateLow", "hit", "<"), ("RagmonHarmHigh", "harm", ">")):
        line = BY_KEY[key].line
        assert line is not None
        assert re.search(rf"ragmon:retrieval_{key}:mean1h {op} {line:g} ", alerts[alert]), alert
