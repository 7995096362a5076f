"""One app's explorer against another app's ingest: the ingest p99 of app `bench` while four
clients load app `big`'s explorer overview (`/ui?app=big`) back to back, against the same
sender alone, in one run.

    .venv/bin/python -m tests.bench.bench_tenants [--short] [--series 100] [--seconds 30]

Redis holds `--series` series of app `big` (one index each), 48 judged events per series
spread over the overview's 8 days of hours (so each series has hourly sums in most of its 192
hours), written by the workers' own finish step; app `shop` holds as many, which `big`'s page
must never read. Each phase starts from that state on a fresh `ragmon serve` (no worker: the
sender's events stay queued). In a phase an open-loop sender posts single events of app
`bench` at `--rate` events/s (default: a quarter of the measured maximum) for `--seconds`; a
loaded phase runs four explorer clients beside it (`page_clients`: a process of their own,
closed loop, started and ready before the sender), after one warm-up load of the page (which
starts the API's pages child). Phases alternate quiet/loaded, the order flipped each round.
Printed per round and as the median over rounds: ingest p99 quiet and loaded, their ratio
(target <= 1.5, issue 33: 16 ms -> 5.3 s before) and the page's latency under load; then the
CPU a page costs the API process and its children (the loaded phases' CPU beyond the quiet
phases', per page loaded: steadier than the p99s on a shared machine).
--short: 20 series, 5 s phases, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx
import psutil
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

TARGET = 1.5
EVENTS_PER_SERIES = 48
PAGE = "/ui?app=big"


def fill(redis_url: str, series: int) -> None:
    """`series` series of `big` and of `shop`, EVENTS_PER_SERIES events each over 8 days."""
    settings = Settings.from_env({"REDIS_URL": redis_url, "RAGMON_MAX_SERIES": "100000",
                                  "RAGMON_MAX_SERIES_PER_APP": "100000"}, dotenv=None)  # fmt: skip
    store = Store.connect(settings)
    now = time.time()
    grades = [3, 0, 1, 0, 2, 0, 0, 1, 0, 0]
    measures = compute(grades, 5)
    for app in ("big", "shop"):
        for s in range(series):
            labels = {"app": app, "index": f"idx{s}", "retriever": "r", "segment": "s"}
            for i in range(EVENTS_PER_SERIES):
                event_id = f"f{s}-{i}"
                ts = datetime.fromtimestamp(now - (i * 4 + s % 4) * 3600 - 60, UTC)
                store.client.hset(store.keys.event(event_ref(app, event_id)), "s", "queued")
                event = {"event_id": event_id, "timestamp": ts.isoformat(), "query": "q",
                         "k": 5, "labels": labels, "_received_at": now,
                         "passages": [{"id": f"p{j}", "text": "t"} for j in range(10)]}  # fmt: skip
                store.finish(event, {"measures": measures, "labels": labels}, grades)
    store.client.close()


def spent(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, float]:
    return after[0] - before[0], after[1] - before[1]


def cpu_s(proc: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user + system) of the API process and of its children (the pages child)."""
    own = sum(proc.cpu_times()[:2])
    return own, sum(sum(c.cpu_times()[:2]) for c in proc.children(recursive=True))


