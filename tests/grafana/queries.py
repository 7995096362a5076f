"""Read ragmon's Grafana and Prometheus files the way the tests need them: every query."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
PROM_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
UNIT_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))
QUALITY_UNIT_TESTS = PROM_DIR / "tests" / "ragmon-quality-alerts-test.yml"
GRAFANA_ALERTS = PROVISIONING / "alerting" / "ragmon-alerts.yml"

# Identifiers in PromQL that are functions, keywords or aggregations, not metric names.
_WORD = re.compile(r"(?<![\w:.\"'$])([a-zA-Z_:][a-zA-Z0-9_:]*)")


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it comes from (for test ids and messages)."""

    source: str
    expr: str

    def __str__(self) -> str:
        return self.source


def dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON, for every file in grafana/dashboards."""
    out = {}
    for path in sorted(DASHBOARD_DIR.glob("*.json")):
        d = json.loads(path.read_text())
        out[d["uid"]] = d
    return out


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def panel_queries() -> list[Query]:
    """Every target of every dashboard panel."""
    return [
        Query(f"{uid}#{p['id']} {p['title']} [{t['refId']}]", t["expr"])
        for uid, d in dashboards().items()
        for p in panels(d)
        for t in p.get("targets", [])
    ]


def variable_queries() -> list[Query]:
    """The label_values(...) queries of the dashboards' query variables."""
    out = []
    for uid, d in dashboards().items():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                out.append(Query(f"{uid} ${v['name']}", q))
    return out


def rule_groups() -> list[dict[str, Any]]:
    """Every Prometheus rule group in deploy/prometheus/rules."""
    return [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]


def prometheus_rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"]]


def recorded_names() -> set[str]:
    return {r["record"] for r in prometheus_rules() if "record" in r}


def alert_queries() -> list[Query]:
    """Prometheus alert and recording expressions, and the Grafana alerts' queries."""
    out = [
        Query(f"prometheus {r.get('alert') or r.get('record')}", r["expr"])
        for r in prometheus_rules()
    ]
    for g in yaml.safe_load(GRAFANA_ALERTS.read_text())["groups"]:
        for r in g["rules"]:
            for d in r["data"]:
                if d["datasourceUid"] != "__expr__":
                    out.append(Query(f"grafana {r['title']} [{d['refId']}]", d["model"]["expr"]))
    return out


def metric_names(expr: str) -> set[str]:
    """Metric (or recorded) names in a PromQL expression: identifiers outside label matchers
    and `by`/`on` lists that are not functions or keywords."""
    text = re.sub(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", r"\1", expr, flags=re.S)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r'"[^"]*"', " ", text)  # string arguments
    names = set()
    for m in _WORD.finditer(text):
        word = m.group(1)
        after = text[m.end() :].lstrip()
        if after.startswith("("):  # a function or aggregation call
            continue
        if word in _KEYWORDS:
            continue
        names.add(word)
    return names


def label_names(expr: str) -> set[str]:
    """Label names used in matchers and in by/on/without/ignoring lists."""
    names = set(re.findall(r"label_values\(.*,\s*(\w+)\s*\)\s*$", expr, flags=re.S))
    for body in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", body))
    for body in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in body.split(",") if n.strip()}
    return names


_KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan", "Inf", "NaN"}  # fmt: skip


def promql_test(
    promtool: str, path: Path, inputs: list[dict[str, Any]], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess:
    """promtool's `promql_expr_test` items `tests` over `inputs` sampled every minute, with the
    shipped rule files evaluated every minute, recording rules first; written to `path`."""
    order = [g["name"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]]
    order.sort(key=lambda name: "alerts" in name)  # recording rules first
    group = {"interval": "1m", "input_series": inputs, "promql_expr_test": tests}
    doc = {"rule_files": [str(p) for p in RULE_FILES], "evaluation_interval": "1m",
           "group_eval_order": order, "tests": [group]}  # fmt: skip
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=10**9))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)


def alerts_checked_in(path: Path) -> list[str]:
    """The alerts a promtool unit test file checks, in order of first appearance."""
    doc = yaml.safe_load(path.read_text())
    names = [c["alertname"] for g in doc["tests"] for c in g["alert_rule_test"]]
    return list(dict.fromkeys(names))


def alert_unit_test(
    path: Path, alert: str, groups: list[dict[str, Any]], out_dir: Path
) -> tuple[Path, dict[str, Any]]:
    """The unit test file `path` cut down to `alert`: its cases only, over a rule file holding
    the alert and the recording rules it reads (transitively), group by group as in `groups`.
    promtool evaluates every rule at every step of every test group: one alert at a time costs
    its own expression, not the whole file's. Returns the test file's path and its document
    (for callers that change it and write it again)."""
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    needed: set[str] = set()
    todo = metric_names(rule["expr"])
    while todo:
        name = todo.pop()
        if name in records and name not in needed:
            needed.add(name)
            todo |= metric_names(records[name])
    kept = []
    for g in groups:
        rules = [r for r in g["rules"] if r.get("alert") == alert or r.get("record") in needed]
        if rules:
            kept.append({**g, "rules": rules})
    rule_path = out_dir / f"rules-{alert}.yml"
    rule_path.write_text(yaml.safe_dump({"groups": kept}, sort_keys=False, allow_unicode=True))
    doc = yaml.safe_load(path.read_text())
    doc["rule_files"] = [str(rule_path)]
    names = {g["name"] for g in kept}
    if "group_eval_order" in doc:
        doc["group_eval_order"] = [n for n in doc["group_eval_order"] if n in names]
    tests = []
    for group in doc["tests"]:
        cases = [c for c in group["alert_rule_test"] if c["alertname"] == alert]
        if cases:
            tests.append({**group, "alert_rule_test": cases})
    doc["tests"] = tests
    test_path = out_dir / f"test-{alert}.yml"
    test_path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return test_path, doc
