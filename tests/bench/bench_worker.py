"""Judged passages/s of one worker process with the LLM judge against a 300 ms fake LLM.

    .venv/bin/python -m tests.bench.bench_worker [--short] [--events 300] [--latency 0.3]

One `ragmon worker --burst` process (RQ forks a work horse per job; a job judges its events'
passages concurrently, up to RAGMON_JUDGE_CONCURRENCY requests in flight) drains a queue of
realistic events (K=10, 20 TREC DL passages, all 20 judged: the top 2K) with the real
OpenAIJudge (RAGMON_JUDGE=openai) pointed at `tests.support.fake_llm`, which answers every
request after `--latency` seconds. Every event has its own query, so the judgment cache never
hits. Side by side in the same run: the same events through the lexical judge (CPU only: the
worker's own ceiling), and the concurrency bound RAGMON_JUDGE_CONCURRENCY / latency.
The rate is measured between 10% and 90% of the events done (start-up excluded; the wall
rate including start-up is printed too). CPU time per passage is the worker process and its
work horses (getrusage of the waited children), the fake LLM excluded.

Target: >= 200 judged passages/s per worker process.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from ragmon.api.schemas import RetrievalEvent
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from tests.bench.common import (
    data_source,
    exit_on_sigterm,
    machine,
    make_event,
    topics,
)
from tests.support.stack import Child, ragmon_env, redis_server, start_worker

TARGET_PASSAGES_PER_S = 200.0
# `ragmon worker` with the LLM judge's modules (openai, httpx) imported before RQ forks: each
# work horse then starts with them instead of importing them per job.
PRELOAD = (
    "import sys, ragmon.workers.judges.llm; from ragmon.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)
JUDGED_PER_EVENT = 20  # K = 10: the top 2K passages are judged


@dataclass
class Drain:
    """One worker draining the queue."""

    judge: str
    events: int
    done: int
    steady_s: float  # from 10% to 90% of the events done
    wall_s: float  # from the worker's start to its exit
    cpu_s: float

    @property
    def passages_per_s(self) -> float:
        span = 0.8 * self.events * JUDGED_PER_EVENT
        return span / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def wall_passages_per_s(self) -> float:
        return self.done * JUDGED_PER_EVENT / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_ms_per_passage(self) -> float:
        return 1000 * self.cpu_s / max(1, self.done * JUDGED_PER_EVENT)


def start_fake_llm(latency: float) -> tuple[subprocess.Popen, str]:
    """`python -m tests.support.fake_llm` on a free port; returns (process, base URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm", "--port", "0", "--latency", str(latency)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"fake LLM did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


def enqueue(store: Store, n: int, pairs: list[tuple[str, list[str]]]) -> list[str]:
    """`n` new events, each with its own query (no judgment-cache hits), waiting for a drain
    job (the write enqueues one)."""
    run = uuid.uuid4().hex[:8]
    now = datetime.now(UTC)
    items = []
    for i in range(n):
        query, texts = pairs[i % len(pairs)]
        ev = make_event(f"{query} (#{run}-{i})", texts, f"bench-{run}-{i}", i)
        ev["timestamp"] = now
        # normalized exactly as the API stores it
        items.append(
            IngestItem(
                ev["event_id"],
                RetrievalEvent.model_validate(ev).model_dump_json(exclude_none=True),
                app=ev["labels"]["app"],
            )
        )
    for j in range(0, n, 500):
        store.ingest(items[j : j + 500])
    return [it.event_id for it in items]


def drain(
    store: Store, redis_url: str, judge: str, n: int, env: dict[str, str], preload: bool = False
) -> Drain:
    """Start one burst worker on a queue of `n` events; time it until they are all done."""
    before = store.counters()
    base = int(before.get("events_labeled", 0)) + sum(
        int(v) for k, v in before.items() if k.startswith("events_failed")
    )
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    name = f"bench-{judge}-{uuid.uuid4().hex[:6]}"
    if preload and judge == "openai":
        argv = [sys.executable, "-c", PRELOAD, "worker", "--name", name, "--burst"]
        worker = Child(argv, ragmon_env(redis_url, **env))
    else:
        worker = start_worker(ragmon_env(redis_url, **env), name, burst=True)
    # 10%: the last poll still below it, 90%: the first poll at or past it, so the span is
    # never zero (the lexical judge may finish every event between two polls under load)
    marks: dict[float, float] = {}
    finished = 0
    polled = t0
    while True:
        c = store.counters()
        finished = (
            int(c.get("events_labeled", 0))
            + sum(int(v) for k, v in c.items() if k.startswith("events_failed"))
            - base
        )
        now = time.perf_counter()
        if 0.1 not in marks and finished >= 0.1 * n:
            marks[0.1] = polled
        if 0.9 not in marks and finished >= 0.9 * n:
            marks[0.9] = now
        polled = now
        if finished >= n or worker.poll() is not None:
            break
        if now - t0 > 600:
            raise TimeoutError(f"{judge}: {finished}/{n} events after 600 s")
        time.sleep(0.02)
    worker.wait(120)  # burst: exits when the queue is empty
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    done = int(store.counters().get("events_labeled", 0)) - int(before.get("events_labeled", 0))
    steady = marks.get(0.9, wall) - marks.get(0.1, 0.0)
    return Drain(judge, n, done, steady, wall, cpu)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_worker", description=__doc__)
    p.add_argument("--short", action="store_true", help="a few seconds (CI)")
    p.add_argument("--events", type=int, default=None, help="events per run (default 300)")
    p.add_argument("--latency", type=float, default=0.3, help="fake LLM answer delay, s")
    p.add_argument("--concurrency", type=int, default=None, help="RAGMON_JUDGE_CONCURRENCY")
    p.add_argument("--job-batch-size", type=int, default=None, help="RAGMON_JOB_BATCH_SIZE")
    p.add_argument(
        "--preload",
        action="store_true",
        help="import the LLM judge in the worker before it forks (`ragmon worker` does not yet)",
    )
    args = p.parse_args(argv)
    exit_on_sigterm()
    n = args.events or (24 if args.short else 300)

    tuning: dict[str, str] = {}
    if args.concurrency:
        tuning["RAGMON_JUDGE_CONCURRENCY"] = str(args.concurrency)
    if args.job_batch_size:
        tuning["RAGMON_JOB_BATCH_SIZE"] = str(args.job_batch_size)
    print(machine())
    print(f"data: {data_source()}")
    pairs = topics(short=args.short)
    fake, llm_url = start_fake_llm(args.latency)
    try:
        with redis_server() as rs:
            settings = Settings.from_env(ragmon_env(rs.url, **tuning), dotenv=None)
            store = Store.connect(settings)
            print(
                f"{n} events x {JUDGED_PER_EVENT} judged passages; RAGMON_JUDGE_CONCURRENCY="
                f"{settings.judge_concurrency}, RAGMON_JOB_BATCH_SIZE={settings.job_batch_size}, "
                f"judge mode {settings.judge_mode}, fake LLM latency {args.latency:g} s"
                + (", LLM judge imported before the fork (--preload)" if args.preload else "")
            )
            llm_env = {
                "RAGMON_JUDGE": "openai",
                "OPENAI_BASE_URL": llm_url,
                "OPENAI_API_KEY": "x",
                **tuning,
            }
            enqueue(store, n, pairs)
            llm = drain(store, rs.url, "openai", n, llm_env, args.preload)
            enqueue(store, n, pairs)
            lex = drain(store, rs.url, "lexical", n, {"RAGMON_JUDGE": "lexical", **tuning})
            failed = {k: v for k, v in store.counters().items() if k.startswith("events_failed")}
            store.client.close()
    finally:
        os.killpg(fake.pid, 15)
        fake.wait(10)

    bound = settings.judge_concurrency / args.latency
    print()
    print("one worker process, judged passages/s")
    print(f"{'':34s}{'LLM judge':>12s}{'lexical':>12s}{'bound':>12s}")
    print(f"{'passages/s (10%-90% of events)':34s}{llm.passages_per_s:12,.0f}"
          f"{lex.passages_per_s:12,.0f}{bound:12,.0f}")  # fmt: skip
    print(f"{'passages/s (wall, with start-up)':34s}{llm.wall_passages_per_s:12,.0f}"
          f"{lex.wall_passages_per_s:12,.0f}")  # fmt: skip
    print(f"{'CPU ms per passage':34s}{llm.cpu_ms_per_passage:12.2f}{lex.cpu_ms_per_passage:12.2f}")
    print(f"{'events done':34s}{llm.done:12d}{lex.done:12d}")
    print(f"ratio LLM judge / concurrency bound: {llm.passages_per_s / bound:.2f}")
    ok = llm.passages_per_s >= TARGET_PASSAGES_PER_S
    print(f"target >= {TARGET_PASSAGES_PER_S:.0f} passages/s per process: "
          f"{llm.passages_per_s:,.0f} ({'met' if ok else 'MISSED'})")  # fmt: skip
    if failed:
        print(f"failed events: {failed}")
    return 0 if llm.done == n and lex.done == n else 1


if __name__ == "__main__":
    sys.exit(main())
