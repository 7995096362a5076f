"""Requests that cost little to send and much to serve (issue 33), and the watch that times
`/healthz` and the API's memory while they run.

Each attack runs in a process of its own, so its CPU and GIL do not delay the health checks
timed from the caller's:

    python -m tests.reliability.attacks NAME URL SECONDS    # prints its answers as JSON

`ATTACKS` names them, with the settings (`env`), the open-files limit (`nofile`) and the
warm-up request (`warm`: the same route, once, so the decoding child exists before the
baseline) the server runs with. Used by `tests/reliability/test_attacks.py` (every health
check answered, memory within bounds) and `tests/bench/bench_attacks.py` (the p99 against a
quiet baseline).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import psutil

from tests.support.events import make_event
from tests.support.spans import export, otlp_json, retriever_attrs, span
from tests.support.stack import Child, free_port, ragmon_env, start_api

SLOW_CLIENTS = 4096
SCRAPERS = 4

# ---- the attacks -----------------------------------------------------------------------------


def _repeat(send: Callable[[httpx.Client], httpx.Response], seconds: float) -> Counter[str]:
    """`send` back to back for `seconds`: the answers by status (or exception name)."""
    out: Counter[str] = Counter()
    end = time.monotonic() + seconds
    with httpx.Client(timeout=120) as client:
        while time.monotonic() < end:
            try:
                out[str(send(client).status_code)] += 1
            except httpx.HTTPError as exc:
                out[type(exc).__name__] += 1
    return out


def otlp_gzip_bomb(url: str, seconds: float) -> Counter[str]:
    """30 KB of gzip inflating to 15.7 million empty ResourceSpans (31 MB)."""
    body = gzip.compress(b"\x0a\x00" * 15_700_000, compresslevel=9)
    headers = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
    return _repeat(lambda c: c.post(url + "/v1/traces", content=body, headers=headers), seconds)


def otlp_json_spans(url: str, seconds: float) -> Counter[str]:
    """1 million empty OTLP/JSON spans (3 MB)."""
    body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * 1_000_000)
    body += b"]}]}]}"
    headers = {"content-type": "application/json"}
    return _repeat(lambda c: c.post(url + "/v1/traces", content=body, headers=headers), seconds)


def otlp_retrievers(url: str, seconds: float) -> Counter[str]:
    """60,000 retriever spans in one export (the batch route takes 1,000 events)."""
    one = span(retriever_attrs())
    body = export([one] * 60_000).SerializeToString()
    headers = {"content-type": "application/x-protobuf"}
    return _repeat(lambda c: c.post(url + "/v1/traces", content=body, headers=headers), seconds)


def otlp_deep_json(url: str, seconds: float) -> Counter[str]:
    """OTLP/JSON nested 200,000 levels deep (before: a plain-text 500)."""
    body = b'{"resourceSpans":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    headers = {"content-type": "application/json"}
    return _repeat(lambda c: c.post(url + "/v1/traces", content=body, headers=headers), seconds)


def big_batch(url: str, seconds: float) -> Counter[str]:
    """A 32 MB batch, 1,001 events of 20 passages of 1.5 KB: parsed whole, then refused."""
    ev = make_event(n=20)
    for p in ev["passages"]:
        p["text"] = "x" * 1500
    body = json.dumps({"events": [ev] * 1001}).encode()
    headers = {"content-type": "application/json"}
    post = lambda c: c.post(url + "/v1/retrievals/batch", content=body, headers=headers)  # noqa: E731
    return _repeat(post, seconds)


def login_body(url: str, seconds: float) -> Counter[str]:
    """Sign-in forms of 300 MB streamed without Content-Length (before: read whole)."""
    chunk = b"key=" + b"x" * 65536

    def send(client: httpx.Client) -> httpx.Response:
        chunks = (chunk for _ in range(300_000_000 // len(chunk)))
        headers = {"content-type": "application/x-www-form-urlencoded"}
        return client.post(url + "/ui/login", content=chunks, headers=headers)

    return _repeat(send, seconds)


def bad_searches(url: str, seconds: float) -> Counter[str]:
    """Searches with NaN, infinity, 400-digit times and deeply nested cursors."""
    cursor = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    queries = [{"ndcg_lt": "nan"}, {"t_gt": "inf"}, {"hit": "1e400"}, {"from": "9" * 400},
               {"to": "-" + "9" * 400}, {"cursor": cursor}]  # fmt: skip
    n = [0]

    def send(client: httpx.Client) -> httpx.Response:
        n[0] += 1
        return client.get(url + "/v1/retrievals", params=queries[n[0] % len(queries)])

    return _repeat(send, seconds)


def plain_scrapes(url: str, seconds: float) -> Counter[str]:
    """Four scrapers pulling /metrics back to back, without gzip."""
    out: Counter[str] = Counter()
    headers = {"accept-encoding": "identity"}

    def scraper() -> None:
        with httpx.Client(timeout=120, headers=headers) as client:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    out[str(client.get(url + "/metrics").status_code)] += 1
                except httpx.HTTPError as exc:
                    out[type(exc).__name__] += 1

    threads = [threading.Thread(target=scraper) for _ in range(SCRAPERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


async def _slow_body(
    host: str, port: int, path: str, length: int, stop: asyncio.Event, out: Counter
) -> None:
    """One slow client: a request's headers, then its body a byte a second; reconnects."""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {length}\r\n"
        "content-type: application/x-www-form-urlencoded\r\n\r\n"
    ).encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            out["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        out["opened"] += 1
        try:
            writer.write(head)
            while not stop.is_set():
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                except TimeoutError:
                    writer.write(b"k")
                    continue
                out[data[9:12].decode() or "closed"] += 1
                break
        except OSError:
            out["reset"] += 1
        finally:
            writer.close()


def _slow_bodies(path: str, length: int = 100_000) -> Callable[[str, float], Counter[str]]:
    """`SLOW_CLIENTS` slow bodies of `length` bytes (within the route's limit, so the server
    waits for them)."""

    def attack(url: str, seconds: float) -> Counter[str]:
        where = urlsplit(url)
        out: Counter[str] = Counter()

        async def main() -> None:
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(
                    _slow_body(where.hostname or "", where.port or 80, path, length, stop, out)
                )  # fmt: skip
                for _ in range(SLOW_CLIENTS)
            ]
            await asyncio.sleep(seconds)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(main())
        return out

    attack.__doc__ = f"{SLOW_CLIENTS:,} clients sending a body to {path} a byte a second"
    return attack


