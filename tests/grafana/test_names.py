"""Every metric and label name the dashboards and rules use exists in ragmon's catalog."""

from __future__ import annotations

import re

import pytest

from ragmon.core import catalog
from tests.grafana.queries import (
    DASHBOARD_DIR,
    PROM_DIR,
    PROVISIONING,
    RULE_FILES,
    alert_queries,
    label_names,
    metric_names,
    panel_queries,
    recorded_names,
    variable_queries,
)

ALL_QUERIES = panel_queries() + alert_queries() + variable_queries()
# labels the recording rules add (`label_replace(v, "window", ...)`: the empty-result alerts'
# windows side by side)
RECORDED_LABELS = {
    label
    for f in RULE_FILES
    for label in re.findall(r'label_replace\([^"]*?,\s*"(\w+)"', f.read_text())
}
KNOWN_LABELS = {label for m in catalog.ALL for label in m.labels} | {"le", "job", "instance"}
KNOWN_LABELS |= RECORDED_LABELS


# Prometheus external labels the alert rules read for their links (docs/grafana.md).
EXTERNAL_LABELS = {"ragmon_explorer_url", "ragmon_grafana_url"}


def known_names() -> set[str]:
    return catalog.exposed_names() | recorded_names() | {"up"}


def test_queries_were_found() -> None:
    # Guards the tests below against passing on nothing (a moved file, a broken parser).
    assert {"window"} == RECORDED_LABELS
    assert len(panel_queries()) >= 50
    assert len(alert_queries()) >= 20
    assert {q.source.split(" $")[1] for q in variable_queries()} >= {"app", "index", "retriever"}


@pytest.mark.parametrize("query", ALL_QUERIES, ids=str)
def test_metric_names_exist(query) -> None:
    names = metric_names(query.expr)
    constant = re.fullmatch(r"vector\([0-9.]+\)", query.expr.strip())
    assert names or constant, f"no metric name found in {query.expr!r}"
    unknown = names - known_names()
    assert not unknown, f"{query}: unknown metric names {sorted(unknown)}"


@pytest.mark.parametrize("query", ALL_QUERIES, ids=str)
def test_label_names_exist(query) -> None:
    unknown = label_names(query.expr) - KNOWN_LABELS
    assert not unknown, f"{query}: unknown label names {sorted(unknown)}"


def test_every_ragmon_token_in_the_files_is_known() -> None:
    """Also descriptions, annotations and the promtool unit tests' input series."""
    files = [
        *DASHBOARD_DIR.glob("*.json"),
        *PROVISIONING.rglob("*.yml"),
        *PROM_DIR.rglob("*.yml"),
    ]
    assert len(files) >= 7
    unknown = {}
    for path in files:
        tokens = set(re.findall(r"\bragmon[_:][a-zA-Z0-9_:]*[a-zA-Z0-9_]", path.read_text()))
        bad = tokens - known_names() - EXTERNAL_LABELS
        if bad:
            unknown[path.name] = sorted(bad)
    assert not unknown, f"names not in ragmon.core.catalog nor recorded: {unknown}"


def test_recorded_names_do_not_shadow_exported_ones() -> None:
    assert recorded_names()
    assert all(":" in n for n in recorded_names()), "recording rules are named level:metric:op"
    assert not recorded_names() & catalog.exposed_names()


def test_a_typo_would_be_caught() -> None:
    """The name extraction sees a misspelt metric (so the checks above can fail)."""
    expr = 'sum(rate(ragmon_retrieval_ndcg_summ{app=~"$app"}[5m])) / on() up'
    assert metric_names(expr) - known_names() == {"ragmon_retrieval_ndcg_summ"}
    assert label_names('sum by (retreiver) (x{ap="a"})') == {"retreiver", "ap"}


def test_no_rate_over_the_sum_of_a_signed_measure() -> None:
    """T can be negative: its _sum decreases, which rate()/increase() read as counter resets
    (its sum of squares cannot decrease: a counter)."""
    for query in ALL_QUERIES:
        assert not re.search(r"(rate|increase)\(ragmon_retrieval_t_sum(?!_squares)", query.expr)
    assert any("delta(ragmon_retrieval_t_sum" in q.expr for q in alert_queries())
