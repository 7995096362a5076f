"""Micro-benchmark: events/s for computing every measure of one event, on one core.

Run: `.venv/bin/python -m tests.bench.bench_measures [--short]`.

Each event has M = 2K passages (what docs/api.md asks apps to send, so F_e is defined) with
random grades 0-3 and about 10% unjudged. Next to `compute()` the same lists go through two
baselines measured in the same run, so the figures can be read on any machine:
`sum` is a bare Python loop adding up the M grades (the least any per-event Python code costs),
`sorted` sorts the judged pool (what a textbook IDCG does). The cost must stay linear in K.
Target: >= 100k events/s at K = 10 on one core. Rates are per second of CPU time of this
(single-threaded, pinned) process, so a busy machine slows the run but not the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence

from ragmon.core.measures import compute

TARGET_EVENTS_PER_S = 100_000
HEADLINE_KS = (10, 100)
LINEAR_KS = (10, 25, 50, 100)

Grades = list[int | None]


def make_events(k: int, n: int, seed: int = 7) -> list[Grades]:
    """`n` events of 2K passages: grades 0-3 with a realistic skew, ~10% unjudged."""
    rng = random.Random(seed + k)
    population: list[int | None] = [0, 0, 0, 1, 1, 2, 2, 3, None]
    return [[rng.choice(population) for _ in range(2 * k)] for _ in range(n)]


def run_compute(events: Sequence[Grades], k: int) -> None:
    for grades in events:
        compute(grades, k)


def run_sum(events: Sequence[Grades], k: int) -> None:
    for grades in events:
        total = 0
        for g in grades:
            if g:
                total += g


def run_sorted(events: Sequence[Grades], k: int) -> None:
    for grades in events:
        sorted([g for g in grades if g is not None], reverse=True)


def events_per_s(
    fn: Callable[[Sequence[Grades], int], None],
    events: Sequence[Grades],
    k: int,
    seconds: float,
    repeats: int,
) -> float:
    """Best of `repeats` runs of at least `seconds` of CPU time each.

    CPU time (not wall time) so that other processes on a shared machine do not lower the
    figure: it is events per second of one core's time.
    """
    best = 0.0
    for _ in range(repeats):
        done = 0
        start = time.process_time()
        while True:
            fn(events, k)
            done += len(events)
            elapsed = time.process_time() - start
            if elapsed >= seconds:
                break
        best = max(best, done / elapsed)
    return best


def pin_to_one_core() -> str:
    """Pin the process to one CPU so the figure is per core (Linux); say which."""
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="a quick run (about a second)")
    parser.add_argument("--seconds", type=float, help="time per measurement")
    args = parser.parse_args(argv)
    seconds = args.seconds or (0.02 if args.short else 0.5)
    repeats = 3 if args.short else 5
    n_events = 200 if args.short else 2000

    print(
        f"ragmon measures benchmark: Python {platform.python_version()} on "
        f"{platform.machine()}, {pin_to_one_core()}, {'short' if args.short else 'full'} mode, "
        "events per CPU-second"
    )
    print(f"each event: K passages in the prompt, M = 2K sent; {n_events} distinct events")
    print()
    header = (
        f"{'K':>4} {'M':>4} {'compute ev/s':>13} {'sum ev/s':>11} {'sorted ev/s':>12} "
        f"{'vs sum':>7} {'vs sorted':>10}"
    )
    print(header)
    print("-" * len(header))
    rows: dict[int, float] = {}
    for k in HEADLINE_KS:
        events = make_events(k, n_events)
        ours = events_per_s(run_compute, events, k, seconds, repeats)
        base_sum = events_per_s(run_sum, events, k, seconds, repeats)
        base_sorted = events_per_s(run_sorted, events, k, seconds, repeats)
        rows[k] = ours
        print(
            f"{k:>4} {2 * k:>4} {ours:>13,.0f} {base_sum:>11,.0f} {base_sorted:>12,.0f} "
            f"{base_sum / ours:>6.2f}x {base_sorted / ours:>9.2f}x"
        )
    print("(vs X = how many times longer compute() takes than baseline X on the same events)")
    print()

    print("cost against K (M = 2K):")
    print(f"{'K':>4} {'us/event':>9} {'ns/passage':>11}")
    costs = []
    for k in LINEAR_KS:
        events = make_events(k, n_events)
        rate = rows.get(k) or events_per_s(run_compute, events, k, seconds, repeats)
        us = 1e6 / rate
        costs.append((k, us))
        print(f"{k:>4} {us:>9.2f} {1000 * us / (2 * k):>11.1f}")
    slope, intercept = least_squares(costs)
    worst = max(abs(us - (intercept + slope * k)) / us for k, us in costs)
    print(
        f"fit: {intercept:.2f} us + {slope * 1000:.1f} ns x K "
        f"(largest deviation from the line: {100 * worst:.0f}%)"
    )
    print()
    verdict = "met" if rows[10] >= TARGET_EVENTS_PER_S else "MISSED"
    print(f"target >= {TARGET_EVENTS_PER_S:,} events/s at K=10: {rows[10]:,.0f} ({verdict})")
    return 0


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through `points`."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    slope = sxy / sxx
    return slope, my - slope * mx


if __name__ == "__main__":
    sys.exit(main())
