"""Explorer searches against a full index: p50/p95 of `GET /v1/retrievals` per kind of search,
with 200,000 judged events held and text storage off, over real HTTP to `ragmon serve`.

    .venv/bin/python -m tests.bench.bench_explorer [--events 200000] [--rounds 200] [--short]

Redis is filled as the workers leave it: each event's hash (status done, its series, a payload
of ids and hashes) and the explorer's index written by the workers' own script
(`ExploreIndex.index`), in pipelines of 500 for speed. 24 series (2 apps x 3 retrievers x 4
segments) over the 35 days of result retention; bm25 is the worst retriever. The baseline,
measured in the same run on the same server: `GET /v1/retrievals/{id}` of one event (a single
hash read). Printed per search: p50, p95 and p95 / baseline p95; the target is p95 <= 50 ms.
Also: Redis memory per event held, with and without the index. --short: 20,000 events.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime, timedelta

import httpx

from ragmon.core.measures import compute
from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.sealing import new_key
from tests.bench.common import exit_on_sigterm, machine, ms, pct
from tests.support.stack import ragmon_env, redis_server, start_api

APPS = ("shop", "support")
RETRIEVERS = {"bm25": 0.35, "dense": 0.55, "hybrid": 0.7}  # share of relevant passages
SEGMENTS = ("billing", "account", "technical", "other")
K = 10
RETENTION_DAYS = 35


def fill(store: Store, n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """Write `n` judged events and their index; returns (app, event id, trace id) samples."""
    now = datetime.now(UTC)
    samples = []
    for start in range(0, n, 500):
        with store.client.pipeline(transaction=False) as pipe:
            for i in range(start, min(n, start + 500)):
                app, retriever = rng.choice(APPS), rng.choice(list(RETRIEVERS))
                labels = {"app": app, "index": "kb", "retriever": retriever}
                labels["segment"] = rng.choice(SEGMENTS)
                series = "|".join(labels[k] for k in ("app", "index", "retriever", "segment"))
                ts = now - timedelta(seconds=rng.uniform(0, RETENTION_DAYS * 86400 - 3600))
                p = RETRIEVERS[retriever]
                grades = [rng.choice((2, 3)) if rng.random() < p else 0 for _ in range(K)]
                event_id, trace = f"ev-{i}", f"trace-{i}"
                event = {
                    "event_id": event_id,
                    "timestamp": ts.isoformat(),
                    "k": K,
                    "labels": labels,
                    "trace_id": trace,
                    "query": {"sha": f"{rng.getrandbits(64):016x}"},
                    "passages": [
                        {"id": f"p{rng.randrange(10**6)}", "text_sha": f"{rng.getrandbits(64):x}"}
                        for _ in range(K)
                    ],
                }
                result = {
                    "event_id": event_id,
                    "status": "done",
                    "labels": labels,
                    "measures": compute(grades, K),
                    "grades": grades,
                    "grade_source": ["judge"] * K,
                }
                ref = event_ref(app, event_id)
                key = store.keys.event(ref)
                pipe.hset(key, mapping={
                    "s": "done", "sr": series, "rt": ts.timestamp(),
                    "p": json.dumps(event), "r": json.dumps(result),
                })  # fmt: skip
                pipe.expire(key, store.result_ttl_s)
                store.explore.index(pipe, event, result)
                if i % 997 == 0:
                    samples.append((app, event_id, trace))
            pipe.execute()
        if start % 20_000 == 0:
            print(f"  filled {start:,} of {n:,}", flush=True)
    return samples


def memory(store: Store) -> int:
    return int(store.client.info("memory")["used_memory"])


def index_bytes(store: Store) -> int:
    """Bytes of the explorer's keys (MEMORY USAGE, sampled exactly)."""
    total = 0
    for key in store.client.scan_iter(f"{store.keys.prefix}:x:*", count=1000):
        total += int(store.client.memory_usage(key, samples=0) or 0)
    return total


