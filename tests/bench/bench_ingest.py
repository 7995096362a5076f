"""Ingest throughput and latency: `ragmon serve` against a no-op endpoint, side by side.

    .venv/bin/python -m tests.bench.bench_ingest [--short] [--seconds 10] [--connections 32]

Both servers run the same way (uvicorn, one process, no access log, as `monitor/api/serve.py`)
and receive the same realistic event (K=10, 20 TREC DL passages of ~350 characters, ~9.5 kB of
JSON) with a distinct event_id per request. The no-op endpoint parses the body with the same
pydantic model (`RetrievalEvent.model_validate_json`) and answers 202; ragmon also stores the
event and its RQ job durably in a real Redis before answering. Load: wrk (closed loop, keep-alive
connections, a Lua script giving every event its own id; an asyncio client when wrk is absent),
alternating the two servers so both see the same machine. "Half load" is an open-loop sender at
50% of ragmon's measured maximum (wrk has no fixed-rate mode), latency counted from each
request's scheduled send time. Server and Redis CPU time per request come from /proc: on a
shared machine they are steadier than requests/s.

Targets: ragmon >= 0.6 x the no-op's requests/s; p99 < 25 ms at half load; the batch endpoint
(100 events per request) >= 10 x the single-event events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

import redis

from tests.bench.common import (
    Bodies,
    Load,
    batch_template,
    closed_load,
    data_source,
    event_template,
    exit_on_sigterm,
    have_wrk,
    machine,
    ms,
    open_loop,
    start_noop,
    topics,
)
from tests.support.stack import ragmon_env, redis_server, start_api

TARGET_RATIO = 0.6
TARGET_HALF_P99_S = 0.025
TARGET_BATCH_GAIN = 10.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its threads included) and of its live children
    (`ragmon serve`'s decoding and /metrics processes do part of its work)."""
    total = 0.0
    for one in (pid, *(c.pid for c in _children(pid))):
        try:
            with open(f"/proc/{one}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # a child that just ended
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class Target:
    """A server under test: its URL, its pid, and Redis's pid (CPU accounting)."""

    def __init__(self, name: str, url: str, pid: int, redis_pid: int | None) -> None:
        self.name, self.url, self.pid, self.redis_pid = name, url, pid, redis_pid
        self.runs: list[tuple[Load, float, float]] = []  # load, server s/req, redis s/req

    def measure(self, path: str, template: str, seconds: float, connections: int) -> Load:
        c0 = cpu_seconds(self.pid)
        r0 = cpu_seconds(self.redis_pid) if self.redis_pid else 0.0
        load = closed_load(self.url + path, template, seconds, connections)
        n = max(1, load.requests)
        server = (cpu_seconds(self.pid) - c0) / n
        red = ((cpu_seconds(self.redis_pid) - r0) / n) if self.redis_pid else 0.0
        self.runs.append((load, server, red))
        return load

    def median(self) -> tuple[Load, float, float]:
        """The run with the median requests/s, with the median CPU figures."""
        by_rps = sorted(self.runs, key=lambda r: r[0].rps)
        load = by_rps[len(by_rps) // 2][0]
        return (
            load,
            statistics.median(r[1] for r in self.runs),
            statistics.median(r[2] for r in self.runs),
        )


def median_p99(runs: list[Load]) -> Load:
    """The run with the median p99 (a shared machine has bad moments; one run is not a fact)."""
    return sorted(runs, key=lambda r: r.p99)[len(runs) // 2]


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_ingest", description=__doc__)
    p.add_argument("--short", action="store_true", help="a few seconds in all (CI)")
    p.add_argument("--seconds", type=float, default=None, help="per load run (default 10)")
    p.add_argument("--rounds", type=int, default=None, help="alternations (default 3)")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args(argv)
    exit_on_sigterm()
    seconds = args.seconds or (1.0 if args.short else 10.0)
    rounds = args.rounds or (1 if args.short else 3)

    print(machine())
    print(f"data: {data_source()}")
    pairs = topics(short=args.short)
    single = event_template(*pairs[0])
    batch = batch_template(pairs, args.batch_size)
    print(
        f"event: K=10, 20 passages, {len(single)} bytes of JSON; batch: {args.batch_size} events, "
        f"{len(batch)} bytes; load generator: "
        f"{'wrk' if have_wrk() else 'asyncio closed loop (wrk not installed)'}, "
        f"{args.connections} connections, {seconds:g} s per run, {rounds} round(s) alternating"
    )
    with redis_server() as rs:
        flush = redis.Redis.from_url(rs.url)
        noop_proc, noop_url = start_noop()
        rag_proc, rag_url = start_api(ragmon_env(rs.url))
        assert rs.proc is not None
        noop = Target("no-op", noop_url, noop_proc.pid, None)
        rag = Target("ragmon", rag_url, rag_proc.pid, rs.proc.pid)
        try:
            for t in (noop, rag):  # warm-up (imports, first connections), not counted
                closed_load(t.url + "/v1/retrievals", single, min(1.0, seconds), 8)
            noop.runs.clear()
            rag.runs.clear()
            flush.flushall()
            for _ in range(rounds):
                for t in (noop, rag):
                    t.measure("/v1/retrievals", single, seconds, args.connections)
                    flush.flushall()  # every run starts from an empty Redis
            n_load, n_cpu, _ = noop.median()
            r_load, r_cpu, r_redis = rag.median()

            rate = 0.5 * r_load.rps
            halves: dict[str, list[Load]] = {noop.name: [], rag.name: []}
            half_cpu: dict[str, list[float]] = {noop.name: [], rag.name: []}
            for _ in range(rounds):
                for t in (noop, rag):
                    time.sleep(0.5)  # let the flush settle
                    c0 = cpu_seconds(t.pid)
                    load = asyncio.run(
                        open_loop(t.url + "/v1/retrievals", Bodies(single).next, rate, seconds)
                    )
                    halves[t.name].append(load)
                    half_cpu[t.name].append((cpu_seconds(t.pid) - c0) / max(1, load.requests))
                    flush.flushall()
            half = {name: median_p99(runs) for name, runs in halves.items()}

            b_runs: dict[str, Load] = {}
            b_cpu: dict[str, float] = {}
            for t in (noop, rag):
                c0 = cpu_seconds(t.pid)
                b_runs[t.name] = closed_load(
                    t.url + "/v1/retrievals/batch", batch, seconds, max(2, args.connections // 8)
                )
                b_cpu[t.name] = (cpu_seconds(t.pid) - c0) / max(
                    1, b_runs[t.name].requests * args.batch_size
                )
                flush.flushall()
        finally:
            rag_proc.stop()
            noop_proc.stop()
            flush.close()

    # rounds alternate the two servers: compare within a round, then take the median
    paired = [b[0].rps / a[0].rps for a, b in zip(noop.runs, rag.runs, strict=True) if a[0].rps]
    ratio = statistics.median(paired) if paired else 0.0
    cpu_ratio = n_cpu / r_cpu if r_cpu else 0.0
    r_half = half["ragmon"]
    b_events = {k: v.rps * args.batch_size for k, v in b_runs.items()}
    gain = b_events["ragmon"] / r_load.rps if r_load.rps else 0.0
    by_phase = {
        "full load": sum(r[0].errors for t in (noop, rag) for r in t.runs),
        "half load": sum(r.errors for runs in halves.values() for r in runs),
        "batch": sum(v.errors for v in b_runs.values()),
    }
    errors = sum(by_phase.values())

    print()
    print("single event, POST /v1/retrievals, full load (median of the runs)")
    print(f"{'':26s}{'no-op':>12s}{'ragmon':>12s}{'ratio':>10s}")
    print(f"{'requests/s':26s}{n_load.rps:12,.0f}{r_load.rps:12,.0f}{ratio:9.2f}x")
    print(f"{'p50 ms':26s}{ms(n_load.p50):>12s}{ms(r_load.p50):>12s}")
    print(f"{'p99 ms':26s}{ms(n_load.p99):>12s}{ms(r_load.p99):>12s}")
    print(f"{'server CPU us/request':26s}{n_cpu * 1e6:12.0f}{r_cpu * 1e6:12.0f}"
          f"{r_cpu / n_cpu if n_cpu else 0:9.2f}x")  # fmt: skip
    print(f"{'Redis CPU us/request':26s}{'-':>12s}{r_redis * 1e6:12.0f}")
    runs = ", ".join(
        f"{a[0].rps:,.0f}/{b[0].rps:,.0f}" for a, b in zip(noop.runs, rag.runs, strict=True)
    )
    print(f"runs (no-op/ragmon req/s): {runs}; ratio: median of the rounds' ratios")
    print(f"ratio by server CPU time (no-op/ragmon us per request): {cpu_ratio:.2f}x")
    print()
    print(
        f"half load: open loop at {rate:,.0f} requests/s (50% of ragmon's maximum), "
        f"run with the median p99 of {rounds}"
    )
    print(f"{'':26s}{'no-op':>12s}{'ragmon':>12s}")
    for label, attr in (("p50 ms", "p50"), ("p90 ms", "p90"), ("p99 ms", "p99")):
        print(f"{label:26s}{ms(getattr(half['no-op'], attr)):>12s}"
              f"{ms(getattr(r_half, attr)):>12s}")  # fmt: skip
    n_half, r_half_cpu = (statistics.median(half_cpu[k]) for k in ("no-op", "ragmon"))
    print(f"{'server CPU us/request':26s}{n_half * 1e6:12.0f}{r_half_cpu * 1e6:12.0f}")
    print(f"{'server CPU share of a core':26s}{n_half * rate:12.0%}{r_half_cpu * rate:12.0%}")
    for name, runs in halves.items():
        print(f"p99 ms of each run, {name}: " + ", ".join(ms(r.p99) for r in runs))
    print()
    print(f"batch endpoint, {args.batch_size} events per request")
    print(f"{'':26s}{'no-op':>12s}{'ragmon':>12s}")
    print(f"{'events/s':26s}{b_events['no-op']:12,.0f}{b_events['ragmon']:12,.0f}")
    print(f"{'p99 ms':26s}{ms(b_runs['no-op'].p99):>12s}{ms(b_runs['ragmon'].p99):>12s}")
    print(f"{'server CPU us/event':26s}{b_cpu['no-op'] * 1e6:12.0f}{b_cpu['ragmon'] * 1e6:12.0f}")
    print(
        f"no-op batch/single events/s: {b_events['no-op'] / n_load.rps:.1f}x "
        "(the ceiling parsing alone leaves)"
    )
    print()
    print(f"target requests/s ratio >= {TARGET_RATIO}: {ratio:.3f} ({verdict(ratio >= 0.6)})")
    print(f"target p99 at half load < {TARGET_HALF_P99_S * 1000:.0f} ms: {ms(r_half.p99)} ms "
          f"({verdict(r_half.p99 < TARGET_HALF_P99_S)})")  # fmt: skip
    print(f"target batch events/s >= {TARGET_BATCH_GAIN:g}x single: {gain:.1f}x "
          f"({verdict(gain >= TARGET_BATCH_GAIN)})")  # fmt: skip
    print(
        f"errors (non-2xx, socket): {errors}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in by_phase.items() if v)})" if errors else "")
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine(),
                    "noop_rps": n_load.rps,
                    "ragmon_rps": r_load.rps,
                    "ratio": ratio,
                    "noop_p99_s": n_load.p99,
                    "ragmon_p99_s": r_load.p99,
                    "server_cpu_us": {"noop": n_cpu * 1e6, "ragmon": r_cpu * 1e6},
                    "half_rate": rate,
                    "half_p99_s": {k: v.p99 for k, v in half.items()},
                    "batch_events_per_s": b_events,
                    "batch_gain": gain,
                    "errors": errors,
                    "at": time.time(),
                },
                f,
                indent=2,
            )
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
