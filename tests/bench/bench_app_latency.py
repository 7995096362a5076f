"""App latency with the ragmon hook off and on, with the sidecar healthy, slow and down.

    .venv/bin/python -m tests.bench.bench_app_latency [--short] [--rate 200] [--json out.json]

A small RAG-like FastAPI app (scores an in-memory corpus, returns the top 10) runs under uvicorn
in a subprocess, twice: without the hook and with `RetrievalMonitor.record()` in its endpoint.
An open-loop load generator (asyncio, raw HTTP/1.1 on keep-alive connections, requests sent on
a fixed schedule whatever the answers) drives both apps at once, request by request (each app
gets the full rate), so a burst of load from anything else on this shared machine hits both
alike (`--design abba` alternates segments instead). The `control` state runs two apps without
the hook the same way: its p99 ratio is the noise floor of the run.

Sidecar states: healthy (the real `ragmon serve` on a real Redis, or `--sidecar fake` for a
202-at-once server), slow (answers after 5 s), down (a closed port). The sidecar and its Redis
run at nice 19 (see SIDECAR_NICE); the apps do not. The CPU time of each app per request is
reported too: the hook's cost that no scheduling luck can hide.
Target: p99 with the hook <= 1.05 x p99 without it, in every state.
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
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

REPO = Path(__file__).resolve().parents[2]
TREC = REPO.parent / "shared" / "data" / "trec-dl" / "trec-dl-top20.jsonl"
CORPUS_SIZE = 2000
TOKEN = re.compile(r"[a-z0-9]+")
SLOW_S = 5.0
API_KEY = "bench-key-0123456789abcdef"
# The sidecar (and its Redis) run at the lowest CPU priority: in production they have their own
# CPUs; on a 2-core box their parsing would otherwise compete with the app and the load
# generator. The app's process, hook threads included, keeps normal priority.
SIDECAR_NICE = 19


# ---- the RAG-like app and the fake sidecar (run in subprocesses) -----------------------------


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


def create_rag_app(hook: bool, sidecar_url: str) -> Any:
    """`GET /search?q=`: token-overlap top 20 over the corpus; the hook records them (K=10)."""
    from fastapi import FastAPI

    from monitor.client import RetrievalMonitor

    corpus = [(pid, text, frozenset(TOKEN.findall(text.lower()))) for pid, text in load_corpus()[0]]
    state: dict[str, Any] = {}
    gc_pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    gc_start: list[float] = [0.0]

    def gc_watch(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_pauses[info["generation"]].append(time.perf_counter() - gc_start[0])

    gc.callbacks.append(gc_watch)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        if hook:
            extra = json.loads(os.environ.get("RAGMON_BENCH_MONITOR", "{}"))  # for experiments
            import monitor.client.recorder as recorder

            for name in ("ENCODE_AT", "ENCODE_SLICE_S", "YIELD_FOR_S"):  # module knobs
                if name in extra:
                    setattr(recorder, name, extra.pop(name))
            state["monitor"] = RetrievalMonitor(
                sidecar_url, api_key=API_KEY, labels={"app": "bench"}, close_timeout=1.0, **extra
            )
        yield
        if hook:
            state["monitor"].close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/search")
    async def search(q: str) -> dict:
        terms = frozenset(TOKEN.findall(q.lower()))
        top = heapq.nlargest(20, corpus, key=lambda p: len(terms & p[2]))
        hits = [(pid, text, float(len(terms & toks))) for pid, text, toks in top]
        if hook:
            state["monitor"].record(q, hits, 10)
        return {"ids": [h[0] for h in hits[:10]]}

    @app.get("/stats")
    async def stats() -> dict:
        out = state["monitor"].stats() if hook else {}
        out["cpu_s"] = round(time.process_time(), 3)
        out["threads"] = threading.active_count()
        for gen, pauses in gc_pauses.items():
            out[f"gc{gen}_count"] = len(pauses)
            out[f"gc{gen}_max_ms"] = round(max(pauses, default=0.0) * 1e3, 2)
            out[f"gc{gen}_total_ms"] = round(sum(pauses) * 1e3, 2)
        return out

    return app


def create_fake_sidecar(delay: float) -> Any:
    """A raw ASGI app answering every POST with 202 (after `delay` seconds)."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        if delay and scope["method"] == "POST":
            await asyncio.sleep(delay)
        out: dict[str, Any] = {"status": "ok"}
        if scope["path"].endswith("/batch"):
            events = json.loads(body)["events"]
            out = {"results": [{"event_id": e["event_id"], "status": "queued"} for e in events]}
        payload = json.dumps(out).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    if args.serve == "rag":
        app = create_rag_app(args.hook == "on", args.sidecar_url)
    else:
        app = create_fake_sidecar(args.delay)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


# ---- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


