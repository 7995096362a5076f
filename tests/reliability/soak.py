"""Soak: nominal load on a real stack for a bounded time, memory of every process sampled.

    python -m tests.reliability.soak --minutes 5 [--rate 10] [--judge fake|lexical]

Loopback only: a Redis, `ragmon serve`, two `ragmon worker` (and their RQ schedulers) and,
with `--judge fake`, the fake OpenAI-compatible server in this process. Every `--interval`
seconds it samples the resident memory (RSS) of each long-lived process and Redis'
`used_memory`; after the warm-up it fits a line through each process' RSS and says whether
memory is flat. Redis grows with the events it stores (kept for RAGMON_RESULT_TTL_DAYS), so
it is reported per stored event instead of judged flat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import psutil
import redis

from tests.reliability.support import events, labeled, statuses
from tests.support.fake_llm import FakeLLM
from tests.support.stack import RedisServer, Stack

MIB = 1024 * 1024
FLAT_MIB = 8.0  # growth after warm-up allowed per process (allocator noise, caches filling)
FLAT_SHARE = 0.05  # ... or this share of the process' RSS, whichever is larger


@dataclass
class Series:
    name: str
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MiB)

    def after(self, t0: float) -> list[tuple[float, float]]:
        return [s for s in self.samples if s[0] >= t0]

    def slope_mib_per_min(self, t0: float) -> float:
        pts = self.after(t0)
        if len(pts) < 3:
            return 0.0
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        var = sum((x - mx) ** 2 for x in xs)
        return (
            60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
        )

    def growth(self, t0: float) -> float:
        """Median of the last third minus median of the first third after warm-up (MiB)."""
        ys = [p[1] for p in self.after(t0)]
        if len(ys) < 3:
            return 0.0
        third = max(1, len(ys) // 3)
        return statistics.median(ys[-third:]) - statistics.median(ys[:third])

    def flat(self, t0: float) -> bool:
        ys = [p[1] for p in self.after(t0)]
        return not ys or self.growth(t0) <= max(FLAT_MIB, FLAT_SHARE * statistics.median(ys))


@dataclass
class SoakResult:
    seconds: float
    warmup: float
    sent: int
    accepted: int
    done: int
    counted: int
    series: list[Series]
    redis_used: Series
    events_stored: int

    @property
    def flat(self) -> bool:
        """Every ragmon process flat; Redis is expected to grow with the events it stores."""
        return all(s.flat(self.warmup) for s in self.series if s.name != "redis-server")

    def _flat_word(self, s: Series) -> str:
        if s.name == "redis-server":
            return "(holds the data)"
        return "yes" if s.flat(self.warmup) else "NO"

    def report(self) -> str:
        lines = [
            f"soak: {self.seconds / 60:.1f} min, warm-up {self.warmup:.0f} s; events sent "
            f"{self.sent}, accepted {self.accepted}, done {self.done}, counted {self.counted}",
            f"{'process':28s} {'RSS start':>10s} {'RSS end':>9s} {'growth':>8s} "
            f"{'slope':>12s}  flat",
        ]
        for s in self.series:
            pts = s.after(self.warmup)
            if not pts:
                continue
            lines.append(
                f"{s.name:28s} {pts[0][1]:8.1f} M {pts[-1][1]:7.1f} M "
                f"{s.growth(self.warmup):+6.1f} M "
                f"{s.slope_mib_per_min(self.warmup):+8.2f} M/min  {self._flat_word(s)}"
            )
        pts = self.redis_used.samples
        if len(pts) >= 2 and self.events_stored:
            per_event = (pts[-1][1] - pts[0][1]) * MIB / self.events_stored
            lines.append(
                f"redis used_memory {pts[0][1]:.1f} M -> {pts[-1][1]:.1f} M: about "
                f"{per_event / 1024:.1f} KiB per stored event (kept RAGMON_RESULT_TTL_DAYS)"
            )
        lines.append(f"memory flat after warm-up: {'yes' if self.flat else 'NO'}")
        return "\n".join(lines)


def _processes(stack: Stack, redis_server: RedisServer) -> dict[str, psutil.Process]:
    """The long-lived processes: API, workers, their RQ schedulers, Redis (not work horses)."""
    procs = {"ragmon serve": psutil.Process(stack.api.pid)}
    for i, w in enumerate(stack.workers):
        main = psutil.Process(w.pid)
        procs[f"ragmon worker {i}"] = main
        old = [c for c in main.children() if time.time() - c.create_time() > 3]
        for c in old:  # the scheduler child lives as long as the worker; horses come and go
            procs[f"ragmon worker {i} scheduler"] = c
    procs["redis-server"] = psutil.Process(redis_server.proc.pid)
    return procs


def soak(
    seconds: float,
    rate: float = 10.0,
    interval: float = 5.0,
    warmup: float | None = None,
    judge: str = "fake",
    log: bool = True,
) -> SoakResult:
    """Run the load for `seconds`, sampling memory every `interval`; returns the figures."""
    warmup = warmup if warmup is not None else min(60.0, seconds / 4)
    redis_server = RedisServer().start()
    fake = FakeLLM(latency=0.05).start() if judge == "fake" else None
    env = {"RAGMON_JUDGE": "lexical"}
    if fake is not None:
        env = {"RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "x"}
    stack = Stack(redis_server.url, workers=2, env=env).start()
    sent: list[str] = []
    accepted: set[str] = set()
    stop = threading.Event()

    def load() -> None:
        batch = max(1, int(rate))  # one batch a second, as the SDK's sender would
        i = 0
        with httpx.Client(base_url=stack.url, timeout=30) as client:
            next_at = time.monotonic()
            while not stop.is_set():
                evs = events(batch, seed0=i, passages=10, k=5)
                i += batch
                sent.extend(e["event_id"] for e in evs)
                r = client.post("/v1/retrievals/batch", json={"events": evs})
                if r.status_code == 202:
                    accepted.update(x["event_id"] for x in r.json()["results"])
                next_at += 1.0
                stop.wait(max(0.0, next_at - time.monotonic()))

    series: dict[str, Series] = {}
    redis_used = Series("redis used_memory")
    rclient = redis.Redis.from_url(redis_server.url)
    sender = threading.Thread(target=load, daemon=True)
    started = time.monotonic()
    sender.start()
    try:
        time.sleep(min(3.0, interval))  # let the schedulers start before naming processes
        procs = _processes(stack, redis_server)
        while (now := time.monotonic() - started) < seconds:
            for name, proc in procs.items():
                try:
                    rss = proc.memory_info().rss / MIB
                except psutil.Error:
                    continue
                series.setdefault(name, Series(name)).samples.append((now, rss))
            redis_used.samples.append((now, rclient.info("memory")["used_memory"] / MIB))
            if log:
                row = "  ".join(f"{n.split()[-1] if n != 'ragmon serve' else 'api'}="
                                f"{s.samples[-1][1]:.0f}M" for n, s in series.items())  # fmt: skip
                print(f"[{now:5.0f} s] sent {len(sent):6d}  {row}", flush=True)
            time.sleep(interval)
        stop.set()
        sender.join(30)
        ids = sorted(accepted)
        deadline = time.monotonic() + 120
        while True:
            st = statuses(stack, ids)
            done = sum(s == "done" for s in st.values())
            if done == len(ids) or time.monotonic() > deadline:
                break
            time.sleep(1)
        counted = labeled(stack)
        return SoakResult(
            seconds=seconds,
            warmup=warmup,
            sent=len(sent),
            accepted=len(accepted),
            done=done,
            counted=counted,
            series=list(series.values()),
            redis_used=redis_used,
            events_stored=len(accepted),
        )
    finally:
        stop.set()
        rclient.close()
        stack.stop()
        if fake is not None:
            fake.stop()
        redis_server.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.soak")
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=10.0, help="events per second (default 10)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=None, help="seconds (default: a quarter, ≤60)")
    p.add_argument("--judge", choices=["fake", "lexical"], default="fake")
    args = p.parse_args(argv)
    result = soak(args.minutes * 60, args.rate, args.interval, args.warmup, args.judge)
    print(result.report())
    ok = result.flat and result.accepted == result.done == result.counted
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
