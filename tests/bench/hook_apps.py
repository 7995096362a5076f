"""The processes of the SDK benchmarks: a RAG-like app, a stub sidecar, the real sidecar, load.

    python -m tests.bench.hook_apps rag --port P [--hook] --sidecar-url URL [--scan N] [--wait-ms W]
    python -m tests.bench.hook_apps sidecar --port P [--delay S]

The app (`GET /search?q=`) scores an in-memory corpus of 2 000 passages (or its first `--scan`)
by token overlap and returns the top 10, after awaiting `--wait-ms` (a vector store's answer,
0 by default); with `--hook` it records the top 20 (K = 10) through `RetrievalMonitor`.
`GET /stats` reports the hook's counters and its threads' CPU. The stub sidecar answers every
POST with 202 (after `--delay` seconds). Helpers start them as child
processes pinned to chosen CPUs and niceness, and drive them with an open-loop generator.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import heapq
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote_plus

REPO = Path(__file__).resolve().parents[2]
TREC = REPO.parent / "shared" / "data" / "trec-dl" / "trec-dl-top20.jsonl"
CORPUS_SIZE = 2000
TOKEN = re.compile(r"[a-z0-9]+")
API_KEY = "bench-key-0123456789abcdef"
# The sidecar (and its Redis) run at the lowest CPU priority, nice 19 and SCHED_IDLE: in
# production they have their own CPUs; on a 2-core box their parsing of each batch would
# otherwise delay the load generator beside them, and only in the hook's turns, which is no
# cost of the hook's. The app's process, hook threads included, keeps normal priority.
# Smoke runs pass lowest=False: beside CPU-bound work an idle-class process never runs at all.
LOWEST = {"nice": 19, "idle": True}


def load_corpus() -> tuple[list[tuple[str, str]], list[str]]:
    """(passage id, text) pairs and queries: TREC DL when present, else synthetic text."""
    passages: dict[str, str] = {}
    queries: list[str] = []
    if TREC.is_file():
        for line in TREC.read_text().splitlines():
            row = json.loads(line)
            queries.append(row["query"])
            for hit in row["hits"]:
                passages.setdefault(hit["docid"], hit["text"])
    rng = random.Random(7)
    words = [f"w{i}" for i in range(3000)]
    while len(passages) < CORPUS_SIZE:
        passages[f"s{len(passages)}"] = " ".join(rng.choices(words, k=50))
    while len(queries) < 200:
        queries.append(" ".join(rng.choices(words, k=5)))
    return list(passages.items())[:CORPUS_SIZE], queries


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def sdk_cpu_s() -> dict[str, float]:
    """CPU seconds used so far by each of the SDK's threads in this process (their CPU clocks)."""
    threads = [t for t in threading.enumerate() if t.name.startswith("ragmon-") and t.ident]
    return {t.name: time.clock_gettime(time.pthread_getcpuclockid(t.ident or 0)) for t in threads}


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process so far, all its threads (/proc schedstat: nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def gc_pauses() -> dict[str, list[float]]:
    """Per generation, the collections so far, their total pause and the longest pause since
    `/stats` last read it (seconds), kept up to date by a GC callback in this process."""
    out = {str(g): [0, 0.0, 0.0] for g in range(3)}
    started = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        pause = time.perf_counter() - started[0]
        row = out[str(info["generation"])]
        row[0] += 1
        row[1] += pause
        row[2] = max(row[2], pause)

    gc.callbacks.append(watch)
    return out


# ---- the apps (run in child processes) -------------------------------------------------------


class Shape(NamedTuple):
    """What the app does per request: score `scan` passages of the corpus (CPU), and await
    `wait_ms` as if a vector store answered (no CPU)."""

    scan: int = CORPUS_SIZE
    wait_ms: float = 0.0


FULL = Shape()  # the default: all 2 000 passages, no wait


def create_rag_app(hook: bool, sidecar_url: str, shape: Shape = FULL) -> Any:
    """`GET /search?q=`: token-overlap top 20 over the first `shape.scan` passages of the
    corpus, after `shape.wait_ms`; the hook records them (K=10)."""
    from fastapi import FastAPI

    from ragmon.client import RetrievalMonitor

    passages = load_corpus()[0][: shape.scan]
    wait_s = shape.wait_ms / 1e3
    corpus = [(pid, text, frozenset(TOKEN.findall(text.lower()))) for pid, text in passages]
    state: dict[str, Any] = {}
    pauses = gc_pauses()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        if hook:
            extra = json.loads(os.environ.get("RAGMON_BENCH_MONITOR", "{}"))  # for experiments
            from ragmon.client import encoder, events, recorder, sender

            if extra.pop("stdlib_json", False):  # as on PyPy, where orjson has no wheel
                events.orjson = None  # type: ignore[assignment]
            for name in [n for n in extra if n.isupper()]:  # module knobs, e.g. ENCODE_SLICE_S
                value = extra.pop(name)
                for module in (recorder, encoder, sender):
                    if hasattr(module, name):
                        setattr(module, name, value)
            state["monitor"] = RetrievalMonitor(
                sidecar_url, api_key=API_KEY, labels={"app": "bench"}, close_timeout=1.0, **extra
            )
        yield
        if hook:
            state["monitor"].close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/search")
    async def search(q: str) -> dict:
        if wait_s:
            await asyncio.sleep(wait_s)
        terms = frozenset(TOKEN.findall(q.lower()))
        top = heapq.nlargest(20, corpus, key=lambda p: len(terms & p[2]))
        hits = [(pid, text, float(len(terms & toks))) for pid, text, toks in top]
        if hook:
            state["monitor"].record(q, hits, 10)
        return {"ids": [h[0] for h in hits[:10]]}

    @app.get("/stats")
    async def stats() -> dict:
        out = state["monitor"].stats() if hook else {}
        out["gc"] = {g: list(row) for g, row in pauses.items()}
        for row in pauses.values():
            row[2] = 0.0  # the next read gives the longest pause since this one
        out["sdk_cpu_s"] = threads = sdk_cpu_s()
        out["sdk_cpu_s_total"] = sum(threads.values())
        relay = state["monitor"]._relay if hook else None
        out["relay_cpu_s"] = process_cpu_s(relay.pid) if relay is not None else 0.0
        return out

    return app


def create_stub_sidecar(delay: float) -> Any:
    """A raw ASGI app answering every POST with 202 (after `delay` seconds), at the least
    CPU a server can spend on a request."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        # The body is read and dropped, never parsed: the SDK reads only the status (and a
        # batch answer's "sampled_out", absent here), and parsing each 2 MB batch would be the
        # stub's cost, not the hook's, on the CPU it shares with the app.
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        if delay and scope["method"] == "POST":
            await asyncio.sleep(delay)
        payload = b'{"status":"ok"}'
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


# ---- child processes ---------------------------------------------------------------------------


@contextlib.contextmanager
def processes(
    runs: Sequence[tuple[list[str], int, str]], cpus: set[int] | None = None, **placing: Any
) -> Iterator[list[subprocess.Popen]]:
    """Child Python processes, each `(args, port, ready path)` serving HTTP on its port: all
    started before any is waited for (each imports its server: seconds under load), and
    stopped (SIGINT) when the block ends."""
    # imported here: the app and sidecar processes run this module without the harness's
    # httpx, redis and psutil
    from tests.support.stack import Child

    env = {**os.environ, "PYTHONHASHSEED": "0"}
    started: list[Child] = []
    try:
        for args, _, _ in runs:
            started.append(
                Child([sys.executable, *args], env, cpus=cpus, stdout=None, stderr=None, **placing)
            )
        for proc, (_, port, ready) in zip(started, runs, strict=True):
            proc.wait_http(f"http://127.0.0.1:{port}{ready}", ok=lambda status: status < 500)
        yield list(started)
    finally:
        for proc in started:
            proc.stop(signal.SIGINT)


@contextlib.contextmanager
def rag_apps(
    hooks: Sequence[bool], sidecar_url: str, cpus: set[int] | None = None, shape: Shape = FULL
) -> Iterator[list[App]]:
    """One app per entry of `hooks` (with the hook or not), started at once."""
    from tests.support.stack import free_port

    runs = []
    for hook in hooks:
        port = free_port()
        args = ["-m", "tests.bench.hook_apps", "rag", "--port", str(port)]
        args += ["--sidecar-url", sidecar_url, "--scan", str(shape.scan)]
        args += ["--wait-ms", str(shape.wait_ms), *(["--hook"] if hook else [])]
        runs.append((args, port, "/stats"))
    with processes(runs, cpus) as procs:
        yield [
            App(port, proc.pid, hook)
            for (_, port, _), proc, hook in zip(runs, procs, hooks, strict=True)
        ]


@contextlib.contextmanager
def stub_sidecar(
    delay: float = 0.0, cpus: set[int] | None = None, lowest: bool = True
) -> Iterator[str]:
    from tests.support.stack import free_port

    port = free_port()
    args = ["-m", "tests.bench.hook_apps", "sidecar", "--port", str(port), "--delay", str(delay)]
    with processes([(args, port, "/healthz")], cpus, **(LOWEST if lowest else {})):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def real_sidecar(cpus: set[int] | None = None, lowest: bool = True) -> Iterator[str]:
    """`ragmon serve` on a real Redis, both at the LOWEST priority unless told not to."""
    from tests.support.stack import ragmon_env, redis_server, start_api

    placing = LOWEST if lowest else {}
    with redis_server(cpus=cpus, **placing) as redis:
        env = ragmon_env(redis.url, RAGMON_API_KEYS=API_KEY, PYTHONHASHSEED="0")
        api, url = start_api(env, ready="/healthz", cpus=cpus, stdout=None, **placing)
        try:
            yield url
        finally:
            api.stop(signal.SIGINT)


class App:
    """A running RAG app: its port, whether it has the hook, and its process's CPU time read
    from outside."""

    def __init__(self, port: int, pid: int, hook: bool) -> None:
        self.port, self.pid, self.hook = port, pid, hook

    def cpu_s(self) -> float:
        """CPU seconds of all the app's threads so far (not its relay's)."""
        return process_cpu_s(self.pid)

    def rss_mb(self) -> float:
        """Resident memory of the app's process now (MB)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def get(self, path: str) -> dict[str, Any]:
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=30).json()


