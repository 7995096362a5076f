"""The dashboards' JSON is well formed for Grafana and matches the provisioning."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from ragmon.core.search import parse_search
from tests.grafana.queries import PROVISIONING, dashboards, panels

DASHBOARDS = dashboards()


def provisioned_datasource_uid() -> str:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "ragmon.yml").read_text())
    (ds,) = doc["datasources"]
    assert ds["type"] == "prometheus"
    return ds["uid"]


def test_both_dashboards_exist() -> None:
    assert set(DASHBOARDS) == {"ragmon-quality", "ragmon-operations"}


def _no_overlap(ps: list[dict]) -> None:
    cells: set[tuple[int, int]] = set()
    for p in ps:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, f"{p['title']} overflows the grid"
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_panel_ids_unique_and_layout_fits(uid: str) -> None:
    """Ids are unique; the open dashboard's panels do not overlap, nor do the panels a
    collapsed row holds (laid out below it, as Grafana opens them)."""
    ps = list(panels(DASHBOARDS[uid]))
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {uid}"
    top = DASHBOARDS[uid]["panels"]
    _no_overlap(top)
    for r in top:
        if r["type"] == "row" and r["collapsed"]:
            below = [{**p, "gridPos": {**p["gridPos"], "y": p["gridPos"]["y"] - r["gridPos"]["y"]}}
                     for p in r["panels"]]  # fmt: skip
            _no_overlap([{**r, "gridPos": {**r["gridPos"], "y": 0}}, *below])
        else:
            assert not r.get("panels"), f"{r['title']}: only a collapsed row holds panels"


def test_the_quality_dashboard_opens_on_the_three_questions() -> None:
    """The first row, open, answers "is retrieval getting worse, where, since when" in at most
    12 panels; every other row is collapsed. Worse: each alerted measure's change against a
    week earlier. Where: each retriever's level (a retriever poor from day one) and its
    change. Since when: each alerted measure per retriever over time."""
    top = DASHBOARDS["ragmon-quality"]["panels"]
    assert top[0]["type"] == "row" and not top[0]["collapsed"]
    rest = [i for i, p in enumerate(top) if p["type"] == "row"][1:]
    first = top[1 : rest[0]]
    assert 0 < len(first) <= 12
    assert all(top[i]["collapsed"] for i in rest) and len(top) == len(first) + 1 + len(rest)
    exprs = {p["title"]: "\n".join(t["expr"] for t in p["targets"]) for p in first}
    changes = [e for e in exprs.values() if "offset 1w" in e]
    for key in ("ndcg", "hit", "t", "harm"):
        assert any(f"ragmon_retrieval_{key}_sum" in e and "by (retriever)" not in e
                   for e in changes), key  # fmt: skip
        assert f"ragmon_retrieval_{key}_sum" in exprs[f"{_title(key)} by retriever"]
        assert "$window" in exprs[f"{_title(key)} by retriever"]  # over time
    by_retriever = [e for e in changes if "by (retriever)" in e]
    assert by_retriever and "ragmon_retrieval_ndcg_sum" in by_retriever[0]
    level = exprs["Scorecard per retriever (selected range)"]
    assert "by (retriever)" in level and "offset" not in level and "$__range" in level


def _title(key: str) -> str:
    from ragmon.core.measure_table import BY_KEY

    return BY_KEY[key].dashboard_title


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_datasource_is_the_provisioned_one(uid: str) -> None:
    """Panels read `${datasource}`, whose default is the provisioned uid (any other on import)."""
    d = DASHBOARDS[uid]
    (var,) = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
    assert var["name"] == "datasource" and var["query"] == "prometheus"
    assert var["current"]["value"] == provisioned_datasource_uid()
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p.get("targets", []):
            assert t["datasource"] == p["datasource"], p["title"]


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_every_panel_explains_itself(uid: str) -> None:
    for p in panels(DASHBOARDS[uid]):
        if p["type"] == "row":
            continue
        desc = p.get("description", "")
        assert 20 <= len(desc) <= 300 and desc.endswith("."), f"{p['title']}: {desc!r}"
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
        assert p["type"] == "text" or refs, f"{p['title']} has no query"


def test_quality_variables_are_multi_select_label_values() -> None:
    variables = {v["name"]: v for v in DASHBOARDS["ragmon-quality"]["templating"]["list"]}
    for name in ("app", "index", "retriever", "segment"):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"], name
        assert v["allValue"] == ".*"
        assert v["query"]["query"].startswith("label_values(ragmon_retrieval_")
        assert v["query"]["query"].endswith(f", {name})")
    # Every quality query filters on all four variables with regex matchers.
    for p in panels(DASHBOARDS["ragmon-quality"]):
        for t in p.get("targets", []):
            for name in ("app", "index", "retriever", "segment"):
                assert f'{name}=~"${name}"' in t["expr"], (p["title"], name)


def test_quality_dashboard_has_the_required_views() -> None:
    ps = [p for p in panels(DASHBOARDS["ragmon-quality"]) if p["type"] != "row"]
    exprs = "\n".join(t["expr"] for p in ps for t in p.get("targets", []))
    titles = {p["title"] for p in ps}
    for key in ("ndcg", "f_e", "harm", "precision", "hit"):
        assert f"rate(ragmon_retrieval_{key}_sum" in exprs, key
        assert f"rate(ragmon_retrieval_{key}_count" in exprs, key
    # T's _sum goes down with negative T: rate() would see counter resets there.
    assert "rate(ragmon_retrieval_t_sum" not in exprs
    assert "delta(ragmon_retrieval_t_sum" in exprs and "delta(ragmon_retrieval_t_count" in exprs
    assert sum(p["type"] == "heatmap" for p in ps) >= 5
    for p in ps:
        if p["type"] == "heatmap":
            assert p["targets"][0]["format"] == "heatmap" and "by (le)" in p["targets"][0]["expr"]
    assert "histogram_quantile(0.1," in exprs and "histogram_quantile(0.5," in exprs
    assert "sum by (retriever)" in exprs
    assert "offset 1w" in exprs
    assert any("k_over_np" in t["expr"] for p in ps for t in p.get("targets", []))
    note = next(p for p in ps if p["type"] == "text")["options"]["content"]
    assert "below 1" in note and "T" in note and "nDCG" in note
    assert "Scorecard per retriever (selected range)" in titles


def test_operations_dashboard_has_the_required_views() -> None:
    exprs = "\n".join(
        t["expr"] for p in panels(DASHBOARDS["ragmon-operations"]) for t in p.get("targets", [])
    )
    for name in (
        "ragmon_events_received_total", "ragmon_events_labeled_total",
        "ragmon_events_failed_total", "ragmon_events_rejected_total",
        "ragmon_events_sampled_out_total", "ragmon_queue_depth", "ragmon_jobs_waiting_retry",
        "ragmon_labeling_lag_seconds_bucket", "ragmon_judge_requests_total",
        "ragmon_judge_tokens_total", "ragmon_judge_cost_usd_total",
        "ragmon_judge_cache_hits_total", "ragmon_judge_cache_misses_total", "ragmon_grades_total",
    ):  # fmt: skip
        assert name in exprs, name
    assert "by (model, outcome)" in exprs and "by (grade)" in exprs
    assert "[1h]" in exprs and "[1d]" in exprs  # per hour and per day


def test_provisioning_points_at_the_dashboards() -> None:
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "ragmon.yml").read_text())
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["folder"] == "ragmon"
    assert provider["options"]["path"].startswith("/var/lib/grafana/dashboards")


GRAFANA_BUILTINS = {"__from", "__to"}


def _interpolate(url: str, variables: dict[str, str], field: dict[str, str]) -> str:
    """What Grafana puts in a data link: `${var:pipe}` joins the selected values with `|`
    (All gives its allValue, `.*`), `${__field.labels.x}` the clicked series' label."""

    def value(m: re.Match) -> str:
        name, _, fmt = m.group(1).partition(":")
        if name.startswith("__field.labels."):
            return field[name.removeprefix("__field.labels.")]
        assert fmt in ("", "pipe"), m.group(0)
        return variables[name]

    return re.sub(r"\$\{([^}]+)\}", value, url)


