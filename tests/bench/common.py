"""Shared pieces of the server benchmarks (ingest, workers, freshness).

Realistic events (TREC DL passages read at run time, never copied here; synthetic text when the
file is absent), the no-op API to compare `ragmon serve` with (tests/support/stack.py starts
Redis and ragmon), and two load generators: wrk with a Lua script that gives every event a
distinct id, and a small asyncio client speaking raw HTTP/1.1 on keep-alive connections (closed
loop when wrk is absent, open loop at a fixed rate for "half load": latency is counted from
each request's scheduled send time, so a stalled server cannot hide its queueing).

`python -m tests.bench.common noop --port P` serves the no-op baseline endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ragmon.api.schemas import RetrievalBatch, RetrievalEvent
from tests.support.stack import Child, free_port, start_api

REPO = Path(__file__).resolve().parents[2]
TREC = REPO.parent / "shared" / "data" / "trec-dl" / "trec-dl-top20.jsonl"
ID_MARK = "__EVENT_ID__"
K, PASSAGES = 10, 20


# ---- the machine -----------------------------------------------------------------------------


def machine() -> str:
    """One line naming the machine, so figures are never read without it."""
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}; "
        f"Python {platform.python_version()}; {platform.system()} {platform.release()}; "
        f"load average {load}"
    )


def cpu_of(pid: int) -> float:
    """CPU seconds of a process and of its children, alive or reaped."""
    p = psutil.Process(pid)
    t = p.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in p.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return total


def exit_on_sigterm() -> None:
    """Stop on SIGTERM through SystemExit, so `finally` blocks stop the child processes."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of `values`; nan when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


# ---- realistic events ------------------------------------------------------------------------


def topics(short: bool = False) -> list[tuple[str, list[str]]]:
    """(query, 20 passage texts) pairs: TREC DL top-20 lists when the file is there."""
    out: list[tuple[str, list[str]]] = []
    if TREC.is_file():
        for line in TREC.read_text().splitlines():
            row = json.loads(line)
            texts = [h["text"] for h in row["hits"]][:PASSAGES]
            if len(texts) == PASSAGES:
                out.append((row["query"], texts))
            if short and len(out) >= 50:
                break
    if out:
        return out
    rng = random.Random(7)
    words = [f"term{i}" for i in range(2000)]
    for q in range(50):
        query = " ".join(rng.choices(words[:300], k=5))
        texts = [" ".join(rng.choices(words, k=45))[:300] for _ in range(PASSAGES)]
        out.append((f"query {q} {query}", texts))
    return out


def data_source() -> str:
    return f"TREC DL passages from {TREC}" if TREC.is_file() else "synthetic text (no TREC file)"


def make_event(query: str, texts: Sequence[str], event_id: str, seq: int = 0) -> dict:
    """One event as an app sends it: K=10, 20 ranked passages with scores, no known grades."""
    return {
        "event_id": event_id,
        "query": query,
        "k": K,
        "passages": [
            {"id": f"d{seq}-{i}", "text": t, "score": round(20.0 - i * 0.37, 3)}
            for i, t in enumerate(texts)
        ],
        "labels": {"app": "bench", "index": "trec", "retriever": "bm25", "segment": "default"},
    }


def event_template(query: str, texts: Sequence[str]) -> str:
    """A single-event body whose event_id is ID_MARK (each request puts a fresh id there)."""
    return json.dumps(make_event(query, texts, ID_MARK), separators=(",", ":"))


def batch_template(pairs: Sequence[tuple[str, Sequence[str]]], size: int) -> str:
    """A batch body of `size` events, each with its own ID_MARK."""
    events = [make_event(*pairs[i % len(pairs)], ID_MARK, i) for i in range(size)]
    return json.dumps({"events": events}, separators=(",", ":"))


