"""Redis bytes per accepted event on the defaults (issue 43), every class of event counted.

    .venv/bin/python -m tests.bench.bench_memory [--events 20000] [--compare]

A Redis of its own, the API and one worker (lexical judge: what is kept does not depend on the
judge) on the defaults: planned sampling, RAGMON_IDEMPOTENCY_S, RAGMON_TEXT_TTL_DAYS,
RAGMON_RESULT_TTL_DAYS. One large series first sends 2,000 events and the plan is made (the
plan has seen it, and its first planning interval is over); then `--events` events of about
10 KB (K = 10, 20 passages) of that series, and 50 of a small series beside it, in batches of
100. Once the workers are idle: Redis'
used_memory grown, per accepted event (every class: the keys of events not judged, within
their idempotency window, the judged ones' texts and records, the aggregates), the ledger's
count by class beside it, and whether the small series was judged whole.
`--compare` runs the same with RAGMON_SAMPLING=fixed RAGMON_SAMPLE_RATE=1 (every event judged
and kept whole: the defaults before) on a tenth of the events.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import redis

from ragmon.settings import Settings
from ragmon.store.keys import Keys
from ragmon.store.ledger import Ledger
from tests.bench.common import machine
from tests.support.stack import RedisServer, Stack

TEXT = "the quick brown fox jumps over the lazy dog and reads the manual again " * 7


def event(series: str, i: int, app: str = "bench") -> dict[str, Any]:
    """About 10 KB: a query and 20 passages of ~490 characters."""
    return {
        "event_id": f"{series}-{i}-{uuid.uuid4().hex[:8]}",
        "query": f"how do I configure feature {i % 997} of the {series} product",
        "k": 10,
        "passages": [
            {"id": f"doc-{(i * 7 + j) % 50_000}", "text": f"{j} {i} {TEXT}", "score": 1 / (j + 1)}
            for j in range(20)
        ],
        "labels": {"app": app, "retriever": series},
    }


def post_all(stack: Stack, events: list[dict]) -> list[dict]:
    out = []
    for i in range(0, len(events), 100):
        r = stack.client.post("/v1/retrievals/batch", json={"events": events[i : i + 100]})
        r.raise_for_status()
        out += r.json()["results"]
    return out


def idle(client: redis.Redis, timeout: float = 900) -> None:
    """Until no event waits or is leased (the workers are done). Its SCAN steps are large: a
    step of 10 keys cost Redis more CPU than the events it waits for (bench_capacity)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        keys = client.scan_iter("ragmon:q:ev:*", count=10_000)
        pending = sum(int(client.zcard(k)) for k in keys)
        if pending == 0 and client.zcard("ragmon:leased") == 0:
            return
        time.sleep(1)
    raise TimeoutError("the workers did not finish")


def held_by_class(client: redis.Redis, env: dict[str, str]) -> dict[str, float]:
    """What the ledger counts, by class, over every app."""
    settings = Settings.from_env({"RAGMON_JUDGE": "lexical", **env}, dotenv=None)
    reading = Ledger(client, Keys(), settings).read(time.time())
    out: dict[str, float] = {}
    for by_kind in reading.held.values():
        for kind, n in by_kind.items():
            out[kind.value] = out.get(kind.value, 0.0) + n
    return out


def run(n: int, env: dict[str, str]) -> dict[str, Any]:
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        stack = Stack(server.url, workers=1, env={"RAGMON_JUDGE": "lexical", **env}).start()
        try:
            post_all(stack, [event("large", -1 - i) for i in range(2000)])
            # the plan is made within seconds of a new series (READ_S); the next planning
            # interval starts with the large series' cold start (its app's cap) behind it
            time.sleep(61)
            idle(client)
            base = int(client.info("memory")["used_memory"])
            held0 = held_by_class(client, env)
            t0 = time.monotonic()
            large = post_all(stack, [event("large", i) for i in range(n)])
            small_events = [event("small", i) for i in range(50)]
            small = post_all(stack, small_events)
            seconds = time.monotonic() - t0
            idle(client)
            grown = int(client.info("memory")["used_memory"]) - base
            held1 = held_by_class(client, env)
            statuses = [
                stack.client.get(f"/v1/retrievals/{e['event_id']}", params={"app": "bench"}).json()[
                    "status"
                ]
                for e in small_events
            ]
            judged = sum(1 for r in large if r["status"] != "sampled_out")
        finally:
            stack.stop()
    finally:
        server.stop()
    accepted = len(large) + len(small)
    return {
        "accepted": accepted,
        "seconds": round(seconds, 1),
        "large_judged": judged,
        "redis_bytes_per_event": round(grown / accepted),
        "ledger_bytes_per_event": {
            k: round((held1.get(k, 0) - held0.get(k, 0)) / accepted) for k in sorted(held1)
        },
        "small_series": {s: statuses.count(s) for s in set(statuses)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--compare", action="store_true")
    args = ap.parse_args(argv)
    print(machine())
    out = {"defaults": run(args.events, {})}
    if args.compare:
        before = {"RAGMON_SAMPLING": "fixed", "RAGMON_SAMPLE_RATE": "1"}
        out["every event judged"] = run(args.events // 10, before)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
