"""/metrics against ingest: scrape time at 500 series, and what four scrapers do to the ingest
p99 at half load, for each way of rendering, all in one run.

    .venv/bin/python -m tests.bench.bench_metrics [--short] [--seconds 60] [--interval 15]

Redis holds 500 series of every quality histogram (5 apps x 100, one event each). Options, each
a fresh `ragmon serve` on that Redis:
  inline-every-scrape  the API renders in a thread on every scrape (before issue 14)
  inline-cached        rendered in a thread, kept RAGMON_METRICS_REFRESH_S (10 s)
  child-cached         rendered in a child process ahead of the scrapes, every 10 s (default)
Per option: an open-loop sender at half of ragmon's measured maximum (single events, latency
from each scheduled send) runs `--seconds` before any scrape (nothing renders), then the time
of an uncached scrape (median of 3) and of a cached one, then the sender runs as long again
with four scrapers (a process of their own, each scraping every `--interval` s, staggered);
printed: p99 of each and their ratio (target <= 1.2), and scrape latencies under load.
--aa: the second phase without scrapers too (the ratio's noise; renderings then still run for
RAGMON's idle time after the last scrape). --short: 4 s phases, scrapes every 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import httpx

from monitor.measures import compute
from monitor.settings import Settings
from monitor.store import Store
from monitor.store.keys import event_ref
from tests.bench.common import (
    Bodies,
    closed_load,
    event_template,
    exit_on_sigterm,
    machine,
    open_loop,
    topics,
)
from tests.support.stack import ragmon_env, redis_server, start_api

SERIES = 500
TARGET = 1.2
OPTIONS = {  # name: (render in a child process, cached)
    "inline-every-scrape": (False, False),
    "inline-cached": (False, True),
    "child-cached": (True, True),
}


def fill(redis_url: str) -> None:
    """500 series: 5 apps x 100 indexes, one judged event each."""
    settings = Settings.from_env({"REDIS_URL": redis_url}, dotenv=None)
    store = Store.connect(settings)
    for i in range(SERIES):
        labels = {"app": f"app{i // 100}", "index": f"idx{i % 100}", "retriever": "r",
                  "segment": "s"}  # fmt: skip
        store.client.hset(store.keys.event(event_ref(labels["app"], f"f{i}")), "s", "queued")
        grades = [3, 0, 1, 0, 2, 0, 0, 1, 0, 0]
        event = {"event_id": f"f{i}", "timestamp": "2026-11-20T10:00:00+00:00", "query": "q",
                 "k": 5, "labels": labels, "_received_at": time.time(),
                 "passages": [{"id": f"p{j}", "text": "t"} for j in range(10)]}  # fmt: skip
        store.finish(event, {"measures": compute(grades, 5), "labels": labels}, grades)
    store.client.close()


def scrapers(url: str, interval: float, seconds: float) -> list[float]:
    """Four scrapers, staggered, each every `interval` s for `seconds`: latencies in s."""

    async def one(offset: float, out: list[float]) -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            await asyncio.sleep(offset)
            end = time.monotonic() + seconds - offset
            while time.monotonic() < end:
                t0 = time.perf_counter()
                r = await client.get(url + "/metrics")
                r.raise_for_status()
                out.append(time.perf_counter() - t0)
                await asyncio.sleep(max(0.0, interval - (time.perf_counter() - t0)))

    async def main() -> list[float]:
        out: list[float] = []
        await asyncio.gather(*(one(i * interval / 4, out) for i in range(4)))
        return out

    return asyncio.run(main())


def scrape_times(url: str) -> tuple[float, float, int, int]:
    """The first scrape (it renders), the median of the next 3, size and lines."""
    with httpx.Client(timeout=60) as client:
        times, body = [], b""
        for _ in range(4):
            t0 = time.perf_counter()
            body = client.get(url + "/metrics").content
            times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[1:]), len(body), body.count(b"\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_metrics", description=__doc__)
    p.add_argument("--short", action="store_true", help="4 s phases, scrapes every 2 s (CI)")
    p.add_argument("--only", help="comma-separated options to run, of " + ",".join(OPTIONS))
    p.add_argument("--seconds", type=float, default=None, help="per phase (default 60)")
    p.add_argument("--interval", type=float, default=None, help="scrape interval (default 15)")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="events/s of the sender (default: half the measured maximum)",
    )
    p.add_argument("--aa", action="store_true",
                   help="A/A: no scrapers in the second phase either (noise)")  # fmt: skip
    p.add_argument("--scrape-only", nargs=3, metavar=("URL", "INTERVAL", "SECONDS"),
                   help=argparse.SUPPRESS)  # fmt: skip
    args = p.parse_args(argv)
    if args.scrape_only:
        url, interval, seconds = args.scrape_only
        print(json.dumps(scrapers(url, float(interval), float(seconds))))
        return 0
    exit_on_sigterm()
    seconds = args.seconds or (4.0 if args.short else 60.0)
    interval = args.interval or (2.0 if args.short else 15.0)
    print(machine())
    single = event_template(*topics(short=True)[0])
    verdicts = []
    with redis_server() as rs:
        fill(rs.url)
        print(f"{SERIES} series in Redis; phases of {seconds:g} s; 4 scrapers every {interval:g} s")
        rate = args.rate
        for name, (child, cached_on) in OPTIONS.items():
            if args.only and name not in args.only.split(","):
                continue
            # in --short the cache must expire within a phase, as 10 s does in 60 s phases
            refresh = str(min(10.0, interval)) if cached_on else "0"
            env = {
                "RAGMON_METRICS_PROCESS": str(child).lower(),
                "RAGMON_METRICS_REFRESH_S": refresh,
            }
            proc, url = start_api(ragmon_env(rs.url, **env))
            try:
                if rate is None:  # half of the maximum, measured once on the first server
                    peak = closed_load(url + "/v1/retrievals", single, min(seconds, 5.0), 32)
                    rate = peak.rps / 2
                    print(f"max {peak.rps:.0f} events/s single; half load {rate:.0f} events/s")
                # no scrape yet: nothing renders during the baseline
                base = asyncio.run(
                    open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds)
                )
                uncached, cached, size, lines = scrape_times(url)
                scraping = subprocess.Popen(
                    [sys.executable, "-m", "tests.bench.bench_metrics", "--scrape-only", url,
                     str(interval), str(0 if args.aa else seconds)],
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                loaded = asyncio.run(
                    open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds)
                )
                lat = json.loads(scraping.communicate(timeout=seconds + 120)[0]) or [0.0]
            finally:
                proc.stop()
            ratio = loaded.p99 / base.p99 if base.p99 else float("nan")
            ok = ratio <= TARGET and max(lat) <= 0.3
            verdicts.append(ok if name == "child-cached" else True)
            print(
                f"{name:20s} scrape {size / 1e6:.2f} MB / {lines} lines: first "
                f"{uncached * 1000:.0f} ms, next {cached * 1000:.1f} ms, under load max "
                f"{max(lat) * 1000:.0f} ms ({len(lat)} scrapes) | ingest p99 {base.p99 * 1000:.1f}"
                f" ms -> {loaded.p99 * 1000:.1f} ms with scrapers = {ratio:.2f}x "
                f"(p50 {base.p50 * 1000:.1f} -> {loaded.p50 * 1000:.1f} ms; errors "
                f"{base.errors + loaded.errors})"
            )
    print(f"targets (child-cached): scrapes under load <= 300 ms, p99 ratio <= {TARGET}: "
          f"{'met' if all(verdicts) else 'NOT met'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
