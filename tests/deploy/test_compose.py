"""deploy/docker-compose.yml against the compose spec, the real CLI, the settings and the repo."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from typing import Any

import pytest

from ragmon.settings import Settings, env_variables
from tests.deploy.conftest import (
    COMPOSE_FILE,
    DEPLOY,
    ROOT,
    interpolate,
    load_yaml,
    parse_ragmon,
)

IMAGE_SERVICES = ("api", "worker", "scheduler", "traffic")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def ragmon_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services that run ragmon's own image (built from deploy/Dockerfile)."""
    return {
        name: svc
        for name, svc in services.items()
        if svc.get("build", {}).get("dockerfile") == "deploy/Dockerfile"
    }


def service_env(svc: dict[str, Any], environ: dict[str, str] | None = None) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v), environ or {}) for k, v in env.items()}


def test_compose_file_is_valid_against_the_compose_spec(compose):
    jsonschema = pytest.importorskip("jsonschema")
    try:
        schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / (
            "compose-spec.json"
        )
        schema = json.loads(schema_file.read_text())
    except ModuleNotFoundError:
        pytest.skip("check-jsonschema (which ships the compose-spec schema) is not installed")
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_every_ragmon_service_is_the_one_image(services):
    mine = ragmon_services(services)
    assert set(IMAGE_SERVICES) <= set(mine), f"services built from deploy/Dockerfile: {set(mine)}"
    for name, svc in mine.items():
        assert svc["build"]["context"] == "..", f"{name}: build context must be the repo root"
        assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
    assert len({svc["image"] for svc in mine.values()}) == 1, "one image for every process"


def test_every_command_is_accepted_by_the_real_cli(services):
    for name, svc in ragmon_services(services).items():
        assert isinstance(svc["command"], list), f"{name}: use exec form (a list) for command"
        parse_ragmon(svc["command"], f"compose service {name}")


def test_process_layout_api_two_workers_one_scheduler_traffic(services):
    cmds = {
        name: parse_ragmon(svc["command"], name) for name, svc in ragmon_services(services).items()
    }
    assert cmds["api"].command == "serve"
    workers = {n: a for n, a in cmds.items() if a.command == "worker"}
    schedulers = [n for n, a in workers.items() if a.with_scheduler]
    assert schedulers == ["scheduler"], "exactly one worker runs the scheduler (weekly report)"
    plain = [n for n, a in workers.items() if not a.with_scheduler]
    replicas = sum(services[n].get("deploy", {}).get("replicas", 1) for n in plain)
    assert replicas >= 2, f"two plain workers besides the scheduler, got {replicas}"
    assert services["scheduler"].get("deploy", {}).get("replicas", 1) == 1
    assert cmds["traffic"].command == "demo"
    assert cmds["traffic"].send_to == f"http://api:{cmds['api'].port}"
    assert services["traffic"]["profiles"] == ["traffic"], "the traffic generator is optional"


def test_environment_names_are_real_settings_and_defaults_parse(services):
    known = set(env_variables())
    for name, svc in ragmon_services(services).items():
        env = service_env(svc)
        unknown = set(env) - known
        assert not unknown, f"{name}: environment names ragmon does not read: {sorted(unknown)}"
        # The values compose passes with an empty .env must be valid settings.
        settings = Settings.from_env(env, dotenv=None)
        assert settings.redis_url == "redis://redis:6379/0", name
        assert settings.queue_name == "ragmon", name
    judge_default = service_env(services["worker"])["RAGMON_JUDGE"]
    assert judge_default == "lexical", "with no OPENAI_API_KEY the stack still grades (lexical)"
    configured = service_env(services["worker"], {"RAGMON_JUDGE": "openai", "OPENAI_API_KEY": "k"})
    assert Settings.from_env(configured, dotenv=None).judge == "openai"