@contextlib.contextmanager
def process(
    args: list[str], port: int, ready: str, env: dict | None = None, nice: int = 0
) -> Iterator[int]:
    """A child Python process serving HTTP on `port`, stopped (SIGINT) when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    if nice:  # a new session is a new autogroup: nice only counts if the group has it too
        with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/autogroup", "w") as f:
            f.write(str(nice))
    try:
        wait_http(port, ready, proc)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rag_app(hook: bool, sidecar_url: str) -> contextlib.AbstractContextManager[int]:
    port = free_port()
    me = ["-m", "tests.bench.bench_app_latency", "--serve", "rag", "--port", str(port)]
    return process([*me, "--hook", "on" if hook else "off", "--sidecar-url", sidecar_url],
                   port, "/search?q=warm")  # fmt: skip


@contextlib.contextmanager
def sidecar(state: str, kind: str) -> Iterator[str]:
    """The sidecar URL in the given state, with its processes running for the block."""
    if state in ("down", "control"):
        yield f"http://127.0.0.1:{free_port()}"
        return
    port = free_port()
    if state == "healthy" and kind == "real":
        from tests.support.redis_server import RedisServer

        redis = RedisServer().start()
        os.setpriority(os.PRIO_PROCESS, redis.proc.pid, SIDECAR_NICE)
        env = {"REDIS_URL": redis.url, "RAGMON_API_KEYS": API_KEY, "RAGMON_JUDGE": "lexical"}
        try:
            with process(["-m", "monitor.cli", "serve", "--port", str(port), "--log-level",
                          "warning"], port, "/healthz", env, SIDECAR_NICE):  # fmt: skip
                yield f"http://127.0.0.1:{port}"
        finally:
            redis.cleanup()
        return
    delay = SLOW_S if state == "slow" else 0.0
    me = ["-m", "tests.bench.bench_app_latency", "--serve", "sidecar", "--port", str(port)]
    with process([*me, "--delay", str(delay)], port, "/healthz", nice=SIDECAR_NICE):
        yield f"http://127.0.0.1:{port}"


# ---- the open-loop load generator -----------------------------------------------------------


async def load(ports: list[int], rate: float, seconds: float, queries: list[str]) -> dict[str, Any]:
    """Send `rate` requests/s to each port on one fixed schedule for `seconds`.

    Open loop: a request leaves at its time whatever the earlier ones are doing. With several
    ports, each tick sends one request to every port (the order rotates), so all apps see
    the same moment of the machine. Latency is from the request's write to its last byte.
    """
    idle: dict[int, list] = {port: [] for port in ports}
    latencies: dict[int, list[float]] = {port: [] for port in ports}
    lags: list[float] = []
    errors = dict.fromkeys(ports, 0)
    requests = [
        f"GET /search?q={quote_plus(q)} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for q in queries
    ]

    async def one(port: int, i: int) -> None:
        pool = idle[port]
        conn = pool.pop() if pool else await asyncio.open_connection("127.0.0.1", port)
        reader, writer = conn
        try:
            t0 = time.perf_counter()
            writer.write(requests[i % len(requests)])
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies[port].append(time.perf_counter() - t0)
            if b" 200 " not in status:
                errors[port] += 1
            pool.append(conn)
        except (OSError, asyncio.IncompleteReadError):
            errors[port] += 1
            writer.close()

    tasks = set()
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(time.perf_counter() - due)
        for j in range(len(ports)):
            task = asyncio.create_task(one(ports[(i + j) % len(ports)], i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    for pool in idle.values():
        for _, writer in pool:
            writer.close()
    return {"latencies": latencies, "errors": errors, "lag_p99": quantile(lags, 0.99)}


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "n": len(latencies),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p90_ms": quantile(latencies, 0.90) * 1e3,
        "p99_ms": quantile(latencies, 0.99) * 1e3,
        "max_ms": max(latencies) * 1e3,
    }


# ---- the run --------------------------------------------------------------------------------


def measure_state(
    state: str,
    kind: str,
    rate: float,
    seconds: float,
    reps: int,
    queries: list[str],
    design: str = "paired",
) -> dict[str, Any]:
    """The app without and with the hook, this sidecar state.

    `paired`: both apps run and get the same schedule at once (request by request), so a
    burst of load from anything else on the machine hits both; `abba`: alternating segments.
    """
    lat: dict[str, list[float]] = {"off": [], "on": []}
    errors = {"off": 0, "on": 0}
    lag = 0.0
    with (
        sidecar(state, kind) as url,
        rag_app(False, url) as port_off,
        rag_app(state != "control", url) as port_on,  # control: both without the hook
    ):
        ports = {"off": port_off, "on": port_on}
        names = {port: name for name, port in ports.items()}
        asyncio.run(load(list(ports.values()), rate, min(1.0, seconds), queries))  # warm-up
        cpu0 = {name: app_stats(port)["cpu_s"] for name, port in ports.items()}
        for r in range(reps):
            if design == "paired":
                groups = [[port_off, port_on]]
            else:
                groups = [[port_off], [port_on]] if r % 2 == 0 else [[port_on], [port_off]]
            for group in groups:
                out = asyncio.run(load(group, rate, seconds, queries))
                for port in group:
                    lat[names[port]] += out["latencies"][port]
                    errors[names[port]] += out["errors"][port]
                lag = max(lag, out["lag_p99"])
        hook_stats, off_stats = app_stats(port_on), app_stats(port_off)
    off, on = summary(lat["off"]), summary(lat["on"])
    for name, f, st in (("off", off, off_stats), ("on", on, hook_stats)):
        f["cpu_ms_per_request"] = (st["cpu_s"] - cpu0[name]) * 1e3 / max(1, f["n"])
    return {
        "state": state,
        "off": off,
        "on": on,
        "p99_ratio": on["p99_ms"] / off["p99_ms"],
        "p50_ratio": on["p50_ms"] / off["p50_ms"],
        "errors": errors,
        "generator_lag_p99_ms": lag * 1e3,
        "loadavg": os.getloadavg()[0],
        "hook_stats": hook_stats,
        "off_stats": off_stats,
    }


def app_stats(port: int) -> dict[str, Any]:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()


def real_api_available() -> bool:
    try:
        from monitor.api import create_app  # noqa: F401
        from tests.support.redis_server import RedisServer

        RedisServer()
    except Exception:
        return False
    return True


def run(
    short: bool = False,
    rate: float | None = None,
    kind: str = "auto",
    states: tuple[str, ...] = ("control", "healthy", "slow", "down"),
    design: str = "paired",
) -> dict[str, Any]:
    """Measure every state; returns the figures (also printed by `main`)."""
    rate = rate or (100.0 if short else 200.0)
    seconds, reps = (1.5, 2) if short else (2.0, 20)
    if kind == "auto":
        kind = "real" if real_api_available() else "fake"
    queries = load_corpus()[1]
    results = [measure_state(s, kind, rate, seconds, reps, queries, design) for s in states]
    return {
        "machine": machine(),
        "rate_rps": rate,
        "seconds_per_segment": seconds,
        "segments_per_variant": reps,
        "design": design,
        "healthy_sidecar": "ragmon serve + Redis" if kind == "real" else "fake 202 server",
        "states": results,
    }


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"App latency: {figures['rate_rps']:.0f} req/s open loop per app, {figures['design']}, "
        f"{figures['segments_per_variant']} x {figures['seconds_per_segment']} s per variant; "
        f"healthy sidecar = {figures['healthy_sidecar']}; {figures['machine']}",
        f"{'sidecar':8} {'hook':5} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'CPU ms/req':>10}  {'p99 on/off':>10}  hook stats",
    ]
    for s in figures["states"]:
        for name in ("off", "on"):
            f = s[name]
            tail, label = "", name
            if s["state"] == "control":
                label = "off" if name == "off" else "off'"
                if name == "on":
                    tail = f"  {s['p99_ratio']:>7.3f}     (A/A: the noise floor)"
            elif name == "on":
                verdict = "ok" if s["p99_ratio"] <= 1.05 else "OVER 1.05"
                h = s["hook_stats"]
                tail = (
                    f"  {s['p99_ratio']:>7.3f} {verdict:>2}  sent={h.get('sent')} "
                    f"buffered={h.get('buffered')} dropped={h.get('dropped_buffer_full')} "
                    f"retries={h.get('retries')}"
                )
            lines.append(
                f"{s['state']:8} {label:5} {f['n']:>6} {f['p50_ms']:>8.2f} {f['p90_ms']:>8.2f} "
                f"{f['p99_ms']:>8.2f} {f['max_ms']:>8.2f} {f['cpu_ms_per_request']:>10.3f}{tail}"
            )
        if any(s["errors"].values()):
            lines.append(f"         errors: {s['errors']}")
    lag = max(s["generator_lag_p99_ms"] for s in figures["states"])
    loads = ", ".join(f"{s['state']} {s['loadavg']:.2f}" for s in figures["states"])
    lines.append(f"(load generator schedule lag p99: {lag:.2f} ms; 1-min load average: {loads})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="a few seconds per state (CI)")
    p.add_argument("--rate", type=float, default=None, help="requests/s (default 200; short 100)")
    p.add_argument("--sidecar", choices=("auto", "real", "fake"), default="auto")
    p.add_argument(
        "--states",
        default="control,healthy,slow,down",
        help="control = both apps without the hook (A/A), to show the noise floor",
    )
    p.add_argument(
        "--design",
        choices=("paired", "abba"),
        default="paired",
        help="paired: both apps under the same schedule at once (default); abba: alternating",
    )
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--serve", choices=("rag", "sidecar"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--hook", choices=("on", "off"), help=argparse.SUPPRESS)
    p.add_argument("--sidecar-url", help=argparse.SUPPRESS)
    p.add_argument("--delay", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    figures = run(args.short, args.rate, args.sidecar, tuple(args.states.split(",")), args.design)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
