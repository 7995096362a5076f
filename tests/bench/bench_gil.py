"""How long the SDK's threads hold the GIL, and their CPU per event, at a fixed event rate.

    .venv/bin/python -m tests.bench.bench_gil [--short] [--rate 500] [--json out.json]

The main thread plays an app that always wants the GIL: a pure-Python loop that, `rate` times a
second, calls `record()` with a realistic event (K = 10, 20 passages of TREC DL text). The SDK's
threads can then only run by taking the GIL from it (after `sys.getswitchinterval()`), so each
stretch they hold it shows as a gap in the main loop. The CPU the busiest SDK thread used during
that gap, read from its own CPU clock, is the hold: other processes on the machine cannot
inflate it (they can only make the wall-clock gap longer). It is an upper bound: when the OS
keeps the main thread off the CPU, two holds by one thread can fall into one gap; the thread's
count of times scheduled in (/proc schedstat) tells those gaps apart, and the longest hold among
gaps where it ran once is reported too. Rounds where
the hook records alternate with rounds where it is idle (the same loop without `record()`):
their gaps are the floor (the OS preempting the main thread, the idle threads' timers). The
sidecar is a server answering 202 at once, in a subprocess at nice 19 under SCHED_IDLE.

The SDK's CPU per event (its two threads' CPU clocks over the recording rounds, divided by the
events) is reported too; `record()`'s own cost on the app's thread is `bench_record`'s.
The app's side is read too: how long the main thread slept in each gap (the gap less its own
CPU and its time queued for a CPU; the loop sleeps only to wait for the GIL), and, per gap, the
lesser of that and the busiest SDK thread's CPU: the longest hold the app waited on.
Target: the longest hold <= 1 ms. A cyclic collection of the app's heap runs on whichever thread
allocates when the threshold is crossed, an SDK thread included: gaps overlapping one are told
apart, so the hook's own work (slices, sends) is judged separately from the app's collections.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from ragmon.client import RetrievalMonitor
from ragmon.client import events as events_module
from tests.bench.hook_apps import load_corpus, machine, stub_sidecar
from tests.bench.stats import median_interval

GAP_S = 20e-6  # a main-loop iteration longer than this lost the GIL or the CPU
BUCKETS_US = (50, 100, 200, 500, 1000, 2000, 5000)
TARGET_HOLD_S = 1e-3


def sdk_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ragmon-")]


class GcWatch:
    """Collections of the cyclic GC that ran on the SDK's threads (whoever allocates pays).

    Each is kept as (wall start, wall end, CPU seconds), so a gap can be told apart as one
    where the hook's thread was collecting the app's heap rather than doing the hook's work.
    """

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, float]] = []
        self.started = (0.0, 0.0)

    def __call__(self, phase: str, info: dict) -> None:
        if not threading.current_thread().name.startswith("ragmon-"):
            return
        if phase == "start":
            self.started = (time.perf_counter(), time.thread_time())
        else:
            wall, cpu = self.started
            self.pauses.append((wall, time.perf_counter(), time.thread_time() - cpu))

    def during(self, start: float, end: float) -> bool:
        """Whether a collection on an SDK thread overlapped this stretch of wall time."""
        return any(a < end and b > start for a, b, _ in self.pauses)


class Gap(NamedTuple):
    """One stretch the busy main loop did not run, and who held what meanwhile."""

    wall: float
    cpu: float  # the busiest SDK thread's CPU: the hold (an upper bound if runs > 1)
    runs: int  # times that thread was scheduled in
    thread: str
    collecting: bool  # a collection of the app's heap ran on an SDK thread meanwhile
    blocked: float  # the main thread asleep (waiting for the GIL), not running or queued


def run_round(
    monitor: RetrievalMonitor | None,
    events: list[tuple],
    rate: float,
    seconds: float,
    watch: GcWatch,
) -> dict[str, Any]:
    """One round of the busy main loop; `monitor` None = the hook idle (the floor)."""
    threads = sdk_threads()
    clocks = [time.pthread_getcpuclockid(t.ident or 0) for t in threads]
    stats = [os.open(f"/proc/self/task/{t.native_id}/schedstat", os.O_RDONLY) for t in threads]

    def sample() -> list[tuple[float, int]]:
        """(CPU seconds, times scheduled in) of each SDK thread."""
        return [
            (time.clock_gettime(c), int(os.pread(fd, 100, 0).split()[2]))
            for c, fd in zip(clocks, stats, strict=True)
        ]

    mine = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)

    def asleep() -> tuple[float, float, int]:
        """The main thread's (CPU, time queued for a CPU, times scheduled in): what is left of
        a gap once these are taken out, in a gap where it was scheduled in again, is time it
        slept; the loop never sleeps but to wait for the GIL. No switch, no wait: the gap
        was the OS or the hypervisor taking the CPU."""
        _, queued, runs = os.pread(mine, 100, 0).split()
        return time.thread_time(), int(queued) / 1e9, int(runs)

    names = [t.name.removeprefix("ragmon-") for t in threads]
    # (end, wall, CPU, runs, busiest, slept): made Gaps after the loop, which stays cheap
    found: list[tuple[float, float, float, int, str, float]] = []
    n = 0
    start = last = time.perf_counter()
    first = prev = sample()
    me = asleep()
    end = start + seconds
    while last < end:
        if monitor is not None and last - start >= n / rate:
            query, hits = events[n % len(events)]
            monitor.record(query, hits, 10)
            n += 1
        now, cur, me_now = time.perf_counter(), sample(), asleep()
        if now - last > GAP_S:
            cpu, runs, name = max(
                (c - c0, r - r0, name)
                for (c, r), (c0, r0), name in zip(cur, prev, names, strict=True)
            )
            ran, queued, switched = (a - b for a, b in zip(me_now, me, strict=True))
            slept = max(0.0, now - last - ran - queued) if switched else 0.0
            found.append((now, now - last, cpu, runs, name, slept))
        last, prev, me = now, cur, me_now
    for fd in (*stats, mine):
        os.close(fd)
    used = sum(c for c, _ in prev) - sum(c for c, _ in first)
    gaps = [
        Gap(w, c, r, name, watch.during(end - w, end), slept) for end, w, c, r, name, slept in found
    ]
    return {"events": n, "gaps": gaps, "sdk_cpu_s": used, "seconds": last - start}


def describe(gaps: list[Gap]) -> dict[str, Any]:
    holds = sorted(g.cpu for g in gaps)
    single = [g.cpu for g in gaps if g.runs <= 1]
    walls = sorted(g.wall for g in gaps)
    blocked = sorted(g.blocked for g in gaps)
    felt = max((min(g.cpu, g.blocked) for g in gaps if not g.collecting), default=0.0)
    longest = max(gaps, key=lambda g: g.cpu, default=None)
    work = max((g for g in gaps if not g.collecting), key=lambda g: g.cpu, default=None)

    def q(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] if values else 0.0

    counts = [sum(h * 1e6 > b for h in holds) for b in BUCKETS_US]
    return {
        "gaps": len(gaps),
        "hold_p50_us": q(holds, 0.5) * 1e6,
        "hold_p90_us": q(holds, 0.9) * 1e6,
        "hold_p99_us": q(holds, 0.99) * 1e6,
        "hold_max_us": (longest.cpu if longest else 0.0) * 1e6,
        "hold_max_thread": longest.thread if longest else "",
        "hold_max_collecting": bool(longest and longest.collecting),
        "work_hold_max_us": (work.cpu if work else 0.0) * 1e6,
        "collecting_gaps": sum(g.collecting for g in gaps),
        "felt_hold_max_us": felt * 1e6,
        "blocked_p99_us": q(blocked, 0.99) * 1e6,
        "blocked_max_us": (blocked[-1] if blocked else 0.0) * 1e6,
        "single_run_hold_max_us": max(single, default=0.0) * 1e6,
        "multi_run_gaps": len(gaps) - len(single),
        "wall_p99_us": q(walls, 0.99) * 1e6,
        "wall_max_us": (walls[-1] if walls else 0.0) * 1e6,
        "holds_over_us": dict(zip(BUCKETS_US, counts, strict=True)),
    }


def run(short: bool = False, rate: float = 500.0, stdlib_json: bool = False) -> dict[str, Any]:
    """Alternate recording and idle rounds; returns the figures (printed by `main`)."""
    if stdlib_json:  # as installed without the `fast` extra
        events_module.orjson = None
    rounds, seconds = (3, 1.0) if short else (12, 3.0)
    corpus, queries = load_corpus()
    events = []
    for i in range(200):
        j = (i * 10) % (len(corpus) - 20)
        hits = [(pid, text, float(20 - r)) for r, (pid, text) in enumerate(corpus[j : j + 20])]
        events.append((queries[i % len(queries)], hits))
    out: dict[str, Any] = {"machine": machine(), "rate_rps": rate, "rounds": rounds}
    out["encoder"] = "orjson" if events_module.orjson is not None else "stdlib json"
    out["seconds_per_round"] = seconds
    per: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    watch = GcWatch()
    gc.callbacks.append(watch)
    with stub_sidecar(lowest=not short) as url:  # --short: a smoke run, normal priority
        monitor = RetrievalMonitor(url, labels={"app": "bench"})
        monitor.record("warm-up", events[0][1], 10)  # starts the threads
        assert monitor.flush(10)
        run_round(monitor, events, rate, 0.5, watch)  # warm-up
        for r in range(rounds):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                hook = monitor if mode == "on" else None
                per[mode].append(run_round(hook, events, rate, seconds, watch))
                if mode == "on":
                    monitor.flush(10)  # what the round recorded is sent within the round
        monitor.close(10)
        out["monitor_stats"] = monitor.stats()
    gc.callbacks.remove(watch)
    out["sdk_gc_pauses"] = len(watch.pauses)
    out["sdk_gc_max_us"] = max((cpu for _, _, cpu in watch.pauses), default=0.0) * 1e6
    for mode, results in per.items():
        out[mode] = describe([g for res in results for g in res["gaps"]])
        rounds_d = [describe(res["gaps"]) for res in results]
        out[mode]["round_max_hold_us"] = [d["hold_max_us"] for d in rounds_d]
        out[mode]["round_max_hold_thread"] = [
            d["hold_max_thread"] + " (collecting)" * d["hold_max_collecting"] for d in rounds_d
        ]
        out[mode]["round_work_hold_max_us"] = [d["work_hold_max_us"] for d in rounds_d]
        out[mode]["round_blocked_max_us"] = [d["blocked_max_us"] for d in rounds_d]
        out[mode]["round_felt_hold_max_us"] = [d["felt_hold_max_us"] for d in rounds_d]
    cpu_per_event = [res["sdk_cpu_s"] / max(1, res["events"]) * 1e6 for res in per["on"]]
    out["sdk_cpu_us_per_event"] = median_interval(cpu_per_event)
    out["events"] = sum(res["events"] for res in per["on"])
    return out


def report(f: dict[str, Any]) -> str:
    lines = [
        f"GIL holds by the SDK's threads: {f['rate_rps']:.0f} events/s, {f['rounds']} rounds of "
        f"{f['seconds_per_round']} s recording / idle, main thread busy, {f['encoder']}; "
        f"{f['machine']}",
        f"{'hook':5} {'gaps':>6} {'hold p50':>9} {'p90':>7} {'p99':>7} {'max µs':>8} "
        f"{'wall p99':>9} {'max µs':>8}  holds over 50/100/200/500 µs/1/2/5 ms",
    ]
    for mode in ("off", "on"):
        d = f[mode]
        over = "/".join(str(v) for v in d["holds_over_us"].values())
        lines.append(
            f"{mode:5} {d['gaps']:>6} {d['hold_p50_us']:>9.1f} {d['hold_p90_us']:>7.1f} "
            f"{d['hold_p99_us']:>7.1f} {d['hold_max_us']:>8.1f} {d['wall_p99_us']:>9.1f} "
            f"{d['wall_max_us']:>8.1f}  {over}"
        )
    on = f["on"]
    longest, work = on["hold_max_us"], on["work_hold_max_us"]
    m = f["sdk_cpu_us_per_event"]
    lines.append(
        f"longest hold with the hook recording: {longest:.0f} µs; by the thread, per round: "
        + ", ".join(
            f"{v:.0f} {t}"
            for v, t in zip(on["round_max_hold_us"], on["round_max_hold_thread"], strict=True)
        )
    )
    verdict = "ok" if work <= TARGET_HOLD_S * 1e6 else "OVER"
    lines.append(
        f"  doing the hook's work (the {on['collecting_gaps']} gaps with a collection of the "
        f"app's heap on an SDK thread left out): {work:.0f} µs ({verdict}; target <= "
        f"{TARGET_HOLD_S * 1e6:.0f} µs); per round: "
        + ", ".join(f"{v:.0f}" for v in on["round_work_hold_max_us"])
    )
    lines.append(
        f"  of gaps where that thread ran once (exact holds): longest "
        f"{on['single_run_hold_max_us']:.0f} µs; {on['multi_run_gaps']} gaps where it ran "
        "more than once (the OS kept the main thread off the CPU, or preempted the SDK thread)"
    )
    off = f["off"]
    lines.append(
        f"the main thread asleep for the GIL within a gap (what the app waits): p99 "
        f"{on['blocked_p99_us']:.0f} µs, longest {on['blocked_max_us']:.0f} µs; per round: "
        + ", ".join(f"{v:.0f}" for v in on["round_blocked_max_us"])
        + f" (hook idle: p99 {off['blocked_p99_us']:.0f}, longest {off['blocked_max_us']:.0f})"
    )
    lines.append(
        f"SDK threads' CPU per event: median {m['median']:.1f} µs over rounds "
        f"[{m['low']:.1f}, {m['high']:.1f}] ({m['confidence']:.0%} interval)"
    )
    lines.append(
        f"  garbage collections that ran on the SDK's threads: {f['sdk_gc_pauses']}, longest "
        f"{f['sdk_gc_max_us']:.0f} µs (the app's heap; whichever thread allocates pays)"
    )
    s = f["monitor_stats"]
    dropped = sum(v for k, v in s.items() if k.startswith("dropped_"))
    lines.append(
        f"monitor: recorded={s['recorded']} sent={s['sent']} dropped={dropped} "
        f"invalid={s['invalid']} errors={s['errors']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="a few seconds (CI)")
    p.add_argument("--rate", type=float, default=500.0, help="events/s (default 500)")
    p.add_argument("--stdlib-json", action="store_true", help="encode without orjson")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args(argv)
    figures = run(args.short, args.rate, args.stdlib_json)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