def test_redis_url_points_at_the_redis_service_and_redis_persists(services):
    redis = services["redis"]
    assert "--appendonly yes" in redis["command"], "Redis must use AOF persistence"
    assert "noeviction" in redis["command"], "Redis holds the queue: eviction would drop work"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in redis["volumes"]}
    assert mounts.get("/data") == "redis-data", "Redis's /data must be on a named volume"
    for name, svc in ragmon_services(services).items():
        assert "redis" in svc["depends_on"] or "api" in svc["depends_on"], name


def test_ports_match_the_commands_and_stay_on_loopback(services):
    api = parse_ragmon(services["api"]["command"], "api")
    assert api.host == "0.0.0.0", "inside the container the API must listen on all interfaces"
    published = {}
    for svc in services.values():
        for port in svc.get("ports", []):
            host_ip, host_port, container_port = str(port).split(":")
            assert host_ip == "127.0.0.1", f"{port}: publish on loopback only"
            published[host_port] = container_port
    assert published["8000"] == str(api.port)
    assert published.keys() >= {"8000", "9090", "3000"}
    if api.allow_insecure_public:
        # Tolerable only because nothing outside this host can reach the published port.
        assert all(str(p).startswith("127.0.0.1:") for p in services["api"]["ports"])


def test_bind_mounts_exist_in_the_repo(compose, services):
    named = set(compose.get("volumes", {}))
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                path = (DEPLOY / source).resolve()
                if not path.exists():
                    pytest.fail(f"{name}: bind mount source {source} ({path}) is not in the repo")
                assert ROOT in path.parents, f"{name}: {source} is outside the repository"
            else:
                assert source in named, f"{name}: volume {source} is not declared"


