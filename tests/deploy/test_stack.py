"""The compose stack's process layout without containers, and metrics flowing end to end.

The same commands and environment as deploy/docker-compose.yml (api, the worker replicas, the
scheduler, the traffic profile), with only what containers change rewritten: a test Redis
instead of redis:6379, 127.0.0.1 and free ports instead of 0.0.0.0:8000, and a Prometheus
(the Debian `prometheus` binary) loading deploy/prometheus/prometheus.yml with its target
pointed at that API. The demo traffic goes in; Prometheus must see the labeled events.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ragmon.settings import env_variables
from tests.deploy.conftest import COMPOSE_FILE, PROMETHEUS_DIR, ROOT, interpolate, load_yaml
from tests.support.stack import Child, free_port, stop_all
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow


def compose_env(service: dict[str, Any], redis_url: str, tmp: Path) -> dict[str, str]:
    """The service's compose environment (defaults of an empty .env) with test-only rewrites."""
    env = {k: interpolate(str(v), {}) for k, v in service["environment"].items()}
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    env["REDIS_URL"] = redis_url
    env["RAGMON_REPORT_DIR"] = str(tmp / "reports")
    # The caller's own ragmon/OpenAI settings must not leak into the stack under test.
    base = {k: v for k, v in os.environ.items() if k not in set(env_variables())}
    return {**base, **env, "PYTHONPATH": str(ROOT)}


def local_argv(command: list[str], port: int | None = None) -> list[str]:
    """`ragmon ...` from compose, run by this interpreter, bound to loopback."""
    argv = [sys.executable, "-m", "ragmon.cli", *command[1:]]
    if "--host" in argv:
        argv[argv.index("--host") + 1] = "127.0.0.1"
    if port is not None and "--port" in argv:
        argv[argv.index("--port") + 1] = str(port)
    return argv


class Processes:
    """Child processes by name, each logging to a file of its own."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, Child] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs[name] = Child(argv, env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        stop_all(list(self.procs.values()), grace=15)


def wait_for(check, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + scaled(timeout)
    while True:
        try:
            value = check()
            if value:
                return value
        except (httpx.TransportError, KeyError, IndexError, ValueError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def prometheus_config(tmp: Path, api_port: int) -> Path:
    """deploy/prometheus as compose mounts it, with the api:8000 target on this host."""
    source = PROMETHEUS_DIR / "prometheus.yml"
    if not source.is_file():
        pytest.skip("deploy/prometheus/prometheus.yml not written yet")
    config_dir = tmp / "prometheus"
    shutil.copytree(PROMETHEUS_DIR / "rules", config_dir / "rules")
    text = source.read_text()
    assert "api:8000" in text
    text = text.replace("api:8000", f"127.0.0.1:{api_port}")
    text = text.replace("scrape_interval: 15s", "scrape_interval: 1s")
    (config_dir / "prometheus.yml").write_text(text)
    return config_dir / "prometheus.yml"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    yield procs
    procs.stop()


def test_compose_layout_runs_and_prometheus_sees_metrics(redis_url, tmp_path, processes):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (Debian package `prometheus`)")
    services = load_yaml(COMPOSE_FILE)["services"]
    api_port, prom_port = free_port(), free_port()

    # API, exactly as compose runs it.
    api = services["api"]
    processes.start(
        "api", local_argv(api["command"], api_port), compose_env(api, redis_url, tmp_path)
    )
    api_url = f"http://127.0.0.1:{api_port}"
    wait_for(lambda: httpx.get(f"{api_url}/readyz").status_code == 200, 30, "api /readyz")
    assert httpx.get(f"{api_url}/healthz").status_code == 200

    # Workers: the compose replica count, then the scheduler worker.
    worker = services["worker"]
    replicas = worker.get("deploy", {}).get("replicas", 1)
    for i in range(replicas):
        argv = [*local_argv(worker["command"]), "--name", f"worker-{i + 1}"]
        processes.start(f"worker-{i + 1}", argv, compose_env(worker, redis_url, tmp_path))
    expected_workers = {f"worker-{i + 1}" for i in range(replicas)}
    scheduler = services["scheduler"]
    if importlib.util.find_spec("ragmon.workers.schedule") is not None:
        argv = [*local_argv(scheduler["command"]), "--name", "scheduler"]
        processes.start("scheduler", argv, compose_env(scheduler, redis_url, tmp_path))
        expected_workers.add("scheduler")
    else:
        print("workers/schedule.py not written yet: the scheduler worker is not started")

    client = redis.Redis.from_url(redis_url)
    from rq import Worker

    def registered() -> set[str]:
        return {w.name for w in Worker.all(connection=client)}

    wait_for(lambda: registered() >= expected_workers, 30, f"RQ workers {expected_workers}")

    # Prometheus with ragmon's config and rules, scraping that API.
    config = prometheus_config(tmp_path, api_port)
    processes.start(
        "prometheus",
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
    )
    prom = f"http://127.0.0.1:{prom_port}"
    wait_for(lambda: httpx.get(f"{prom}/-/ready").status_code == 200, 30, "prometheus ready")

    def target_up() -> bool:
        targets = httpx.get(f"{prom}/api/v1/targets").json()["data"]["activeTargets"]
        return any(t["health"] == "up" for t in targets)

    wait_for(target_up, 30, "prometheus target up")
    groups = httpx.get(f"{prom}/api/v1/rules").json()["data"]["groups"]
    rule_groups = [
        g["name"]
        for f in sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
        for g in load_yaml(f)["groups"]
    ]
    assert sorted(g["name"] for g in groups) == sorted(rule_groups), "rules not all loaded"

    # The traffic profile, as compose runs it, against this API.
    traffic = services["traffic"]
    argv = local_argv(traffic["command"])
    argv[argv.index("--send-to") + 1] = api_url
    sent = subprocess.run(
        argv,
        env=compose_env(traffic, redis_url, tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sent.returncode == 0, sent.stdout[-2000:] + sent.stderr[-2000:]

    def query(expr: str) -> float:
        result = httpx.get(f"{prom}/api/v1/query", params={"query": expr}).json()["data"]
        return float(result["result"][0]["value"][1])

    received = wait_for(lambda: query("sum(ragmon_events_received_total)"), 60, "events received")
    assert received > 0

    def all_labeled() -> bool:
        labeled = query("sum(ragmon_events_labeled_total)")
        sampled_out = query("sum(ragmon_events_sampled_out_total) or vector(0)")
        return labeled > 0 and labeled + sampled_out >= received

    try:
        wait_for(all_labeled, 240, "every received event labeled, as seen by Prometheus")
    finally:
        for name in processes.procs:
            if not processes.alive(name):
                print(f"--- {name} exited:\n{processes.log(name)}")
    assert query("sum(ragmon_retrieval_ndcg_count)") > 0
    assert query("count(ragmon_retrieval_ndcg_bucket)") > 0
    for name in processes.procs:
        assert processes.alive(name), f"{name} died:\n{processes.log(name)}"
    client.close()
