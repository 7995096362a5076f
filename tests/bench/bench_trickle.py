"""One worker fed single events at a steady rate, against the same worker draining batches.

    .venv/bin/python -m tests.bench.bench_trickle [--short] [--latencies 0.3,1.5]
        [--rates 2,10,30] [--seconds 30] [--batched-events 160]

The mission's main path is an HTTP hook posting one event per user request: at steady rates
the requests do not overlap. Per fake-LLM latency (`tests.support.fake_llm`, real OpenAIJudge,
pointwise, K = 10, 20 judged TREC DL passages an event, every event its own query so the
judgment cache never hits), in one run:

- batched (the baseline): one `ragmon worker` drains `--batched-events` events stored at
  once (as the SDK's batches make them);
- trickle: `ragmon serve` and one `ragmon worker`; an open-loop sender POSTs single events to
  /v1/retrievals at each `--rates` for `--seconds`, while a poller reads /metrics every 50 ms
  (the n-th 202 counts as fresh when `ragmon_retrieval_ndcg_count` reaches n).

Judged passages/s is the rate between 10% and 90% of the events done (below capacity it is the
offered rate; above, the worker's capacity). CPU per passage is the worker process and its work
horses (getrusage of the waited worker, minus its own CPU at readiness from `/proc`), so its
start-up is not counted in either. Targets (rates above the batched capacity):
trickle passages/s >= 0.85x batched, CPU per passage <= 1.2x batched; below capacity, p95
freshness <= LLM latency + 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
import uuid
from dataclasses import dataclass

import redis

from ragmon.settings import Settings
from ragmon.store import Store
from tests.bench.bench_freshness import labeled, metric_count
from tests.bench.bench_worker import JUDGED_PER_EVENT, enqueue, start_fake_llm
from tests.bench.common import (
    ID_MARK,
    Bodies,
    RawConn,
    _host_port,
    data_source,
    event_template,
    exit_on_sigterm,
    machine,
    open_loop,
    pct,
    topics,
)
from tests.support.stack import Child, ragmon_env, redis_server, start_api, start_worker

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TARGET_RATE = 0.85
TARGET_CPU = 1.2
FRESH_MARGIN_S = 1.5


@dataclass
class Run:
    """One worker's figures for one traffic pattern."""

    name: str
    offered: float  # events/s sent (0: a batched drain)
    events: int
    passages_per_s: float
    cpu_s: float
    fresh: list[float]  # 202 -> counted in /metrics, s (trickle only)

    @property
    def cpu_ms_per_passage(self) -> float:
        return 1000 * self.cpu_s / max(1, self.events * JUDGED_PER_EVENT)


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process and its waited children."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) / CLOCK_TICKS


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def work_cpu(worker: Child, at_start: float, at_ready: float) -> float:
    """Stop the worker (RQ's warm shutdown waits for its work horse) and return the CPU it and
    its horses used since it was ready."""
    worker.stop()
    return children_cpu() - at_start - at_ready


def steady_rate(done_at: list[float], start: float) -> float:
    """Judged passages/s between 10% and 90% of the events done (from `start` to the last one
    when those were done together: a run too short to tell)."""
    n = len(done_at)
    lo, hi = done_at[int(0.1 * (n - 1))], done_at[int(0.9 * (n - 1))]
    if hi > lo:
        return (int(0.9 * (n - 1)) - int(0.1 * (n - 1))) * JUDGED_PER_EVENT / (hi - lo)
    return n * JUDGED_PER_EVENT / max(1e-9, done_at[-1] - start)


def ready_worker(redis_url: str, env: dict[str, str]) -> tuple[Child, float, float]:
    """A `ragmon worker` (LLM judge imported before its forks), once RQ lists it as idle; with
    this process's children's CPU before it started, and its own CPU at readiness."""
    at_start = children_cpu()
    worker = start_worker(ragmon_env(redis_url, **env), f"bench-{uuid.uuid4().hex[:6]}")
    r = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    while not r.scard("rq:workers"):
        if time.monotonic() > deadline:
            raise RuntimeError("the worker did not start in 60 s")
        time.sleep(0.05)
    r.close()
    time.sleep(0.5)  # past its start-up
    return worker, at_start, tree_cpu(worker.pid)


def batched(llm_env: dict[str, str], pairs: list, n: int) -> Run:
    """The baseline: the worker drains `n` events stored all at once."""
    with redis_server() as rs:
        store = Store.connect(Settings.from_env(ragmon_env(rs.url, **llm_env), dotenv=None))
        worker, at_start, at_ready = ready_worker(rs.url, llm_env)
        start = time.perf_counter()
        enqueue(store, n, pairs)
        done_at: list[float] = []
        deadline = time.perf_counter() + 900
        while len(done_at) < n:
            now = time.perf_counter()
            done_at += [now] * (labeled(store.client) - len(done_at))
            if now > deadline:
                raise TimeoutError(f"batched: {len(done_at)}/{n} events after 900 s")
            time.sleep(0.02)
        cpu = work_cpu(worker, at_start, at_ready)
        store.client.close()
    return Run("batched", 0.0, n, steady_rate(done_at, start), cpu, [])


