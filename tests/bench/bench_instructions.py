"""Instructions per event of the SDK's encoder, counted by valgrind: a figure noise cannot move.

    .venv/bin/python -m tests.bench.bench_instructions [--short] [--json out.json]

CPU time on a shared machine moves with everything else running; the number of instructions
executed does not. This runs small programs under `valgrind --tool=callgrind` (needed: the
`valgrind` package), each twice, with N and with 6N events, and divides the difference by 5N,
which cancels what each program does once. Valgrind instruments only the measured part: a
program starts uninstrumented (`--instr-atstart=no`; start-up under instrumentation was ~98 %
of each run's instructions and most of its time) and turns it on with `callgrind_control`
once its imports, corpus and monitor are ready. The programs record realistic events (K = 10, 20
passages of TREC DL text) and run the encoder's pass over them (build, validate, encode, copy
into the outbox; no threads, no network), with orjson and with the standard library's `json`;
the same events recorded but not encoded are subtracted. The baseline, in the same run:
`json.dumps` of the finished wire events, the least any hook must do.
The start-up heap is frozen out of the garbage collector (as ragmon's API does) so that
collections of the benchmark's own data do not blur the count.
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

MODES = ("drive", "sdk", "sdk-stdlib", "wire", "wire-dumps")


def child(mode: str, n: int) -> None:
    """The measured program: `mode` over `n` events."""
    import ragmon.client.encoder as encoder
    import ragmon.client.events as events
    import ragmon.client.recorder as recorder

    if mode == "sdk-stdlib":
        events.orjson = None
    corpus, queries = load_corpus()
    monitor = recorder.RetrievalMonitor("http://127.0.0.1:9", labels={"app": "bench"})
    monitor._threads = ()  # no threads: the encoder's pass runs here, once
    encoder.ENCODE_SLICE_S = 1e9  # no sleeps: count the work, not the yields
    gc.collect()
    gc.freeze()
    instrument()  # from here on each instruction is counted
    wire = []
    for i in range(n):
        j = (i * 10) % (len(corpus) - 20)
        hits = [(pid, text, float(20 - r)) for r, (pid, text) in enumerate(corpus[j : j + 20])]
        query = queries[i % len(queries)]
        if mode.startswith("wire"):
            labels = {"app": "bench"}
            wire.append(events.build_event(query, hits, 10, labels, timestamp=time.time()))
        else:
            monitor.record(query, hits, 10)
    if mode.startswith("sdk"):
        monitor._encode_all()
        assert monitor.stats()["invalid"] == 0
    elif mode == "wire-dumps":
        for event in wire:
            json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()
    monitor._buf.clear()
    monitor._out.clear()


def instrument() -> None:
    """Turn callgrind's instrumentation on for this process (the measured part starts)."""
    subprocess.run(
        ["callgrind_control", "--instr=on", str(os.getpid())], capture_output=True, check=True
    )


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


def count(mode: str, n: int) -> int:
    """Instructions executed by this module's child program in `mode` for `n` events."""
    return callgrind_count("tests.bench.bench_instructions", [mode, str(n)], 900)


def run(short: bool = False) -> dict[str, Any]:
    n = 40 if short else 200
    jobs = [(mode, m) for mode in MODES for m in (n, 6 * n)]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # counts do not move with the load
        total = dict(zip(jobs, pool.map(lambda job: count(*job), jobs), strict=True))
    per = {mode: (total[mode, 6 * n] - total[mode, n]) / (5 * n) for mode in MODES}
    out: dict[str, Any] = {"machine": machine(), "events": (n, 6 * n)}
    out["sdk"] = per["sdk"] - per["drive"]
    out["sdk_stdlib"] = per["sdk-stdlib"] - per["drive"]
    out["dumps"] = per["wire-dumps"] - per["wire"]
    return out


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
    p.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
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