# ---- the open-loop load generator ------------------------------------------------------------


async def load(port: int, rate: float, seconds: float, queries: list[str]) -> dict[str, Any]:
    """Send `rate` requests/s to `port` on a fixed schedule for `seconds` (open loop).

    A request leaves at its time whatever the earlier ones are doing; latency is from its
    scheduled time to its last byte, so a late generator or a stalled app cannot hide queueing.
    """
    idle: list = []
    latencies: list[float] = []
    lags: list[float] = []
    errors = 0
    requests = [
        f"GET /search?q={quote_plus(q)} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for q in queries
    ]

    async def one(i: int, due: float) -> None:
        nonlocal errors
        conn = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        reader, writer = conn
        try:
            writer.write(requests[i % len(requests)])
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - due)
            if b" 200 " not in status:
                errors += 1
            idle.append(conn)
        except (OSError, asyncio.IncompleteReadError):
            errors += 1
            writer.close()

    tasks = set()
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(time.perf_counter() - due)
        task = asyncio.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()
    return {"latencies": latencies, "errors": errors, "lag_max": max(lags, default=0.0)}


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("serve", choices=("rag", "sidecar"))
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--hook", action="store_true")
    p.add_argument("--sidecar-url", default="")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--scan", type=int, default=CORPUS_SIZE, help="passages scored per request")
    p.add_argument("--wait-ms", type=float, default=0.0, help="awaited per request (no CPU)")
    args = p.parse_args(argv)
    if args.serve == "rag":
        app = create_rag_app(args.hook, args.sidecar_url, Shape(args.scan, args.wait_ms))
    else:
        app = create_stub_sidecar(args.delay)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
