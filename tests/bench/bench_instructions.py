"""Instructions per event of the SDK's encoder, counted by valgrind: a figure noise cannot move.

    .venv/bin/python -m tests.bench.bench_instructions [--short] [--json out.json]

CPU time on a shared machine moves with everything else running; the number of instructions
executed does not. This runs a small program under `valgrind --tool=callgrind` (needed: the
`valgrind` package) twice, with N and with 6N events, and divides the difference by 5N, which
cancels what the program does once. Valgrind instruments only the measured phases: the program
starts uninstrumented (`--instr-atstart=no`; start-up under instrumentation was ~98 % of each
run's instructions and most of its time), and around each phase turns instrumentation on,
zeroes the counter and reads it back with `callgrind_control`. The phases, in one process
(start-up under valgrind is most of a run's CPU): the SDK encoder's pass (build, validate,
encode, copy into the outbox; no threads, no network) over realistic recorded events (K = 10,
20 passages of TREC DL text), with orjson and with the standard library's `json`; and the
baseline, `json.dumps` of the finished wire events, the least any hook must do. Making,
recording and freeing the app's passages is not counted. Before each phase the heap, the
recorded events included, is collected and frozen out of the garbage collector (as ragmon's
API does after start-up), so that collections of the benchmark's own data do not blur the
count.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.bench.hook_apps import REPO, load_corpus, machine

PHASES = ("sdk", "sdk-stdlib", "dumps")


def child(n: int) -> None:
    """The measured program over `n` events: prints each phase's instructions as JSON."""
    import ragmon.client.encoder as encoder
    import ragmon.client.events as events
    import ragmon.client.recorder as recorder

    corpus, queries = load_corpus()
    encoder.ENCODE_SLICE_S = 1e9  # no sleeps: count the work, not the yields
    orjson = events.orjson

    def hits(i: int) -> list[tuple[str, str, float]]:
        j = (i * 10) % (len(corpus) - 20)
        return [(pid, text, float(20 - r)) for r, (pid, text) in enumerate(corpus[j : j + 20])]

    counts: dict[str, int] = {}
    for phase in PHASES:
        events.orjson = None if phase == "sdk-stdlib" else orjson
        monitor = recorder.RetrievalMonitor("http://127.0.0.1:9", labels={"app": "bench"})
        monitor._threads = ()  # no threads: the encoder's pass runs here, once
        made, wire = [hits(i) for i in range(n)], []  # the app frees its passages: kept
        for i, passages in enumerate(made):
            query = queries[i % len(queries)]
            if phase == "dumps":
                labels = {"app": "bench"}
                wire.append(events.build_event(query, passages, 10, labels, timestamp=time.time()))
            else:
                monitor.record(query, passages, 10)
        gc.collect()
        gc.freeze()
        instrument()
        callgrind_control("--zero")  # from here on each instruction is counted
        if phase == "dumps":
            for event in wire:
                json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()
        else:
            monitor._encode_all()
        counts[phase] = counted()
        assert monitor.stats()["invalid"] == 0
        monitor._buf.clear()
        monitor._out.clear()
        del made, wire
        gc.unfreeze()
    print(json.dumps(counts))


def callgrind_control(*args: str) -> str:
    return subprocess.run(
        ["callgrind_control", *args, str(os.getpid())], capture_output=True, text=True, check=True
    ).stdout


def instrument() -> None:
    """Turn callgrind's instrumentation on for this process (the measured part starts)."""
    callgrind_control("--instr=on")


def counted() -> int:
    """Instructions counted since `instrument()`; instrumentation off again."""
    totals = callgrind_control("-e")
    callgrind_control("--instr=off")
    found = re.findall(r"^\s*Th\s+\d+\s+([\d,]+)", totals, re.M)
    if not found:
        raise RuntimeError(f"no callgrind totals in: {totals[-500:]}")
    return sum(int(v.replace(",", "")) for v in found)


def callgrind_count(module: str, args: list[str], timeout: float) -> int:
    """Instructions executed by `python -m module --child *args` after its `instrument()`
    (callgrind's total)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", module, "--child", *args],
        cwd=REPO, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
        timeout=timeout, check=True,
    )  # fmt: skip
    match = re.search(r"Collected : (\d+)", out.stderr)
    if not match:
        raise RuntimeError(f"no callgrind total in: {out.stderr[-500:]}")
    return int(match.group(1))


def run(short: bool = False) -> dict[str, Any]:
    n = 40 if short else 200
    sizes = (n, 6 * n)
    with ThreadPoolExecutor(len(sizes)) as pool:  # counts do not move with the load
        outs = list(pool.map(callgrind_output, sizes))
    small, large = (json.loads(o.strip().splitlines()[-1]) for o in outs)
    per = {phase: (large[phase] - small[phase]) / (5 * n) for phase in PHASES}
    out: dict[str, Any] = {"machine": machine(), "events": sizes}
    out["sdk"], out["sdk_stdlib"], out["dumps"] = per["sdk"], per["sdk-stdlib"], per["dumps"]
    return out


def callgrind_output(n: int) -> str:
    """What this module's measured program prints for `n` events, run under callgrind."""
    return subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "tests.bench.bench_instructions", "--child", str(n)],
        cwd=REPO, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
        timeout=900, check=True,
    ).stdout  # fmt: skip


def report(f: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"Instructions per event (callgrind, {f['events'][0]} and {f['events'][1]} events); "
            f"{f['machine']}",
            f"{'json.dumps of the finished wire event (baseline)':52} {f['dumps']:>10,.0f}",
            f"{'SDK encoder pass, orjson':52} {f['sdk']:>10,.0f}  "
            f"({f['sdk'] / f['dumps']:.2f}x the baseline)",
            f"{'SDK encoder pass, stdlib json':52} {f['sdk_stdlib']:>10,.0f}  "
            f"({f['sdk_stdlib'] / f['dumps']:.2f}x)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="fewer events (CI)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    if not shutil.which("valgrind"):
        print("bench_instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    figures = run(args.short)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
