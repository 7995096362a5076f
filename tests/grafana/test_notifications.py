"""Alert delivery without Alertmanager: the compose stack's Grafana provisions contact points and
a notification policy from ALERT_* variables (grafana/contact-points.sh, its entrypoint), and
every alerting file it is given passes the checks Grafana makes at start-up."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.grafana.provisioning import check_files, env_references, interpolate
from tests.grafana.queries import PROVISIONING, ROOT

pytestmark = pytest.mark.process  # runs grafana/contact-points.sh

SCRIPT = ROOT / "grafana" / "contact-points.sh"
SLACK = "https://hooks.slack.com/services/T000/B000/s3cretSlack"
PAGERDUTY = "s3cretPagerDutyRoutingKey0123456"
WEBHOOK = "https://alerts.example.com/ragmon?token=s3cretHook"
CHANNELS = {
    "ALERT_SLACK_WEBHOOK_URL": SLACK,
    "ALERT_PAGERDUTY_ROUTING_KEY": PAGERDUTY,
    "ALERT_WEBHOOK_URL": WEBHOOK,
}


def run_entrypoint(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """The real script under sh, as Grafana's entrypoint, with the compose stack's layout:
    the repository's provisioning files where the compose file mounts them."""
    prov = tmp_path / "provisioning"
    shutil.copytree(PROVISIONING, prov)
    marker = tmp_path / "grafana-started"
    run = subprocess.run(
        ["sh", str(SCRIPT), sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ok')"],
        env={
            "PATH": "/usr/bin:/bin",
            "GF_PATHS_PROVISIONING": str(prov),
            "RAGMON_DASHBOARDS_SRC": str(ROOT / "grafana" / "dashboards"),
            "RAGMON_DASHBOARDS_DIR": str(tmp_path / "dashboards"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    assert marker.read_text() == "ok", "the entrypoint must start Grafana afterwards"
    return run, prov / "alerting"


def alerting_docs(alerting: Path) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(alerting.glob("*.yml"))}


def test_without_channels_no_contact_point_is_provisioned(tmp_path):
    run, alerting = run_entrypoint(tmp_path, {})
    assert [p.name for p in alerting.iterdir()] == ["ragmon-alerts.yml"]
    assert "alerts show in Grafana only" in run.stderr
    assert check_files(alerting_docs(alerting), env={}) == []


@pytest.mark.parametrize(
    "channels",
    [
        ["ALERT_SLACK_WEBHOOK_URL"],
        ["ALERT_PAGERDUTY_ROUTING_KEY"],
        ["ALERT_WEBHOOK_URL"],
        ["ALERT_SLACK_WEBHOOK_URL", "ALERT_PAGERDUTY_ROUTING_KEY", "ALERT_WEBHOOK_URL"],
    ],
)
def test_each_channel_set_becomes_a_valid_contact_point(tmp_path, channels):
    env = {name: CHANNELS[name] for name in channels}
    run, alerting = run_entrypoint(
        tmp_path, {**env, "ALERT_WEBHOOK_URL": env.get("ALERT_WEBHOOK_URL", "")}
    )
    text = (alerting / "ragmon-notifications.yml").read_text()
    for secret in CHANNELS.values():
        assert secret not in text, "the file holds $VAR references, never the values"
    docs = alerting_docs(alerting)
    assert check_files(docs, env=env) == []
    (cp,) = docs["ragmon-notifications.yml"]["contactPoints"]
    kinds = {r["type"] for r in cp["receivers"]}
    assert kinds == {
        {"ALERT_SLACK_WEBHOOK_URL": "slack", "ALERT_PAGERDUTY_ROUTING_KEY": "pagerduty",
         "ALERT_WEBHOOK_URL": "webhook"}[name]
        for name in channels
    }  # fmt: skip
    settings = {r["type"]: r["settings"] for r in cp["receivers"]}
    values = {k: interpolate(str(v), env) for s in settings.values() for k, v in s.items()}
    assert {values.get("url"), values.get("integrationKey")} - {None} <= set(env.values())
    refs = set().union(*(env_references(str(v)) for s in settings.values() for v in s.values()))
    assert refs <= set(CHANNELS), f"only ALERT_* variables are substituted: {refs}"
    (policy,) = docs["ragmon-notifications.yml"]["policies"]
    assert policy["receiver"] == cp["name"] and "alertname" in policy["group_by"]
    if "pagerduty" in settings:  # PagerDuty gets the alert's own severity (warning/critical)
        assert ".CommonLabels.severity" in settings["pagerduty"]["severity"]


def test_the_checks_catch_what_grafana_refuses(tmp_path):
    """Each check fails on the mistake it is there for (a channel whose variable is unset at
    Grafana's start, a dangling policy receiver, a `$` in a label, a duplicate uid)."""
    _, alerting = run_entrypoint(tmp_path, {"ALERT_SLACK_WEBHOOK_URL": SLACK})
    docs = alerting_docs(alerting)
    assert any("slack needs url" in e for e in check_files(docs, env={}))
    broken = yaml.safe_load(yaml.safe_dump(docs))
    broken["ragmon-notifications.yml"]["policies"][0]["receiver"] = "nobody"
    assert any(
        "not a provisioned contact point" in e
        for e in check_files(broken, env={"ALERT_SLACK_WEBHOOK_URL": SLACK})
    )
    rules = yaml.safe_load(yaml.safe_dump(docs))
    rule = rules["ragmon-alerts.yml"]["groups"][0]["rules"][0]
    rule["labels"]["team"] = "$team"
    assert any("would be interpolated" in e for e in check_files(rules, env={}))
    rules["ragmon-alerts.yml"]["groups"][1]["rules"][0]["uid"] = rule["uid"]
    assert any("duplicate rule uids" in e for e in check_files(rules, env={}))


def test_the_datasource_uid_is_set_in_one_place():
    """The data source, the dashboards' default and every alert query use one uid; another
    Grafana gets the alerting file for its own Prometheus in one command."""
    (ds,) = yaml.safe_load((PROVISIONING / "datasources" / "ragmon.yml").read_text())["datasources"]
    alerts = yaml.safe_load((PROVISIONING / "alerting" / "ragmon-alerts.yml").read_text())
    uids = {q["datasourceUid"] for g in alerts["groups"] for r in g["rules"] for q in r["data"]}
    assert uids == {ds["uid"], "__expr__"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_grafana.py"), "--datasource-uid", "my-prom"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    mine = yaml.safe_load(out)
    assert {q["datasourceUid"] for g in mine["groups"] for r in g["rules"] for q in r["data"]} == {
        "my-prom", "__expr__"
    }  # fmt: skip
    assert check_files({"ragmon-alerts.yml": mine}, env={}) == []


@pytest.mark.parametrize("url", [None, "https://ragmon.example.com/a&b|c/"])
def test_dashboards_are_provisioned_with_the_explorer_url(tmp_path, url):
    """The entrypoint copies the dashboards to where the provider reads them, with
    RAGMON_EXPLORER_URL as the `explorer` variable's default and nothing else changed."""
    run_entrypoint(tmp_path, {"RAGMON_EXPLORER_URL": url} if url else {})
    want = (url or "http://localhost:8000").rstrip("/")
    source = ROOT / "grafana" / "dashboards"
    for path in sorted(source.glob("*.json")):
        original = json.loads(path.read_text())
        copied = json.loads((tmp_path / "dashboards" / path.name).read_text())
        variables = {v["name"]: v for v in copied["templating"]["list"]}
        if "explorer" in variables:
            assert variables["explorer"]["query"] == want
            assert variables["explorer"]["current"]["value"] == want
            for v in (original, copied):
                v["templating"]["list"] = [
                    x for x in v["templating"]["list"] if x["name"] != "explorer"
                ]
        assert copied == original


def test_alerts_link_to_the_explorer_and_grafana_given(tmp_path):
    """The entrypoint writes the alert rules with RAGMON_EXPLORER_URL and GF_SERVER_ROOT_URL
    as the base of each alert's links (issue 36)."""
    alerts = ROOT / "grafana" / "provisioning" / "alerting" / "ragmon-alerts.yml"
    _, alerting = run_entrypoint(
        tmp_path,
        {
            "RAGMON_ALERTS_SRC": str(alerts),
            "RAGMON_EXPLORER_URL": "https://mon.example.com/",
            "GF_SERVER_ROOT_URL": "https://grafana.example.com",
        },
    )
    doc = yaml.safe_load((alerting / "ragmon-alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    source = yaml.safe_load(alerts.read_text())["groups"]
    assert len(rules) == sum(len(g["rules"]) for g in source)  # every alert of every group
    for r in rules:
        assert r["annotations"]["explorer_url"].startswith("https://mon.example.com/ui"), r["title"]
        assert r["annotations"]["dashboard_url"].startswith("https://grafana.example.com/d/")
