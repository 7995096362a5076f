"""How long another app's single event waits in Redis for a large request's write: appA's
1,000-event requests written back to back from a process of their own (half of them naming a
new series per event), as one INGEST call each (as before the staged write) and staged
(`ragmon.store.staged`, as the API writes them), against a quiet phase; appB's single
`Store.ingest` calls meanwhile. Phases alternate in rounds on one Redis, no API in between.

    .venv/bin/python -m tests.bench.bench_script_wait [--short] [--seconds 6] [--rounds 2]

Printed per phase: appB's p50 / p99 / max and the longest Lua script in Redis' slow log.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from dataclasses import replace
from multiprocessing.synchronize import Event

import redis

from ragmon.api.schemas import RetrievalBatch, RetrievalEvent
from ragmon.api.service import prepare_events
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.sealing import Sealer
from tests.bench.common import exit_on_sigterm, machine, ms, pct
from tests.support.events import make_event
from tests.support.stack import ragmon_env, redis_server

PHASES = ("quiet", "one INGEST call", "staged")


def requests(settings: Settings, n: int, size: int) -> list[list[IngestItem]]:
    """appA's requests, prepared as the API does; odd ones name a new series per event."""
    out = []
    for r in range(n):
        new = r % 2 == 1
        events = [make_event(n=1 if new else 5, k=1, seed=j,
                             labels={"app": "appA", **({"index": f"s{r}-{j}"} if new else {})})
                  for j in range(size)]  # fmt: skip
        body = json.dumps({"events": events}).encode()
        out.append(prepare_events(settings, body, RetrievalBatch, "appA", Sealer(settings)))
    return out


def flood(url: str, settings: Settings, phase: str, pool: list, stop: Event) -> None:
    """appA: `pool`'s requests back to back, each under new ids, until `stop`."""
    store = Store(redis.Redis.from_url(url), settings)
    n = 0
    while not stop.is_set():
        n += 1
        items = [replace(it, event_id=f"{phase}-{n}-{it.event_id}") for it in pool[n % len(pool)]]
        if phase == "staged":
            store.ingest_staged(items)
        else:
            store.ingest(items, enqueue=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_script_wait", description=__doc__)
    p.add_argument("--seconds", type=float, default=6.0, help="per phase (default 6)")
    p.add_argument("--rounds", type=int, default=2, help="of the three phases (default 2)")
    p.add_argument("--short", action="store_true", help="1 s phases, one round (the test's)")
    args = p.parse_args(argv)
    size = 1000
    if args.short:
        args.seconds, args.rounds, size = 1.0, 1, 200
    exit_on_sigterm()
    print(machine())
    with redis_server() as rs:
        env = ragmon_env(rs.url, RAGMON_QUEUE_LIMIT=str(10**9))
        settings = Settings.from_env(env, dotenv=None)
        store = Store(redis.Redis.from_url(rs.url), settings)
        pool = requests(settings, 4, size)
        n = 0
        for _ in range(args.rounds):
            for phase in PHASES:
                stop = mp.get_context("fork").Event()
                appa = mp.get_context("fork").Process(
                    target=flood, args=(rs.url, settings, phase, pool, stop)
                )
                if phase != "quiet":
                    appa.start()
                store.client.config_set("slowlog-log-slower-than", 1000)
                store.client.slowlog_reset()
                waits, end = [], time.monotonic() + args.seconds
                while time.monotonic() < end:
                    n += 1
                    one = make_event(n=3, k=2, seed=n, labels={"app": "appB"})
                    items = prepare_events(settings, json.dumps(one).encode(), RetrievalEvent,
                                           "appB", store.sealer)  # fmt: skip
                    t0 = time.perf_counter()
                    store.ingest(items, enqueue=False)
                    waits.append(time.perf_counter() - t0)
                    time.sleep(0.002)
                stop.set()
                if phase != "quiet":
                    appa.join()
                log = store.client.slowlog_get(1024)
                longest = max((e["duration"] / 1e6 for e in log
                               if e["command"].startswith(b"EVAL")), default=0.0)  # fmt: skip
                print(f"{phase:16s} appB's event p50 {ms(pct(waits, 50))} p99 "
                      f"{ms(pct(waits, 99))} max {ms(max(waits))} ms (n={len(waits)}); "
                      f"longest script {ms(longest)} ms")  # fmt: skip
        store.client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
