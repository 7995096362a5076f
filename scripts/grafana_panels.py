"""Builders of Grafana dashboard JSON (panels, variables, layout) for ragmon's dashboards.

The dashboards themselves are in grafana_quality.py and grafana_operations.py; edit there,
then run `python scripts/regenerate.py`.
"""

from __future__ import annotations

from typing import Any

DATASOURCE_UID = "ragmon-prometheus"
DS = {"type": "prometheus", "uid": "${datasource}"}
# The `explorer` variable's default: ragmon's API as the demo serves it. The compose stack's
# Grafana entrypoint (grafana/contact-points.sh) puts RAGMON_EXPLORER_URL in its place.
EXPLORER_DEFAULT = "http://localhost:8000"
LABELS = ("app", "index", "retriever", "segment")


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


BAND = {  # the 95 % bounds of a gauge with `bound` drawn dashed around its estimate
    "matcher": {"id": "byRegexp", "options": ".*(low|high)$"},
    "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [4, 4]}},
                   {"id": "custom.lineWidth", "value": 1}],
}  # fmt: skip


def bounded(metric: str, sel: str, who: str) -> list[dict[str, Any]]:
    """A gauge with `bound`: its estimate and its 95 % interval's ends, per `who` (a legend)."""
    return [
        target(f'{metric}{{{sel}, bound="{b}"}}', who + ("" if b == "estimate" else f" {b}"))
        for b in ("estimate", "low", "high")
    ]


def stat(title: str, description: str, expr: str, **kw: Any) -> dict[str, Any]:
    """A single-number panel (last value of an instant query)."""
    kw.setdefault("w", 4)
    kw.setdefault("h", 4)
    t = target(expr, instant=True, range=False)
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    options |= {"colorMode": "value", "graphMode": "none", "textMode": "auto"}
    return panel("stat", title, description, [t], options=options, **kw)


def row(title: str, collapsed: bool = False) -> dict[str, Any]:
    """A row header spanning the dashboard; the panels after a `collapsed` row (up to the next
    row) are kept inside it, shown when it is opened."""
    return {"type": "row", "title": title, "collapsed": collapsed, "panels": [], "gridPos": {}}


def layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flow panels left to right on Grafana's 24-column grid; ids in order. A collapsed row
    takes the panels after it (laid out as if it were open, as Grafana keeps them), and the
    next row starts right below it."""
    top: list[dict[str, Any]] = []
    holder: dict[str, Any] | None = None  # the collapsed row taking panels
    x = y = line_h = 0
    for pid, p in enumerate(panels, start=1):
        p["id"] = pid
        if p["type"] == "row":
            y = holder["gridPos"]["y"] + 1 if holder else y + line_h
            p["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y, x, line_h = y + 1, 0, 0
            holder = p if p["collapsed"] else None
            top.append(p)
            continue
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            y, x, line_h = y + line_h, 0, 0
        p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        x, line_h = x + w, max(line_h, h)
        (holder["panels"] if holder else top).append(p)
    return top


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


def explorer_variable() -> dict[str, Any]:
    """Where the event explorer is (ragmon's API as the browser reaches it): the base of the
    panels' data links."""
    return {
        "name": "explorer",
        "label": "Explorer URL",
        "type": "textbox",
        "query": EXPLORER_DEFAULT,
        "current": {"selected": False, "text": EXPLORER_DEFAULT, "value": EXPLORER_DEFAULT},
        "options": [{"selected": True, "text": EXPLORER_DEFAULT, "value": EXPLORER_DEFAULT}],
        "hide": 0,
    }


def explorer_link(per_field: tuple[str, ...] = (), sort: str | None = None) -> dict[str, Any]:
    """A data link to the explorer's events for the panel's labels and time range.

    The label variables go as `${name:pipe}` (`a|b`, or `.*` for All: the explorer reads both);
    labels in `per_field` come from the clicked series instead (a per-retriever panel)."""
    params = [
        f"{k}=${{__field.labels.{k}}}" if k in per_field else f"{k}=${{{k}:pipe}}" for k in LABELS
    ]
    params += ["from=${__from}", "to=${__to}"]
    if sort:
        params.append(f"sort={sort}")
    return {
        "title": "Events in the ragmon explorer",
        "url": "${explorer}/ui/events?" + "&".join(params),
        "targetBlank": True,
    }