class Bodies:
    """Request bodies from a template: every ID_MARK gets a distinct id, unique per run."""

    def __init__(self, template: str) -> None:
        self.parts = [p.encode() for p in template.split(ID_MARK)]
        self.nonce = uuid.uuid4().hex[:8]
        self.n = 0

    def next(self) -> bytes:
        self.n += 1
        out = [self.parts[0]]
        for j, part in enumerate(self.parts[1:]):
            out.append(f"py-{self.nonce}-{self.n}-{j}".encode())
            out.append(part)
        return b"".join(out)


# ---- the no-op baseline server ---------------------------------------------------------------


def start_noop() -> tuple[Child, str]:
    """The baseline: a FastAPI endpoint that parses the same body and answers 202."""
    port = free_port()
    proc = Child([sys.executable, "-m", "tests.bench.common", "noop", "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    proc.wait_http(f"{url}/healthz")
    return proc, url


def make_noop_app() -> FastAPI:
    """What the ragmon endpoint costs without ragmon: same framework, same parsing, 202."""
    app = FastAPI()

    @app.post("/v1/retrievals")
    async def one(request: Request) -> JSONResponse:
        ev = RetrievalEvent.model_validate_json(await request.body())
        return JSONResponse({"event_id": ev.event_id, "status": "queued"}, 202)

    @app.post("/v1/retrievals/batch")
    async def batch(request: Request) -> JSONResponse:
        b = RetrievalBatch.model_validate_json(await request.body())
        return JSONResponse(
            {"results": [{"event_id": e.event_id, "status": "queued"} for e in b.events]}, 202
        )

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    return app


# ---- load generators -------------------------------------------------------------------------


@dataclass
class Load:
    """What a load run measured."""

    tool: str
    requests: int
    seconds: float
    p50: float
    p99: float
    errors: int = 0
    p90: float = float("nan")

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


WRK_LUA = r"""
local parts = {}
local counter = 0
local tid = 0
local nonce = os.getenv("BENCH_NONCE") or "x"
local template_path = os.getenv("BENCH_TEMPLATE")
local mark = "__EVENT_ID__"
local threads = {}

function setup(thread)
  tid = tid + 1
  thread:set("tid", tid)
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(template_path, "rb"))
  local body = f:read("*a")
  f:close()
  local start = 1
  while true do
    local i, j = string.find(body, mark, start, true)
    if not i then break end
    table.insert(parts, string.sub(body, start, i - 1))
    start = j + 1
  end
  table.insert(parts, string.sub(body, start))
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  local out = {parts[1]}
  for i = 2, #parts do
    out[#out + 1] = "wrk-" .. nonce .. "-" .. tid .. "-" .. counter .. "-" .. (i - 1)
    out[#out + 1] = parts[i]
  end
  return wrk.format(nil, nil, nil, table.concat(out))
end

function done(summary, latency, requests)
  io.write(string.format("BENCH %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), summary.errors.status, summary.errors.connect + summary.errors.read
    + summary.errors.write, summary.errors.timeout))
end
"""


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(url: str, template: str, seconds: float, connections: int, threads: int = 1) -> Load:
    """Closed-loop load with wrk: `connections` keep-alive connections, as fast as it answers."""
    with tempfile.TemporaryDirectory(prefix="ragmon-bench-") as tmp:
        script, body = Path(tmp, "post.lua"), Path(tmp, "body.json")
        script.write_text(WRK_LUA)
        body.write_text(template)
        env = {**os.environ, "BENCH_TEMPLATE": str(body), "BENCH_NONCE": uuid.uuid4().hex[:8]}
        out = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s",
             "--timeout", "10s", "-s", str(script), url],
            env=env, capture_output=True, text=True, timeout=seconds + 60, check=True,
        ).stdout  # fmt: skip
    m = re.search(r"^BENCH (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", out, re.M)
    if not m:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    n, dur_us, p50, p90, p99, status_err, sock_err, timeouts = map(int, m.groups())
    return Load("wrk", n, dur_us / 1e6, p50 / 1e6, p99 / 1e6, status_err + sock_err + timeouts,
                p90 / 1e6)  # fmt: skip


