"""ragmon as real processes: `ragmon serve` + N `ragmon worker`, on a test Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx

from monitor.demo.run import spawn_worker
from tests.support.redis_server import free_port


class Stack:
    """API and workers as child processes; `env` adds settings (REDIS_URL is set for you)."""

    def __init__(self, redis_url: str, workers: int = 2, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "RAGMON_JUDGE": "lexical",
            "RAGMON_METRICS_REFRESH_S": "0",  # tests read /metrics right after a change
            **(env or {}),
        }
        self.n_workers = workers
        self.api: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stack:
        self.api = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "serve", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(self.n_workers):
            self.add_worker()
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.api.poll() is not None:
                raise RuntimeError("ragmon serve did not become ready")
            time.sleep(0.05)
        return self

    def add_worker(self, extra: Sequence[str] = ()) -> subprocess.Popen:
        name = f"test-{os.getpid()}-{len(self.workers)}-{time.monotonic_ns()}"
        proc = spawn_worker(self.env, name, ["--maintenance-interval", "5", *extra])
        self.workers.append(proc)
        return proc

    def post(self, events: list[dict], single: bool = False) -> list[dict]:
        """POST events through the batch endpoint (or one request each, as the HTTP hook of
        steady traffic sends them); returns the per-event answers."""
        out = []
        if single:
            for event in events:
                r = self.client.post("/v1/retrievals", json=event)
                r.raise_for_status()
                out.append(r.json())
            return out
        for i in range(0, len(events), 500):
            r = self.client.post("/v1/retrievals/batch", json={"events": events[i : i + 500]})
            r.raise_for_status()
            out += r.json()["results"]
        return out

    def wait_done(self, ids: Sequence[str], timeout: float = 60, app: str = "test") -> list[dict]:
        """Poll until every event of `app` is done or failed; returns the results."""
        deadline = time.monotonic() + timeout
        pending = list(ids)
        results: dict[str, dict] = {}
        while pending:
            for eid in list(pending):
                r = self.client.get(f"/v1/retrievals/{eid}", params={"app": app}).json()
                if r["status"] in ("done", "failed"):
                    results[eid] = r
                    pending.remove(eid)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(pending)} events not done, e.g. {pending[:3]}")
                time.sleep(0.2)
        return [results[eid] for eid in ids]

    def metrics(self) -> str:
        return self.client.get("/metrics").text

    def stop(self) -> None:
        for proc in [*self.workers, self.api]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.workers, self.api]:
            if proc is None:
                continue
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.client.close()


def sample_value(metrics_text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    found = False
    for line in metrics_text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, rest = head.partition("{")
        if metric != name:
            continue
        pairs = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p)
        pairs = {k: v.strip('"') for k, v in pairs.items()}
        if all(pairs.get(k) == v for k, v in (labels or {}).items()):
            total += float(value)
            found = True
    if not found:
        raise KeyError(f"no sample {name} {labels or ''} in /metrics")
    return total