def test_quality_panels_link_to_the_explorer_with_their_labels_and_time() -> None:
    dash = DASHBOARDS["ragmon-quality"]
    defined = {v["name"] for v in dash["templating"]["list"]}
    assert "explorer" in defined
    linked = 0
    for p in panels(dash):
        if p["type"] in ("row", "text"):
            continue
        (link,) = p["fieldConfig"]["defaults"]["links"]
        url = link["url"]
        assert url.startswith("${explorer}/ui/events?"), p["title"]
        names = {m.split(":")[0] for m in re.findall(r"\$\{([^}]+)\}", url)}
        field_labels = {
            n.removeprefix("__field.labels.") for n in names if n.startswith("__field.")
        }
        assert names - {f"__field.labels.{x}" for x in field_labels} <= defined | GRAFANA_BUILTINS
        per_retriever = any("{{retriever}}" in t.get("legendFormat", "") for t in p["targets"])
        assert field_labels == ({"retriever"} if per_retriever else set()), p["title"]
        # Grafana's substitution: app chosen, two indexes, All segments, the clicked retriever
        variables = {
            "explorer": "https://ragmon.example.com", "app": "shop", "index": "kb-1|kb-2",
            "retriever": ".*", "segment": ".*", "__from": "1795132800000", "__to": "1795219200000",
        }  # fmt: skip
        final = _interpolate(url, variables, {"retriever": "bm25"})
        parts = urlsplit(final)
        assert (parts.scheme, parts.netloc, parts.path) == (
            "https",
            "ragmon.example.com",
            "/ui/events",
        )
        search = parse_search(dict(parse_qsl(parts.query)))
        assert search.labels["app"] == "shop" and search.labels["index"] == "kb-1|kb-2"
        assert search.labels.get("retriever") == ("bm25" if per_retriever else None)
        assert "segment" not in search.labels  # All: any segment
        assert (search.since, search.until) == (1795132800.0, 1795219200.0)
        assert search.series_matches("shop|kb-2|bm25|faq")
        assert not search.series_matches("shop|kb-3|bm25|faq")
        linked += 1
    assert linked >= 30
