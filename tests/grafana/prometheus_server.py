"""A real Prometheus (Debian's `prometheus` binary) on a free 127.0.0.1 port, for tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.grafana.queries import PROM_DIR, RULE_FILES
from tests.support.stack import free_port
from tests.support.waiting import scaled


class PrometheusServer:
    """Prometheus scraping `target` with ragmon's own config and rules, at a fast interval."""

    def __init__(self, target: str, interval: str = "1s") -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise FileNotFoundError("prometheus not found (Debian package `prometheus`)")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ragmon-prometheus-"))
        self.proc: subprocess.Popen | None = None
        config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
        # ragmon's rules, evaluated at the test's interval instead of every minute.
        config["rule_files"] = []
        for path in RULE_FILES:
            doc = yaml.safe_load(path.read_text())
            for group in doc["groups"]:
                group["interval"] = interval
            copy = self.dir / path.name
            copy.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
            config["rule_files"].append(str(copy))
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [target]}]
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        log = (self.dir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        start = time.monotonic()
        while True:
            try:
                if self.client.get("/-/ready").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() - start > scaled(30) or self.proc.poll() is not None:
                raise RuntimeError(f"prometheus did not start: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, n: int = 20) -> str:
        path = self.dir / "prometheus.log"
        return "\n".join(path.read_text().splitlines()[-n:]) if path.is_file() else ""

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        """GET /api/v1/<path>; returns the JSON body whatever its status (errors included)."""
        return self.client.get(f"/api/v1/{path}", params=params).json()

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.client.post("/api/v1/query", data=params).json()

    def query_range(self, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
        data = {"query": expr, "start": start, "end": end, "step": step}
        return self.client.post("/api/v1/query_range", data=data).json()

    def wait_for(self, expr: str, check: Any = bool, timeout: float = 60) -> list[dict]:
        """Poll an instant query until `check(result)` holds; returns the result. `timeout` is
        for an idle machine, stretched by the load."""
        start = time.monotonic()
        while True:
            body = self.query(expr)
            result = body.get("data", {}).get("result", [])
            if body.get("status") == "success" and check(result):
                return result
            if time.monotonic() - start > scaled(timeout):
                raise TimeoutError(f"{expr!r} never satisfied the check: last {body}")
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.client.close()
        shutil.rmtree(self.dir, ignore_errors=True)