@dataclass(frozen=True)
class Attack:
    run: Callable[[str, float], Counter[str]]
    env: dict[str, str] = field(default_factory=dict)
    nofile: int | None = None  # the API's open-files limit (soft and hard)
    warm: Callable[[str], object] | None = None  # one ordinary request of the same route
    series: bool = False  # /metrics at 500 series (tests.bench.bench_metrics.fill)


def warm_traces(url: str) -> None:
    body = export([span(retriever_attrs())]).SerializeToString()
    headers = {"content-type": "application/x-protobuf"}
    httpx.post(url + "/v1/traces", content=body, headers=headers, timeout=60).raise_for_status()


def warm_traces_json(url: str) -> None:
    r = httpx.post(url + "/v1/traces", content=otlp_json(export([span(retriever_attrs())])),
                   headers={"content-type": "application/json"}, timeout=60)  # fmt: skip
    r.raise_for_status()


def warm_batch(url: str) -> None:
    ev = make_event(n=20)
    for p in ev["passages"]:
        p["text"] = "x" * 1500
    big = json.dumps({"events": [dict(ev, event_id=f"w{i}") for i in range(40)]}).encode()
    httpx.post(url + "/v1/retrievals/batch", content=big, timeout=60).raise_for_status()


def warm_metrics(url: str) -> None:
    httpx.get(url + "/metrics", timeout=120).raise_for_status()


