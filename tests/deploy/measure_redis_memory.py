"""Measure Redis memory per judged event with the real stack (for deploy/README.md, sizing).

    .venv/bin/python -m tests.deploy.measure_redis_memory [--events 2000] [--passages 10]

Starts a private Redis, `ragmon serve` and two `ragmon worker`s (lexical judge), sends
`--events` events of `--passages` passages of ~150 words each, waits until all are done, and
prints Redis `used_memory` growth per event, with passage texts stored (the default) and not
(RAGMON_STORE_TEXT=false). Not a test: it takes about a minute.
"""

from __future__ import annotations

import argparse
import random
import uuid

import redis

from ragmon.store.sealing import new_key
from tests.support.stack import RedisServer, Stack

WORDS = [
    "account",
    "password",
    "reset",
    "invoice",
    "refund",
    "billing",
    "sync",
    "error",
    "login",
    "token",
    "quota",
    "api",
    "limit",
    "request",
    "server",
    "client",
    "cache",
    "index",
    "vector",
    "search",
    "query",
    "answer",
    "support",
    "customer",
    "plan",
    "upgrade",
    "export",
    "report",
    "team",
    "admin",
    "role",
    "permission",
    "webhook",
    "latency",
    "region",
    "backup",
    "restore",
]


def make_events(n: int, passages: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    events = []
    for i in range(n):
        query = " ".join(rng.choices(WORDS, k=8))
        events.append(
            {
                "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
                "query": query,
                "k": passages // 2,
                "passages": [
                    {"id": f"doc-{i}-{j}", "text": " ".join(rng.choices(WORDS, k=150))}
                    for j in range(passages)
                ],
                "labels": {"app": "sizing", "retriever": ("bm25", "dense")[i % 2]},
            }
        )
    return events


def measure(events: list[dict], store_text: bool) -> tuple[int, int]:
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    stack = Stack(
        server.url,
        workers=2,
        env={"RAGMON_STORE_TEXT": str(store_text).lower(), "RAGMON_TEXT_KEYS": new_key()},
    )
    try:
        stack.start()
        before = client.info("memory")["used_memory"]
        stack.post(events)
        stack.wait_done([e["event_id"] for e in events], timeout=600, app="sizing")
        client.execute_command("MEMORY", "PURGE")
        after = client.info("memory")["used_memory"]
        return after - before, client.dbsize()
    finally:
        stack.stop()
        client.close()
        server.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--passages", type=int, default=10)
    args = ap.parse_args()
    events = make_events(args.events, args.passages)
    text_bytes = sum(len(p["text"]) for e in events for p in e["passages"]) / len(events)
    print(f"{args.events} events, {args.passages} passages, {text_bytes:.0f} bytes of text each")
    for store_text in (True, False):
        grown, keys = measure(events, store_text)
        per_event = grown / args.events
        print(
            f"RAGMON_STORE_TEXT={str(store_text).lower():5s}: {per_event:8.0f} bytes/event "
            f"= {per_event * 1e6 / 2**30:6.2f} GiB per million events ({keys} keys)"
        )


if __name__ == "__main__":
    main()