def test_prometheus_scrapes_the_api_service_and_loads_the_mounted_rules(services):
    prom_config = DEPLOY / "prometheus" / "prometheus.yml"
    if not prom_config.is_file():
        pytest.skip("deploy/prometheus/prometheus.yml not written yet")
    config = load_yaml(prom_config)
    api = parse_ragmon(services["api"]["command"], "api")
    targets = [
        t
        for job in config["scrape_configs"]
        for sc in job.get("static_configs", [])
        for t in sc["targets"]
    ]
    assert f"api:{api.port}" in targets
    mounts = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"])
    assert mounts["./prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    rules_target = mounts["./prometheus/rules"]
    for pattern in config.get("rule_files", []):
        absolute = pattern if pattern.startswith("/") else f"/etc/prometheus/{pattern}"
        assert absolute.startswith(rules_target + "/"), f"rule_files {pattern} is not mounted"


def test_grafana_provisioning_matches_the_mounts(services):
    grafana = services["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    # every provisioning file of the repository, at the same place under Grafana's directory
    # but the alert rules, which the entrypoint copies there with RAGMON_EXPLORER_URL in their
    # links (from RAGMON_ALERTS_SRC)
    entry = (ROOT / "grafana/contact-points.sh").read_text()
    alerts_src = re.search(r'RAGMON_ALERTS_SRC:-([^}"]+)', entry).group(1)
    for path in sorted((ROOT / "grafana/provisioning").rglob("*.y*ml")):
        rel = path.relative_to(ROOT / "grafana/provisioning").as_posix()
        target = f"/etc/grafana/provisioning/{rel}"
        if rel == "alerting/ragmon-alerts.yml":
            target = alerts_src
        assert mounts.get(f"../grafana/provisioning/{rel}") == target
    datasources = sorted((ROOT / "grafana/provisioning/datasources").glob("*.y*ml"))
    providers = sorted((ROOT / "grafana/provisioning/dashboards").glob("*.y*ml"))
    urls = [ds.get("url") for f in datasources for ds in load_yaml(f).get("datasources", [])]
    assert "http://prometheus:9090" in urls, f"datasource urls {urls}"
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]
    paths = [
        p["options"]["path"]
        for f in providers
        for p in load_yaml(f).get("providers", [])
        if "path" in p.get("options", {})
    ]
    # grafana/dashboards is mounted where the entrypoint copies it from (putting
    # RAGMON_EXPLORER_URL in), and the provider reads where it copies them to
    entrypoint = (ROOT / "grafana/contact-points.sh").read_text()
    src = re.search(r'RAGMON_DASHBOARDS_SRC:-([^}"]+)', entrypoint).group(1)
    dst = re.search(r'RAGMON_DASHBOARDS_DIR:-([^}"]+)', entrypoint).group(1)
    assert mounts["../grafana/dashboards"] == src
    assert paths, "no file dashboard provider"
    for path in paths:
        assert path.rstrip("/") == dst.rstrip("/"), (
            f"dashboard provider reads {path} but the entrypoint copies the dashboards to {dst}"
        )
    assert "RAGMON_EXPLORER_URL" in grafana["environment"]


def test_grafana_entrypoint_provisions_notifications_then_runs_grafana(services):
    grafana = services["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    sh, script, *command = grafana["entrypoint"]
    assert sh == "/bin/sh" and command == ["/run.sh"], "the image's own entrypoint runs last"
    assert mounts["../grafana/contact-points.sh"] == script
    assert "/etc/grafana/provisioning" not in mounts.values(), (
        "the alerting directory must stay writable for the notifications file"
    )
    env = service_env(grafana)
    for name in ("ALERT_SLACK_WEBHOOK_URL", "ALERT_PAGERDUTY_ROUTING_KEY", "ALERT_WEBHOOK_URL"):
        assert name in env and env[name] == "", f"{name} defaults to off"
        assert name in (ROOT / "grafana/contact-points.sh").read_text()


def test_only_the_api_keeps_the_image_healthcheck(services):
    for name, svc in ragmon_services(services).items():
        disabled = svc.get("healthcheck", {}).get("disable", False)
        assert disabled == (name != "api"), f"{name}: the /healthz check belongs to the API only"


def _compose_cli() -> list[str] | None:
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        out = subprocess.run([*cmd, "version"], capture_output=True, text=True)
        if out.returncode == 0 and ("v2." in out.stdout or " 2." in out.stdout):
            return cmd
    return None


@pytest.mark.process
def test_docker_compose_config_accepts_the_file():
    cmd = _compose_cli()
    if cmd is None:
        pytest.skip("no Docker Compose v2 (`docker compose version` fails here)")
    for profile in ([], ["--profile", "traffic"]):
        out = subprocess.run(
            [*cmd, "-f", str(COMPOSE_FILE), *profile, "config", "--quiet"],
            capture_output=True,
            text=True,
            cwd=DEPLOY,
        )
        assert out.returncode == 0, out.stderr


@pytest.mark.process
def test_promtool_accepts_the_config_as_mounted(services, tmp_path):
    """`promtool check config` on prometheus.yml laid out as the compose volumes lay it out."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    if not (DEPLOY / "prometheus" / "prometheus.yml").is_file():
        pytest.skip("deploy/prometheus/prometheus.yml not written yet")
    etc = tmp_path / "etc" / "prometheus"
    for volume in services["prometheus"]["volumes"]:
        source, target = volume.split(":")[:2]
        if not source.startswith("."):
            continue
        dest = tmp_path / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = DEPLOY / source
        if src.is_dir():
            shutil.copytree(src, dest)
        else:
            shutil.copy2(src, dest)
    out = subprocess.run(
        [promtool, "check", "config", str(etc / "prometheus.yml")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "rules found" in out.stdout


def test_the_weekly_report_knows_where_the_explorer_is(services):
    """The scheduler writes the weekly report: its event ids link to the explorer (issue 36)."""
    for name in ("scheduler", "worker", "api"):
        env = services[name]["environment"]
        assert env["RAGMON_EXPLORER_URL"] == "${RAGMON_EXPLORER_URL:-http://localhost:8000}"
