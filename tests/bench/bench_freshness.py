"""Freshness: time from an event's 202 to its measures in /metrics and in GET /v1/retrievals/{id}.

    .venv/bin/python -m tests.bench.bench_freshness [--short] [--seconds 20] [--workers 2]

The whole system as processes: `ragmon serve`, `--workers` RQ workers with the lexical judge,
a real Redis. First the capacity: a flood of single-event POSTs (32 connections), and the
rate at which the workers finish them. Then an open-loop sender posts single events at half
that capacity for `--seconds`, while two pollers watch from outside, as a user would:
`/metrics` every 20 ms (the n-th accepted event counts as visible once
`ragmon_retrieval_ndcg_count` reaches n: first in, first out), and `GET /v1/retrievals/{id}`
every 10 ms for a sample of the events (about 20 a second) until their status is `done`.
Baseline, in the same run: the work itself, judging one event's 20 passages with the lexical
judge and computing its measures in-process, with no queue, no fork and no Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

import redis

from ragmon.core.measures import compute
from ragmon.store.keys import Keys
from ragmon.workers.judges.lexical import lexical_grades
from tests.bench.common import (
    Bodies,
    RawConn,
    _host_port,
    data_source,
    event_template,
    exit_on_sigterm,
    machine,
    ms,
    open_loop,
    pct,
    topics,
)
from tests.support.stack import ragmon_env, redis_server, start_api, start_worker, stop_all

METRIC = "ragmon_retrieval_ndcg_count"


def labeled(r: redis.Redis) -> int:
    """Events finished so far (the store's counter; used only to measure capacity)."""
    raw = r.hget(Keys().counters, "events_labeled")
    return int(raw) if raw is not None else 0


def metric_count(text: str) -> int:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(METRIC):
            total += float(line.rpartition(" ")[2])
    return int(total)


def work_floor(pairs: list[tuple[str, list[str]]], n: int = 200) -> float:
    """Seconds to judge one event (lexical) and compute its measures, in-process."""
    t0 = time.perf_counter()
    for i in range(n):
        query, texts = pairs[i % len(pairs)]
        compute(lexical_grades(query, texts), 10)
    return (time.perf_counter() - t0) / n


async def flood(url: str, template: str, n: int, connections: int = 32) -> float:
    """POST `n` single events as fast as the API takes them; returns when all are accepted."""
    host, port, _ = _host_port(url)
    bodies = Bodies(template)
    left = n

    async def client() -> None:
        nonlocal left
        conn = RawConn(host, port)
        while left > 0:
            left -= 1
            status, _ = await conn.request("POST", "/v1/retrievals", bodies.next())
            if status != 202:
                raise RuntimeError(f"flood: HTTP {status}")
        conn.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return time.perf_counter()


def capacity(url: str, r: redis.Redis, template: str, n: int, connections: int = 1) -> float:
    """Events/s the workers finish under a flood of single-event POSTs.

    With one connection every event is its own write and so its own RQ job (one fork each),
    the shape of moderate traffic; many connections let the API batch events into bigger
    jobs, and the workers then finish more per second."""
    base = labeled(r)
    t0 = time.perf_counter()
    asyncio.run(flood(url, template, n, connections))
    deadline = time.perf_counter() + 600
    while labeled(r) - base < n:
        if time.perf_counter() > deadline:
            raise TimeoutError("the workers did not finish the flood in 600 s")
        time.sleep(0.01)
    return n / (time.perf_counter() - t0)


async def half_load(
    url: str, template: str, rate: float, seconds: float, sample_every: int
) -> tuple[list[float], list[float], int]:
    """Open-loop POSTs at `rate`; returns (metrics delays, GET delays, events accepted)."""
    host, port, _ = _host_port(url)
    accepted: list[float] = []  # 202 times, in answer order
    get_delays: list[float] = []
    counts: list[tuple[float, int]] = []
    pollers: set[asyncio.Task] = set()
    stop = asyncio.Event()
    base = metric_count((await RawConn(host, port).request("GET", "/metrics"))[1].decode())

    async def watch_metrics() -> None:
        conn = RawConn(host, port)
        while not stop.is_set():
            _, body = await conn.request("GET", "/metrics")
            counts.append((time.perf_counter(), metric_count(body.decode()) - base))
            await asyncio.sleep(0.02)
        conn.close()

    async def watch_event(event_id: str, at: float) -> None:
        conn = RawConn(host, port)
        while True:
            _, body = await conn.request("GET", f"/v1/retrievals/{event_id}?app=bench")
            if json.loads(body)["status"] in ("done", "failed"):
                get_delays.append(time.perf_counter() - at)
                break
            await asyncio.sleep(0.01)
        conn.close()

    def on_answer(status: int, body: bytes, at: float) -> None:
        if status != 202:
            return
        accepted.append(at)
        if len(accepted) % sample_every == 0:
            task = asyncio.create_task(watch_event(json.loads(body)["event_id"], at))
            pollers.add(task)
            task.add_done_callback(pollers.discard)

    metrics_task = asyncio.create_task(watch_metrics())
    await open_loop(url + "/v1/retrievals", Bodies(template).next, rate, seconds, on_answer)
    await asyncio.wait_for(asyncio.gather(*list(pollers)), 120)
    deadline = time.perf_counter() + 120
    while (not counts or counts[-1][1] < len(accepted)) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await metrics_task
    metric_delays = []
    j = 0
    for n, at in enumerate(accepted, start=1):
        while j < len(counts) and counts[j][1] < n:
            j += 1
        if j == len(counts):
            break
        metric_delays.append(max(0.0, counts[j][0] - at))
    return metric_delays, get_delays, len(accepted)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_freshness", description=__doc__)
    p.add_argument("--short", action="store_true", help="a few seconds (CI)")
    p.add_argument("--seconds", type=float, default=None, help="half-load duration (default 20)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--flood", type=int, default=None, help="events for the capacity (1000)")
    p.add_argument(
        "--flood-connections", type=int, default=1, help="senders for the capacity (default 1)"
    )
    args = p.parse_args(argv)
    exit_on_sigterm()
    seconds = args.seconds or (3.0 if args.short else 20.0)
    n_flood = args.flood or (150 if args.short else 1000)

    print(machine())
    print(f"data: {data_source()}")
    pairs = topics(short=args.short)
    template = event_template(*pairs[0])
    floor = work_floor(pairs)
    with redis_server() as rs:
        r = redis.Redis.from_url(rs.url)
        env = ragmon_env(rs.url, RAGMON_METRICS_REFRESH_S="0")  # the pipeline, not the cache
        api, url = start_api(env)
        workers = [start_worker(env, f"fresh-{uuid.uuid4().hex[:6]}") for _ in range(args.workers)]
        try:
            capacity(url, r, template, min(50, n_flood))  # warm-up: imports, first forks
            cap = capacity(url, r, template, n_flood, args.flood_connections)
            rate = cap / 2
            sample_every = max(1, round(rate / 20))
            metric_delays, get_delays, n = asyncio.run(
                half_load(url, template, rate, seconds, sample_every)
            )
        finally:
            stop_all([*workers, api])
            r.close()

    print(
        f"{args.workers} workers, lexical judge; capacity {cap:,.0f} events/s (a flood of "
        f"{n_flood} single-event POSTs on {args.flood_connections} connection(s)); "
        f"half load: {rate:,.0f} events/s for {seconds:g} s, "
        f"{n} events accepted"
    )
    print()
    print("freshness: 202 -> measures visible (ms)")
    print(f"{'':30s}{'p50':>10s}{'p95':>10s}{'p99':>10s}{'n':>8s}")
    print(f"{'work floor (in-process)':30s}{ms(floor):>10s}{ms(floor):>10s}{ms(floor):>10s}"
          f"{'':>8s}")  # fmt: skip
    for label, d in (("/metrics (_count)", metric_delays), ("GET /v1/retrievals/{id}", get_delays)):
        print(f"{label:30s}{ms(pct(d, 50)):>10s}{ms(pct(d, 95)):>10s}{ms(pct(d, 99)):>10s}"
              f"{len(d):8d}")  # fmt: skip
    print("resolution: /metrics polled every 20 ms, GET every 10 ms (plus each request's time)")
    p50 = pct(metric_delays, 50)
    print(f"ratio /metrics p50 / work floor: {p50 / floor:,.0f}x")
    return 0 if metric_delays and get_delays else 1


if __name__ == "__main__":
    sys.exit(main())
