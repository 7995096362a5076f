"""/metrics against ingest: scrape time at 500 series, and what four scrapers do to the ingest
p99 at half load, for each way of rendering, all in one run.

    .venv/bin/python -m tests.bench.bench_metrics [--short] [--seconds 60] [--interval 15]

Redis holds 500 series of every quality histogram (5 apps x 100, one event each). Options, each
a fresh `ragmon serve` on that Redis:
  inline-every-scrape  the API renders in a thread on every scrape (before issue 14)
  inline-cached        rendered in a thread, kept RAGMON_METRICS_REFRESH_S (10 s)
  child-cached         rendered in a child process ahead of the scrapes, every 10 s (default)
Per option, phases with and without scrapers alternate (rounds of quiet/scraped, the order
flipped each round, so drift over the run falls on both sides). Each phase starts from the same
state: Redis flushed and refilled with the 500 series, a fresh `ragmon serve` (nothing renders
before its first scrape). In a phase an open-loop sender at half of ragmon's measured maximum
(single events, latency from each scheduled send) runs `--seconds`; a scraped phase first times
an uncached scrape and the median of 3 cached ones, then runs four scrapers (a process of their
own, each scraping every `--interval` s, staggered) beside the sender. Printed per round and
as the median over rounds: ingest p99 quiet, p99 scraped and their ratio (target <= 1.2), and
scrape latencies under load (target <= 300 ms).
--aa: no scrape in any phase (the ratio's noise). --short: 4 s phases, scrapes every 2 s, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
import redis

from ragmon.core.measures import compute
from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import Store
from tests.bench.common import (
    Bodies,
    Load,
    event_template,
    exit_on_sigterm,
    machine,
    open_loop,
    peak_single_rate,
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


def fresh(redis_url: str) -> None:
    """Every phase starts from the same Redis: the events of earlier phases (queued, no worker
    runs) would otherwise make each later phase slower than the one before."""
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    fill(redis_url)


@dataclass
class Scrapes:
    under_load: list[float] = field(default_factory=list)
    said: str = ""


def phase(
    redis_url: str,
    env: dict[str, str],
    single: str,
    rate: float,
    seconds: float,
    interval: float,
    scrape: bool,
) -> tuple[Load, Scrapes]:
    """One phase on a fresh server: the sender alone, or the sender beside four scrapers."""
    proc, url = start_api(ragmon_env(redis_url, **env))
    try:
        if not scrape:
            return asyncio.run(
                open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds)
            ), Scrapes()
        uncached, cached, size, lines = scrape_times(url)
        scraping = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.bench_metrics", "--scrape-only", url,
             str(interval), str(seconds)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        load = asyncio.run(open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds))
        lat = json.loads(scraping.communicate(timeout=seconds + 120)[0])
    finally:
        proc.stop()
    said = (
        f"; scrape {size / 1e6:.2f} MB / {lines} lines: first {uncached * 1000:.0f} ms, next "
        f"{cached * 1000:.1f} ms, under load max {max(lat or [0.0]) * 1000:.0f} ms"
    )
    return load, Scrapes(lat, said)


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
    p.add_argument("--rounds", type=int, default=None, help="quiet + scraped rounds (default 2)")
    p.add_argument("--aa", action="store_true",
                   help="A/A: no scrape in any phase (the noise of the ratio)")  # fmt: skip
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
    rounds = args.rounds or (1 if args.short else 2)
    print(machine())
    single = event_template(*topics(short=True)[0])
    verdicts = []
    with redis_server() as rs:
        print(f"{SERIES} series in Redis; phases of {seconds:g} s; 4 scrapers every {interval:g} s;"
              f" {rounds} round(s) of quiet + scraped phases")  # fmt: skip
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
            if rate is None:  # half of the maximum, measured once on a fresh server
                fresh(rs.url)
                peak = peak_single_rate(ragmon_env(rs.url, **env), single, seconds)
                rate = peak / 2
                print(f"max {peak:.0f} events/s single; half load {rate:.0f} events/s")
            quiet: list[float] = []
            scraped: list[float] = []
            lat: list[float] = []
            for r in range(rounds):
                for scrape in (False, True) if r % 2 == 0 else (True, False):
                    fresh(rs.url)
                    load, scrapes = phase(rs.url, env, single, rate, seconds, interval,
                                          scrape and not args.aa)  # fmt: skip
                    (scraped if scrape else quiet).append(load.p99)
                    lat += scrapes.under_load
                    print(f"  {name} round {r + 1} {'scraped' if scrape else 'quiet':7s} "
                          f"p99 {load.p99 * 1000:.1f} ms p50 {load.p50 * 1000:.1f} ms "
                          f"errors {load.errors}{scrapes.said}")  # fmt: skip
            ratio = statistics.median(scraped) / statistics.median(quiet)
            rounds_said = ", ".join(f"{b / a:.2f}x" for a, b in zip(quiet, scraped, strict=True))
            worst = max(lat or [0.0])
            ok = ratio <= TARGET and worst <= 0.3
            verdicts.append(ok if name == "child-cached" else True)
            print(
                f"{name:20s} ingest p99 (median of {rounds}) {statistics.median(quiet) * 1000:.1f}"
                f" ms quiet -> {statistics.median(scraped) * 1000:.1f} ms scraped = {ratio:.2f}x;"
                f" per round {rounds_said}; "
                f"scrapes under load max {worst * 1000:.0f} ms ({len(lat)} scrapes)"
            )
    print(f"targets (child-cached): scrapes under load <= 300 ms, p99 ratio <= {TARGET}: "
          f"{'met' if all(verdicts) else 'NOT met'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
