"""A compressed memory soak (issue 43): retention windows of minutes standing for days, at a
steady rate, for `--minutes`; Redis memory sampled throughout beside the ledger's forecast.

    .venv/bin/python -m tests.bench.soak_memory [--minutes 30] [--rate 300] [--sample-rate 0.01]

A Redis of its own, the API and one worker (lexical judge), with RAGMON_IDEMPOTENCY_S=60,
RAGMON_TEXT_TTL_DAYS of 3 minutes and RAGMON_RESULT_TTL_DAYS=0.01 (about 14 minutes), a fixed
RAGMON_SAMPLE_RATE so that judged events flow steadily through every class. A sender posts
batches of events (K = 5, 10 passages, about 2 KB) at `--rate` events a second over 10 series
of one app. Every 15 s: Redis' used_memory, what the ledger holds and forecasts, and the bytes
of the day's per-day record list (which grows through its day by design, up to 50,000 records
per app: it is reported apart). At the end the sender stops, the workers finish, and every
accepted event must be counted once: received = accepted, sampled out + judged + failed =
received. Reported: memory over the last windows (flat?), the forecast made at minute 5
against the steady state measured at the end, exactly-once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any

import httpx
import redis

from ragmon.settings import Settings
from ragmon.store.keys import Keys
from ragmon.store.ledger import Ledger
from tests.bench.bench_memory import idle
from tests.bench.common import machine
from tests.support.stack import RedisServer, Stack

ENV = {
    "RAGMON_JUDGE": "lexical",
    "RAGMON_IDEMPOTENCY_S": "60",
    "RAGMON_TEXT_TTL_DAYS": repr(180 / 86400),
    "RAGMON_RESULT_TTL_DAYS": "0.01",
}
WORDS = "retrieval augmented generation answers from the passages it is given "


def event(i: int) -> dict[str, Any]:
    return {
        "event_id": f"s{i}-{uuid.uuid4().hex[:10]}",
        "query": f"question {i % 5000} about the product manual",
        "k": 5,
        "passages": [
            {"id": f"d{(i * 3 + j) % 20_000}", "text": f"{j} {WORDS * 2}", "score": 1 / (j + 1)}
            for j in range(10)
        ],
        "labels": {"app": "soak", "retriever": f"r{i % 10}"},
    }


class Sender(threading.Thread):
    """Posts `rate` events a second in batches every 0.1 s; counts what was accepted."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.url, self.rate = url, rate
        self.stop = threading.Event()
        self.accepted = 0
        self.refused: dict[int, int] = {}
        self.sent = 0

    def run(self) -> None:
        per = max(1, round(self.rate / 10))
        start = time.monotonic()
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                batch = [event(self.sent + i) for i in range(per)]
                r = client.post("/v1/retrievals/batch", json={"events": batch})
                self.sent += per
                if r.status_code == 202:
                    self.accepted += len(r.json()["results"])  # ids all new
                else:
                    self.refused[r.status_code] = self.refused.get(r.status_code, 0) + per
                wait = start + self.sent / self.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)


def counters(client: redis.Redis) -> dict[str, int]:
    raw = client.hgetall("ragmon:c")
    out = {k.decode(): float(v) for k, v in raw.items()}
    return {
        "received": int(out.get("events_received", 0)),
        "sampled_out": int(out.get("events_sampled_out", 0)),
        "labeled": int(out.get("events_labeled", 0)),
        "failed": int(sum(v for k, v in out.items() if k.startswith("events_failed"))),
    }


def run(minutes: float, rate: float, sample_rate: float) -> dict[str, Any]:
    env = {**ENV, "RAGMON_SAMPLE_RATE": repr(sample_rate)}
    settings = Settings.from_env(env, dotenv=None)
    server = RedisServer().start()
    samples: list[dict[str, float]] = []
    try:
        client = redis.Redis.from_url(server.url)
        ledger = Ledger(client, Keys(), settings)
        stack = Stack(server.url, workers=1, env=env).start()
        try:
            base = int(client.info("memory")["used_memory"])
            sender = Sender(stack.url, rate)
            t0 = time.monotonic()
            sender.start()
            while time.monotonic() - t0 < minutes * 60:
                time.sleep(15)
                memory = ledger.memory(time.time())
                day_lists = sum(
                    int(client.memory_usage(k) or 0) for k in client.scan_iter("ragmon:day:*:ev:*")
                )
                samples.append({
                    "minute": round((time.monotonic() - t0) / 60, 2),
                    "used": memory.used - base, "day_lists": day_lists,
                    "held": memory.reading.held_total,
                    "forecast": memory.forecast - base,
                    "accepted_per_s": sender.accepted / (time.monotonic() - t0),
                })  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
            sender.stop.set()
            sender.join()
            idle(client)
            final = counters(client)
        finally:
            stack.stop()
    finally:
        server.stop()
    window = settings.result_ttl_days * 86400 / 60  # minutes until every window is full
    steady = [s for s in samples if s["minute"] > window + 2]
    early = min(samples, key=lambda s: abs(s["minute"] - 5))
    flat = [s["used"] - s["day_lists"] for s in steady]
    half = len(flat) // 2
    measured = statistics.mean(flat) if flat else float("nan")
    return {
        "minutes": minutes,
        "rate_asked": rate,
        "accepted_per_s": round(sender.accepted / (minutes * 60), 1),
        "refused": sender.refused,
        "steady_from_minute": round(window + 2, 1),
        "used_minus_day_lists_mb": {
            "first_half": round(statistics.mean(flat[:half]) / 2**20, 2) if half else None,
            "second_half": round(statistics.mean(flat[half:]) / 2**20, 2) if half else None,
        },
        "day_lists_mb_at_end": round(samples[-1]["day_lists"] / 2**20, 2),
        "forecast_at_minute_5_mb": round(early["forecast"] / 2**20, 2),
        "steady_state_mb": round(measured / 2**20, 2),
        "forecast_error": (
            round((early["forecast"] - early["day_lists"]) / measured - 1, 3) if flat else None
        ),
        "exactly_once": {
            "accepted": sender.accepted,
            **final,
            "ok": final["received"] == sender.accepted
            and final["sampled_out"] + final["labeled"] + final["failed"] == final["received"],
        },  # fmt: skip
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--sample-rate", type=float, default=0.01)
    args = ap.parse_args(argv)
    print(machine())
    print(json.dumps(run(args.minutes, args.rate, args.sample_rate), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
