"""CPU per event of the API, Redis and the workers, and the fleet each rate needs (issue 49).

    .venv/bin/python -m tests.bench.bench_capacity [--events 4000] [--short]

A Redis of its own, the API and one worker judging through the scripted local OpenAI-protocol
server (`tests.support.fake_llm`: the worker's HTTP stack is most of its CPU per passage). Two
phases of `--events` events of about 10 KB (K = 10, 20 passages) over 20 series, in batches
of 100:

  ingest   RAGMON_SAMPLING=fixed at a rate of 10^-6: every event accepted, none judged
  judged   RAGMON_SAMPLING=fixed at rate 1: every event judged (10 passages each, pointwise)

Per phase, once the workers are idle: the CPU seconds the API (with its decoding child), Redis
(`INFO cpu`, main thread and forks) and the workers (with their work horses) spent, per
accepted event, less what each spends with no traffic (its timers, polls and heartbeats,
measured for 10 s before the phase, in the same run). The judged phase less the ingest phase
is the cost of judging one event. From those, the model printed at the end: API processes,
worker processes and Redis primaries for 100, 1,000 and 10,000 events/s with a share judged,
each process planned at `--headroom` of a CPU (Redis is single-threaded: one CPU per
primary). Memory per event class comes from `bench_memory`; the model and its use are in
deploy/README.md ("Capacity").
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import redis

from tests.bench.bench_memory import event, idle, post_all
from tests.bench.common import cpu_of, machine
from tests.support.fake_llm import FakeLLM
from tests.support.stack import RedisServer, Stack

SERIES = 20
RATES = (100, 1_000, 10_000)  # events/s the model sizes for
JUDGED_SHARES = (0.01, 0.1)  # of those events, judged (the defaults judge a few per series)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    keys = ("used_cpu_user", "used_cpu_sys", "used_cpu_user_children", "used_cpu_sys_children")
    return sum(float(info[k]) for k in keys)


def phase(n: int, env: dict[str, str], fake: FakeLLM, quiet_s: float) -> dict[str, Any]:
    """CPU seconds per accepted event of each part, for `n` events sent with `env`, less what
    the part spends with no traffic (measured for `quiet_s` before)."""
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        judge = {"RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": fake.url,
                 "OPENAI_API_KEY": "sk-bench", "RAGMON_JUDGE_MODEL": "gpt-4o-mini"}  # fmt: skip
        stack = Stack(server.url, workers=1, env={**judge, **env}).start()
        try:
            assert stack.api is not None
            post_all(stack, [event(f"s{i % SERIES}", -1 - i) for i in range(min(200, n))])  # warm
            idle(client)
            workers = [w.pid for w in stack.workers]

            def cpus() -> tuple[float, float, float]:
                return (cpu_of(stack.api.pid), redis_cpu(client),  # type: ignore[union-attr]
                        sum(cpu_of(p) for p in workers))  # fmt: skip

            quiet0, t0 = cpus(), time.monotonic()
            time.sleep(quiet_s)  # the baseline: what each part spends with no traffic
            quiet1, t1 = cpus(), time.monotonic()
            post_all(stack, [event(f"s{i % SERIES}", i) for i in range(n)])
            idle(client)
            t2, busy = time.monotonic(), cpus()
        finally:
            stack.stop()
    finally:
        server.stop()
    per_s = [(b - a) / (t1 - t0) for a, b in zip(quiet0, quiet1, strict=True)]
    api, red, work = (
        max(0.0, b - a - rate * (t2 - t1)) / n
        for a, b, rate in zip(quiet1, busy, per_s, strict=True)
    )
    quiet = {"api": per_s[0], "redis": per_s[1], "workers": per_s[2]}
    return {"api_s": api, "redis_s": red, "workers_s": work, "seconds": t2 - t1, "quiet": quiet}


def model(ingest: dict[str, Any], judged: dict[str, Any], headroom: float) -> list[dict]:
    """Processes for each rate and judged share, each planned at `headroom` of one CPU."""
    judge_api = max(0.0, judged["api_s"] - ingest["api_s"])
    judge_redis = max(0.0, judged["redis_s"] - ingest["redis_s"])
    judge_work = max(0.0, judged["workers_s"] - ingest["workers_s"])
    rows = []
    for rate in RATES:
        for share in JUDGED_SHARES:
            api = rate * (ingest["api_s"] + share * judge_api)
            red = rate * (ingest["redis_s"] + share * judge_redis)
            work = rate * (ingest["workers_s"] + share * judge_work)
            rows.append({
                "events_per_s": rate, "judged_share": share,
                "api_cpus": round(api, 2), "api_processes": max(1, math.ceil(api / headroom)),
                "worker_cpus": round(work, 2),
                "worker_processes": max(1, math.ceil(work / headroom)),
                "redis_cpus": round(red, 2), "redis_primaries": max(1, math.ceil(red / headroom)),
            })  # fmt: skip
    return rows


def report(figures: dict[str, Any]) -> str:
    i, j = figures["ingest"], figures["judged"]
    lines = [
        f"CPU per accepted event, nothing judged: API {1e6 * i['api_s']:.0f} us, "
        f"Redis {1e6 * i['redis_s']:.0f} us, workers {1e6 * i['workers_s']:.0f} us",
        f"CPU per accepted event, every event judged: API {1e6 * j['api_s']:.0f} us, "
        f"Redis {1e6 * j['redis_s']:.0f} us, workers {1e6 * j['workers_s']:.0f} us",
        f"processes at {figures['headroom']:.0%} of a CPU each "
        "(Redis: one CPU per primary, single-threaded):",
        f"{'events/s':>9} {'judged':>7} {'API':>5} {'workers':>8} {'Redis primaries':>16}",
    ]
    for r in figures["model"]:
        lines.append(f"{r['events_per_s']:>9,} {r['judged_share']:>7.0%} {r['api_processes']:>5} "
                     f"{r['worker_processes']:>8} {r['redis_primaries']:>16}")  # fmt: skip
    return "\n".join(lines)


def run(n: int, headroom: float = 0.5, quiet_s: float = 10.0) -> dict[str, Any]:
    with FakeLLM() as fake:
        ingest = {"RAGMON_SAMPLING": "fixed", "RAGMON_SAMPLE_RATE": "0.000001"}
        judged = {"RAGMON_SAMPLING": "fixed", "RAGMON_SAMPLE_RATE": "1"}
        ingest = phase(n, ingest, fake, quiet_s)
        judged = phase(n, judged, fake, quiet_s)
    return {"events": n, "headroom": headroom, "ingest": ingest, "judged": judged,
            "model": model(ingest, judged, headroom)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.bench_capacity", description=__doc__)
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--headroom", type=float, default=0.5, help="of a CPU per process")
    ap.add_argument("--short", action="store_true", help="50 events, 2 s baselines (CI)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    print(machine())
    figures = run(50 if args.short else args.events, args.headroom, 2.0 if args.short else 10.0)
    print(report(figures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