ATTACKS: dict[str, Attack] = {
    "otlp-gzip-bomb": Attack(otlp_gzip_bomb, warm=warm_traces),
    "otlp-json-spans": Attack(otlp_json_spans, warm=warm_traces_json),
    "otlp-60k-retrievers": Attack(otlp_retrievers, warm=warm_traces),
    "otlp-deep-json": Attack(otlp_deep_json, warm=warm_traces_json),
    "batch-32mb": Attack(big_batch, warm=warm_batch),
    "login-300mb": Attack(login_body),
    "slow-login-bodies": Attack(_slow_bodies("/ui/login", 8000)),  # under the form's 8 KiB
    "slow-ingest-bodies-1024-fds": Attack(_slow_bodies("/v1/retrievals/batch"), nofile=1024),
    "bad-searches": Attack(bad_searches),
    "plain-scrapes-500-series": Attack(plain_scrapes, warm=warm_metrics, series=True),
}


def serve(attack: Attack, redis_url: str, **child: object) -> tuple[Child, str]:
    """`ragmon serve` as `attack` wants it (its settings, its open-files limit), warmed up."""
    env = ragmon_env(redis_url, **attack.env)
    if attack.series:
        from tests.bench.bench_metrics import fill

        fill(redis_url)
    if attack.nofile is None:
        proc, url = start_api(env, **child)
    else:  # soft and hard: `ragmon serve` cannot raise it
        port = free_port()
        argv = ["prlimit", f"--nofile={attack.nofile}:{attack.nofile}", sys.executable, "-m",
                "ragmon.cli", "serve", "--port", str(port), "--log-level", "warning"]  # fmt: skip
        proc, url = Child(argv, env, **child), f"http://127.0.0.1:{port}"
        try:
            proc.wait_http(url + "/readyz", 30)
        except BaseException:
            proc.stop()
            raise
    if attack.warm is not None:
        attack.warm(url)
    return proc, url


# ---- the watch -------------------------------------------------------------------------------


@dataclass
class Watch:
    """Health checks (latency in s, None when not answered 200) and the API's resident memory:
    its own process (`api`), and with its children (`tree`: the decoding and /metrics
    processes), at the start and at most."""

    latencies: list[float | None] = field(default_factory=list)
    api: tuple[int, int] = (0, 0)
    tree: tuple[int, int] = (0, 0)

    @property
    def answered(self) -> list[float]:
        return [x for x in self.latencies if x is not None]

    @property
    def failed(self) -> int:
        return sum(x is None for x in self.latencies)

    @property
    def api_grew_mib(self) -> float:
        return (self.api[1] - self.api[0]) / 2**20

    @property
    def tree_grew_mib(self) -> float:
        return (self.tree[1] - self.tree[0]) / 2**20


def rss(pid: int) -> tuple[int, int]:
    """Resident memory of the API process, and of it with its children."""
    own = total = 0
    with contextlib.suppress(psutil.Error):
        me = psutil.Process(pid)
        own = total = me.memory_info().rss
        for p in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return own, total


def watch(url: str, pid: int, seconds: float, every: float = 0.05) -> Watch:
    """`/healthz` on a fresh connection every `every` s for `seconds` (5 s timeout)."""
    where = urlsplit(url)
    own, total = rss(pid)
    out = Watch(api=(own, own), tree=(total, total))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(where.hostname, where.port, timeout=5)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
        except OSError:
            ok = False
        out.latencies.append(time.perf_counter() - t0 if ok else None)
        own, total = rss(pid)
        out.api = (out.api[0], max(out.api[1], own))
        out.tree = (out.tree[0], max(out.tree[1], total))
        time.sleep(max(0.0, every - (time.perf_counter() - t0)))
    return out


@contextlib.contextmanager
def attacking(name: str, url: str, seconds: float) -> Iterator[subprocess.Popen]:
    """The attack `name` in a process of its own; its answers are on its stdout (JSON)."""
    me = "tests.reliability.attacks"
    proc = subprocess.Popen([sys.executable, "-m", me, name, url, str(seconds)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


if __name__ == "__main__":  # NAME URL SECONDS: run one attack, print its answers as JSON
    socket.setdefaulttimeout(120)
    name, url, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    print(json.dumps(dict(ATTACKS[name].run(url, seconds))))
