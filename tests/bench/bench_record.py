"""The cost of `RetrievalMonitor.record()` on the app's thread, against a bare queue put.

    .venv/bin/python -m tests.bench.bench_record [--short] [--sidecar healthy|down]

Each call is timed alone (perf_counter_ns; the timer's own median cost is subtracted), in
alternating rounds (ABBA) of the baseline and of record(), with a realistic event (K = 10,
20 passages of ~300 characters, TREC DL text when present). Baselines: `queue.Queue.put_nowait`
of a prebuilt event dict (the harsher one, used for the target), and of the same dict built in
the call. The monitor's sender thread runs for real against a 202 server in a subprocess (or a
closed port with `--sidecar down`), so record() is measured with its background work going on;
the baseline rounds start only when that sender is idle. Target: median <= 3x the bare put.
"""

from __future__ import annotations

import argparse
import gc
import json
import queue
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ragmon.client import RetrievalMonitor
from tests.bench.hook_apps import load_corpus, machine, stub_sidecar
from tests.bench.stats import quantile
from tests.support.stack import free_port


def time_calls(fn: Callable[[], object], n: int) -> list[int]:
    """Nanoseconds of each of `n` calls of `fn`."""
    clock = time.perf_counter_ns
    out = [0] * n
    for i in range(n):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out


def run(short: bool = False, sidecar: str = "healthy") -> dict[str, Any]:
    """Measure; returns the figures (printed by `main`)."""
    rounds, per_round = (40, 200) if short else (250, 200)
    corpus, queries = load_corpus()
    passages = [
        {"id": pid, "text": text[:300], "score": 1.0 / (i + 1)}
        for i, (pid, text) in enumerate(corpus[:20])
    ]
    query, k = queries[0], 10
    prebuilt = {"query": query, "passages": passages, "k": k}
    q: queue.Queue = queue.Queue()

    samples: dict[str, list[int]] = {"timer": [], "put": [], "put_built": [], "record": []}
    calls: dict[str, Callable[[], object]] = {
        "timer": lambda: None,
        "put": lambda: q.put_nowait(prebuilt),
        "put_built": lambda: q.put_nowait({"query": query, "passages": passages, "k": k}),
    }
    down = f"http://127.0.0.1:{free_port()}"
    # --short is a smoke run: its stub keeps normal priority (idle-class ones starve on busy CPUs)
    with stub_sidecar(lowest=not short) if sidecar == "healthy" else nullcontext(down) as url:
        monitor = RetrievalMonitor(url, labels={"app": "bench"})
        calls["record"] = lambda: monitor.record(query, passages, k)
        for name in calls:  # warm-up
            time_calls(calls[name], 2000)
        if sidecar == "healthy":
            monitor.flush(10)
        for r in range(rounds):
            order = list(calls) if r % 2 == 0 else list(reversed(calls))
            for name in order:
                if name != "record" and sidecar == "healthy":
                    monitor.flush(10)  # the baseline never competes with our sender
                samples[name] += time_calls(calls[name], per_round)
                q.queue.clear()
            time.sleep(0.005)  # an app between requests; the sender drains meanwhile
        monitor.close(10 if sidecar == "healthy" else 0.5)
        stats = monitor.stats()
    timer = statistics.median(samples["timer"])
    out: dict[str, Any] = {"machine": machine(), "calls_per_variant": rounds * per_round}
    out["timer_overhead_ns"] = timer
    for name in ("put", "put_built", "record"):
        net = [max(0.0, s - timer) for s in samples[name]]
        out[name] = {"median_ns": statistics.median(net), "p99_ns": quantile(net, 0.99)}
    out["median_ratio"] = out["record"]["median_ns"] / out["put"]["median_ns"]
    out["p99_ratio"] = out["record"]["p99_ns"] / out["put"]["p99_ns"]
    out["median_ratio_vs_built"] = out["record"]["median_ns"] / out["put_built"]["median_ns"]
    out["sidecar"] = sidecar
    out["monitor_stats"] = stats
    out["gc_enabled"] = gc.isenabled()
    return out


def report(f: dict[str, Any]) -> str:
    rows = [
        ("queue.put_nowait(prebuilt dict)", f["put"]),
        ("queue.put_nowait({...} built)", f["put_built"]),
        ("RetrievalMonitor.record()", f["record"]),
    ]
    lines = [
        f"record() cost: {f['calls_per_variant']} calls per variant, sidecar {f['sidecar']}; "
        f"{f['machine']} (timer overhead {f['timer_overhead_ns']:.0f} ns subtracted)",
        f"{'':34} {'median ns':>10} {'p99 ns':>10}",
    ]
    lines += [f"{name:34} {v['median_ns']:>10.0f} {v['p99_ns']:>10.0f}" for name, v in rows]
    verdict = "ok" if f["median_ratio"] <= 3 else "OVER 3x"
    lines.append(
        f"record / bare put: median {f['median_ratio']:.2f}x ({verdict}; target <= 3x), "
        f"p99 {f['p99_ratio']:.2f}x; vs the built-dict put: median "
        f"{f['median_ratio_vs_built']:.2f}x"
    )
    s = f["monitor_stats"]
    lines.append(
        f"monitor: recorded={s['recorded']} sent={s['sent']} "
        f"dropped={s['dropped_buffer_full'] + s['dropped_at_close']} errors={s['errors']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="a couple of seconds (CI)")
    p.add_argument("--sidecar", choices=("healthy", "down"), default="healthy")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args(argv)
    figures = run(args.short, args.sidecar)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