async def post_and_watch(
    url: str, template: str, rate: float, seconds: float
) -> tuple[list[float], list[float]]:
    """Open-loop POSTs at `rate`; returns the 202 times and the times each n-th event was
    counted in /metrics (first in, first out)."""
    host, port, _ = _host_port(url)
    accepted: list[float] = []
    counted: list[float] = []
    stop = asyncio.Event()
    conn = RawConn(host, port)
    base = metric_count((await conn.request("GET", "/metrics"))[1].decode())

    async def watch() -> None:
        while not stop.is_set():
            _, body = await conn.request("GET", "/metrics")
            now = time.perf_counter()
            counted.extend([now] * (metric_count(body.decode()) - base - len(counted)))
            await asyncio.sleep(0.05)

    def on_answer(status: int, body: bytes, at: float) -> None:
        if status == 202:
            accepted.append(at)

    watcher = asyncio.create_task(watch())
    await open_loop(url + "/v1/retrievals", Bodies(template).next, rate, seconds, on_answer)
    deadline = time.perf_counter() + 900
    while len(counted) < len(accepted) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await watcher
    conn.close()
    return accepted, counted


def trickle(llm_env: dict[str, str], template: str, rate: float, seconds: float) -> Run:
    """`ragmon serve` + one worker; single-event POSTs at `rate` for `seconds`."""
    with redis_server() as rs:
        # every poll renders: with the default RAGMON_METRICS_REFRESH_S (10 s) the poller saw
        # /metrics up to 10 s old, the p95 "freshness" of 11 s at a 1.5 s LLM
        api, url = start_api(ragmon_env(rs.url, RAGMON_METRICS_REFRESH_S="0"))
        try:
            worker, at_start, at_ready = ready_worker(rs.url, llm_env)
            accepted, counted = asyncio.run(post_and_watch(url, template, rate, seconds))
            cpu = work_cpu(worker, at_start, at_ready)
        finally:
            api.stop()
    if len(counted) < len(accepted):
        raise TimeoutError(f"{rate}/s: {len(counted)}/{len(accepted)} events counted")
    fresh = [c - a for a, c in zip(accepted, counted, strict=False)]
    rate_done = steady_rate(counted, accepted[0])
    return Run(f"{rate:g}/s", rate, len(accepted), rate_done, cpu, fresh)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_trickle", description=__doc__)
    p.add_argument("--short", action="store_true", help="a few seconds per rate (CI)")
    p.add_argument("--latencies", default="0.3,1.5", help="fake LLM answer delays, s")
    p.add_argument("--rates", default="2,10,30", help="single-event POSTs per second")
    p.add_argument("--seconds", type=float, default=None, help="sending time per rate (30)")
    p.add_argument("--batched-events", type=int, default=None, help="baseline size (160)")
    args = p.parse_args(argv)
    exit_on_sigterm()
    seconds = args.seconds or (6.0 if args.short else 30.0)
    n_batched = args.batched_events or (64 if args.short else 160)
    latencies = [float(x) for x in args.latencies.split(",")]
    rates = [float(x) for x in args.rates.split(",")]
    print(machine())
    print(f"data: {data_source()}")
    pairs = topics(short=args.short)
    query, texts = pairs[0]
    template = event_template(f"{query} ({ID_MARK})", texts)  # every event its own query
    defaults = Settings.from_env({}, dotenv=None)
    print(
        f"one worker; RAGMON_JUDGE_CONCURRENCY={defaults.judge_concurrency}, "
        f"RAGMON_JOB_BATCH_SIZE={defaults.job_batch_size}; {seconds:g} s per rate, "
        f"{n_batched} events batched" + (" (short mode)" if args.short else "")
    )
    ok = True
    for latency in latencies:
        fake, llm_url = start_fake_llm(latency)
        env = {"RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": llm_url, "OPENAI_API_KEY": "x"}
        try:
            base = batched(env, pairs, n_batched)
            runs = [trickle(env, template, rate, seconds) for rate in rates]
        finally:
            os.killpg(fake.pid, 15)
            fake.wait(10)
        print()
        print(f"fake LLM {latency:g} s: batched capacity {base.passages_per_s:,.0f} passages/s "
              f"= {base.passages_per_s / JUDGED_PER_EVENT:.1f} events/s")  # fmt: skip
        print(f"{'':10s}{'events':>8s}{'passages/s':>12s}{'ratio':>7s}{'CPU ms/p':>10s}"
              f"{'ratio':>7s}{'fresh p50':>11s}{'p95':>8s}  verdict")  # fmt: skip
        for run in [base, *runs]:
            rate_ratio = run.passages_per_s / base.passages_per_s
            cpu_ratio = run.cpu_ms_per_passage / base.cpu_ms_per_passage
            fresh = (
                f"{pct(run.fresh, 50):11.2f}{pct(run.fresh, 95):8.2f}" if run.fresh else " " * 19
            )
            verdict = ""
            if run.offered:
                below = run.offered * JUDGED_PER_EVENT < 0.9 * base.passages_per_s
                if below:
                    met = pct(run.fresh, 95) <= latency + FRESH_MARGIN_S
                    verdict = f"below capacity: p95 <= {latency + FRESH_MARGIN_S:g} s " + (
                        "met" if met else "MISSED"
                    )
                else:
                    met = rate_ratio >= TARGET_RATE and cpu_ratio <= TARGET_CPU
                    verdict = f"saturated: >= {TARGET_RATE}x, CPU <= {TARGET_CPU}x " + (
                        "met" if met else "MISSED"
                    )
                ok = ok and met
            print(f"{run.name:10s}{run.events:8d}{run.passages_per_s:12,.0f}{rate_ratio:7.2f}"
                  f"{run.cpu_ms_per_passage:10.2f}{cpu_ratio:7.2f}{fresh}  {verdict}")  # fmt: skip
    print()
    print("targets " + ("met" if ok else "MISSED (see the verdicts)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