class RawConn:
    """One keep-alive HTTP/1.1 connection: the cheapest client Python can be."""

    # uvicorn closes a keep-alive connection idle for 5 s: reopen before that, as HTTP
    # clients do, so a connection left over from a burst is not counted as a server error
    MAX_IDLE_S = 4.0

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used_at = 0.0

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        if self.writer is not None and time.monotonic() - self.used_at > self.MAX_IDLE_S:
            self.close()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
        if body or method == "POST":
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        assert self.reader is not None
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == "content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length) if length else b""
        self.used_at = time.monotonic()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _host_port(url: str) -> tuple[str, int, str]:
    m = re.match(r"http://([^:/]+):(\d+)(/.*)?$", url)
    if not m:
        raise ValueError(f"not an http://host:port URL: {url}")
    return m.group(1), int(m.group(2)), m.group(3) or "/"


async def closed_loop(
    url: str,
    next_body: Callable[[], bytes],
    seconds: float,
    connections: int,
    content_type: str = "application/json",
) -> Load:
    """The fallback when wrk is absent: `connections` clients sending back to back."""
    host, port, path = _host_port(url)
    lat: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal errors
        conn = RawConn(host, port)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                status, _ = await conn.request("POST", path, next_body(), content_type)
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                continue
            lat.append(time.perf_counter() - t0)
            errors += status >= 400
        conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(connections)))
    took = time.perf_counter() - t0
    return Load("asyncio closed loop", len(lat), took, pct(lat, 50), pct(lat, 99), errors,
                pct(lat, 90))  # fmt: skip


async def open_loop(
    url: str,
    next_body: Callable[[], bytes],
    rate: float,
    seconds: float,
    on_answer: Callable[[int, bytes, float], None] | None = None,
    max_connections: int = 256,
) -> Load:
    """Send at a fixed `rate` whatever the answers; latency from each scheduled send time.

    A request due while every open connection is busy opens a new one (up to
    `max_connections`, then waits): queueing in the server shows up as latency, never as a
    lower sending rate. `on_answer(status, body, answered_at)` sees every answer.
    """
    host, port, path = _host_port(url)
    idle: list[RawConn] = []
    opened = 0
    slots = asyncio.Semaphore(max_connections)
    lat: list[float] = []
    errors = 0
    tasks: set[asyncio.Task] = set()

    async def one(due: float, body: bytes) -> None:
        nonlocal errors, opened
        async with slots:
            if idle:
                conn = idle.pop()
            else:
                conn = RawConn(host, port)
                opened += 1
            try:
                status, data = await conn.request("POST", path, body)
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                return
            now = time.perf_counter()
            idle.append(conn)
        lat.append(now - due)
        errors += status >= 400
        if on_answer is not None:
            on_answer(status, data, now)

    n = max(1, int(rate * seconds))
    start = time.perf_counter() + 0.05
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due, next_body()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.gather(*list(tasks))
    for conn in idle:
        conn.close()
    return Load(f"asyncio open loop at {rate:.0f}/s", len(lat), seconds, pct(lat, 50),
                pct(lat, 99), errors, pct(lat, 90))  # fmt: skip


def closed_load(url: str, template: str, seconds: float, connections: int) -> Load:
    """wrk when installed, else the asyncio closed-loop client."""
    if have_wrk():
        return run_wrk(url, template, seconds, connections)
    return asyncio.run(closed_loop(url, Bodies(template).next, seconds, connections))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.common")
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("noop", help="serve the no-op baseline API (same uvicorn settings)")
    n.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    if args.cmd == "noop":
        import uvicorn

        # The same call as `ragmon serve` (monitor/api/serve.py): one process, no access log.
        uvicorn.run(
            make_noop_app(), host="127.0.0.1", port=args.port, log_level="warning",
            access_log=False,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())


def peak_single_rate(env: dict[str, str], template: str, seconds: float) -> float:
    """The API's most single events per second (32 connections, closed loop) on a server of
    its own: the benches load it at a share of this."""
    proc, url = start_api(env)
    try:
        return closed_load(url + "/v1/retrievals", template, min(seconds, 5.0), 32).rps
    finally:
        proc.stop()