def phase(
    redis_url: str, single: str, rate: float, seconds: float, loaded: bool
) -> tuple[Load, list[float], float, tuple[float, float]]:
    """One phase on a fresh server: the sender alone, or beside four explorer clients.
    Returns the sender's load, the page latencies under load, the first (warm-up) load and
    the CPU seconds the API process and its children spent while the sender ran."""
    proc, url = start_api(ragmon_env(redis_url))
    api = psutil.Process(proc.pid)
    try:
        if not loaded:
            before = cpu_s(api)
            load = asyncio.run(
                open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds)
            )
            return load, [], 0.0, spent(before, cpu_s(api))
        with httpx.Client(timeout=120) as client:
            t0 = time.perf_counter()
            client.get(url + PAGE).raise_for_status()
            first = time.perf_counter() - t0
        clients = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.page_clients", url + PAGE, "4", str(seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert clients.stdin is not None and clients.stdout is not None
        assert clients.stdout.readline().strip() == "ready"  # started before the sender
        before = cpu_s(api)
        clients.stdin.write("go\n")
        clients.stdin.flush()
        load = asyncio.run(open_loop(url + "/v1/retrievals", Bodies(single).next, rate, seconds))
        lat = json.loads(clients.communicate(timeout=seconds + 300)[0])
        return load, lat, first, spent(before, cpu_s(api))
    finally:
        proc.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_tenants", description=__doc__)
    p.add_argument("--short", action="store_true", help="20 series, 5 s phases, one round")
    p.add_argument("--series", type=int, default=None, help="series of app big (default 100)")
    p.add_argument("--seconds", type=float, default=None, help="per phase (default 30)")
    p.add_argument(
        "--rate", type=float, default=None, help="events/s of the sender (default: max / 4)"
    )
    p.add_argument("--rounds", type=int, default=None, help="quiet + loaded rounds (default 2)")
    args = p.parse_args(argv)
    exit_on_sigterm()
    series = args.series or (20 if args.short else 100)
    seconds = args.seconds or (5.0 if args.short else 30.0)
    rounds = args.rounds or (1 if args.short else 2)
    print(machine())
    single = event_template(*topics(short=True)[0])
    with redis_server() as rs:
        t0 = time.perf_counter()
        fill(rs.url, series)
        print(f"{series} series of app big and of app shop, {EVENTS_PER_SERIES} events each, "
              f"written in {time.perf_counter() - t0:.0f} s; phases of {seconds:g} s; "
              f"{rounds} round(s)")  # fmt: skip
        snapshot = redis.Redis.from_url(rs.url)
        dump = {k: snapshot.dump(k) for k in snapshot.scan_iter("*")}  # each phase from here
        rate = args.rate
        if rate is None:
            peak = peak_single_rate(ragmon_env(rs.url), single, seconds)
            rate = peak / 4
            print(f"max {peak:.0f} events/s single; a quarter: {rate:.0f} events/s")
        quiet: list[float] = []
        loaded: list[float] = []
        pages: list[float] = []
        cpu: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(rounds):
            for with_explorer in (False, True) if r % 2 == 0 else (True, False):
                snapshot.flushdb()
                for k, v in dump.items():
                    snapshot.restore(k, 0, v)
                load, lat, first, used = phase(rs.url, single, rate, seconds, with_explorer)
                (loaded if with_explorer else quiet).append(load.p99)
                pages += lat
                cpu[with_explorer].append(used)
                said = (f"; page first {first * 1000:.0f} ms, under load p50 "
                        f"{statistics.median(lat) * 1000:.0f} ms max {max(lat) * 1000:.0f} ms "
                        f"({len(lat)} loads)") if lat else ""  # fmt: skip
                print(f"  round {r + 1} {'loaded' if with_explorer else 'quiet':6s} p99 "
                      f"{load.p99 * 1000:.1f} ms p50 {load.p50 * 1000:.1f} ms errors "
                      f"{load.errors}{said}")  # fmt: skip
        snapshot.close()
    ratio = statistics.median(loaded) / statistics.median(quiet)
    per_round = ", ".join(f"{b / a:.2f}x" for a, b in zip(quiet, loaded, strict=True))
    print(f"app bench's ingest p99 (median of {rounds}) {statistics.median(quiet) * 1000:.1f} ms "
          f"quiet -> {statistics.median(loaded) * 1000:.1f} ms while app big's explorer loads "
          f"from 4 clients = {ratio:.2f}x; per round {per_round}; page under load p50 "
          f"{statistics.median(pages) * 1000:.0f} ms ({len(pages)} loads)")  # fmt: skip
    # what a page costs where: the loaded phases' CPU beyond the quiet phases' (same sender)
    own, kids = ((sum(c[i] for c in cpu[True]) - sum(c[i] for c in cpu[False])) / len(pages)
                 for i in (0, 1))  # fmt: skip
    print(f"CPU a page beyond the sender's: the API process {own * 1000:.1f} ms, its children "
          f"(the pages child, nice 19) {kids * 1000:.1f} ms")  # fmt: skip
    print(f"target: ratio <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