def timed(client: httpx.Client, path: str, params: dict[str, str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = client.get(path, params=params)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed, r.json()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--short", action="store_true", help="20,000 events, 50 rounds")
    args = parser.parse_args(argv)
    if args.short:
        args.events, args.rounds = 20_000, 50
    exit_on_sigterm()
    print(machine())
    rng = random.Random(2026)
    text_key = new_key()
    with redis_server() as redis:
        settings = Settings.from_env(
            {"REDIS_URL": redis.url, "RAGMON_STORE_TEXT": "false", "RAGMON_TEXT_KEYS": text_key},
            dotenv=None,
        )
        store = Store.connect(settings)
        before = memory(store)
        t0 = time.monotonic()
        samples = fill(store, args.events, rng)
        print(f"filled {args.events:,} events in {time.monotonic() - t0:.0f} s")
        used, index = memory(store) - before, index_bytes(store)
        print(
            f"Redis memory: {used / args.events:.0f} bytes per event held, of which the "
            f"explorer's index {index / args.events:.0f} ({index / used:.0%})"
        )
        env = ragmon_env(redis.url, RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=text_key)
        proc, url = start_api(env)
        try:
            client = httpx.Client(base_url=url, timeout=30)
            day = str(round((time.time() - 86400) * 1000))
            searches: dict[str, dict[str, str]] = {
                "newest 50, all series": {},
                "bm25, nDCG < 0.3, newest first": {"retriever": "bm25", "ndcg_lt": "0.3"},
                "one app, worst nDCG first": {"app": "shop", "sort": "ndcg"},
                "misses (hit = 0), last 24 h": {"hit": "0", "from": day},
                "one series, T < 0, by T": {
                    "app": "shop", "index": "kb", "retriever": "bm25", "segment": "billing",
                    "t_lt": "0", "sort": "t",
                },
                "rare: nDCG < 0.3 and P@K > 0.5": {"ndcg_lt": "0.3", "precision_gt": "0.5"},
            }  # fmt: skip
            baseline: list[float] = []
            times: dict[str, list[float]] = {name: [] for name in searches}
            times["page 2-5 (cursor), bm25 nDCG < 0.3"] = []
            times["trace_id lookup"] = []
            scanned: dict[str, list[int]] = {name: [] for name in times}
            for r in range(args.rounds):
                app, event_id, trace = samples[r % len(samples)]
                t, _ = timed(client, f"/v1/retrievals/{event_id}", {"app": app})
                baseline.append(t)
                for name, params in searches.items():
                    t, body = timed(client, "/v1/retrievals", params)
                    times[name].append(t)
                    scanned[name].append(body["scanned"])
                cursor = client.get(
                    "/v1/retrievals", params=searches["bm25, nDCG < 0.3, newest first"]
                ).json()["next_cursor"]
                for _ in range(4):
                    if not cursor:
                        break
                    params = {**searches["bm25, nDCG < 0.3, newest first"], "cursor": cursor}
                    t, body = timed(client, "/v1/retrievals", params)
                    times["page 2-5 (cursor), bm25 nDCG < 0.3"].append(t)
                    scanned["page 2-5 (cursor), bm25 nDCG < 0.3"].append(body["scanned"])
                    cursor = body["next_cursor"]
                t, body = timed(client, "/v1/retrievals", {"trace_id": trace})
                assert [e["event_id"] for e in body["events"]] == [event_id]
                times["trace_id lookup"].append(t)
                scanned["trace_id lookup"].append(body["scanned"])
        finally:
            proc.stop()
    base95 = pct(baseline, 95)
    print(f"\n{args.events:,} events held, {args.rounds} rounds; baseline GET one event: "
          f"p50 {ms(pct(baseline, 50))} ms, p95 {ms(base95)} ms")  # fmt: skip
    head = f"{'search':42} {'p50 ms':>7} {'p95 ms':>7} {'p95/base':>8} {'read':>6}"
    print(head + "  target p95 <= 50 ms")
    for name, values in times.items():
        p95 = pct(values, 95)
        mark = "ok" if p95 <= 0.050 else "MISSED"
        read = sorted(scanned[name])[len(scanned[name]) // 2] if scanned[name] else 0
        cols = f"{ms(pct(values, 50)):>7} {ms(p95):>7} {p95 / base95:>8.1f} {read:>6}"
        print(f"{name:42} {cols}  {mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
