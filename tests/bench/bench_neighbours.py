"""The hostile-neighbour matrix, long form: appB's latencies while appA floods the API, bombs
it and sends hostile numbers (`tests.reliability.neighbours`), against a quiet baseline on the
same server in the same run.

    .venv/bin/python -m tests.bench.bench_neighbours [--short] [--seconds 30] [--worker-nice 19]

One `ragmon serve` and one worker on a fresh Redis, two keys (appA, appB). Each phase (quiet,
then with appA's loop in a process of its own, at nice 10: its bodies are built once, and
what is left of its CPU, sending them, stands for another machine) runs for `--seconds`:
`/healthz` on a fresh connection every 50 ms, appB's single-event POSTs and one-span OTLP
exports back to back, and appB's request of every route once a round (`CHECKS`), whose answers
must equal the quiet ones. `--worker-nice 19` runs the worker as if on a machine of its
own (it judges appA's flood too). Printed: p50/p99 of each, quiet -> neighbour, and appA's
answers by kind and status. Targets: health p99 <= 100 ms, appB's ingest and export p99
<= 1.5x quiet.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import redis

from ragmon.store import scripts
from tests.bench.common import cpu_of, exit_on_sigterm, machine, ms, pct
from tests.reliability.attacks import watch
from tests.reliability.neighbours import KEY_A, KEYS, Context, _post_one, _traces, answers, prepare
from tests.support.stack import Child, RedisServer, Stack, redis_server, stop_all

HEALTH_P99_MS, RATIO = 100.0, 1.5
CLIENT_NICE = 10  # appA's client stands for another machine: its own CPU is not the server's


def timed(call: Callable[[Context], object], ctx: Context, seconds: float) -> list[float]:
    """`call(ctx)` back to back for `seconds`: each one's latency."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        call(ctx)
        out.append(time.perf_counter() - t0)
    return out


def phase(stack: Stack, ctx: Context, seconds: float, quiet: dict | None) -> dict:
    """Latencies of one phase; the routes' answers checked against `quiet` (when given)."""
    got: dict = {}
    work = {
        "ingest": lambda: got.__setitem__("ingest", timed(_post_one, ctx, seconds)),
        "export": lambda: got.__setitem__("export", timed(_traces, ctx, seconds)),
    }
    threads = [threading.Thread(target=f) for f in work.values()]
    for t in threads:
        t.start()
    assert stack.api is not None
    got["health"] = watch(stack.url, stack.api.pid, seconds).answered
    for t in threads:
        t.join()
    rounds, changed = 0, []
    end = time.monotonic() + seconds / 3
    while time.monotonic() < end or rounds == 0:
        for route, answer in answers(ctx):
            if quiet is not None and answer != quiet[route]:
                changed.append(route)
        rounds += 1
    got["rounds"], got["changed"] = rounds, sorted(set(changed))
    return got


def server_cpu(stack: Stack, rs: RedisServer) -> float:
    """CPU seconds so far of the server's processes (the API and its children, the workers,
    Redis)."""
    return sum(cpu_of(c.pid) for c in [stack.api, *stack.workers, rs.proc] if c is not None)


HOG = """
import sys, time
duty = float(sys.argv[1])
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < duty * 0.01:
        pass
    time.sleep((1 - duty) * 0.01)
"""


def hogs(cores: float, nice: int = 0) -> list[Child]:
    """Processes that together burn `cores` CPUs (each its share of every 10 ms), in sessions
    of their own like the server's processes: the control phase's stand-in for appA's work."""
    n = max(1, math.ceil(cores))
    share = str(min(1.0, cores / n))
    return [Child([sys.executable, "-c", HOG, share], nice=nice) for _ in range(n)]


def measured(stack: Stack, rs: RedisServer, run: Callable[[], dict]) -> tuple[dict, float]:
    """`run()`'s result and the CPUs the server used meanwhile."""
    t0, cpu0 = time.monotonic(), server_cpu(stack, rs)
    got = run()
    return got, (server_cpu(stack, rs) - cpu0) / (time.monotonic() - t0)


def longest_scripts(client: redis.Redis) -> str:
    """The longest run of each Lua script in Redis' slow log (those over 1 ms since it was
    reset): what another app's write waited for at most."""
    names = {hashlib.sha1(x.source.encode()).hexdigest(): x.name for x in scripts.ALL}
    longest: dict[str, float] = {}
    for entry in client.slowlog_get(1024):
        command = entry["command"].split()
        if command[0] in (b"EVALSHA", b"EVAL"):
            name = names.get(command[1].decode(), "other") if command[0] == b"EVALSHA" else "EVAL"
            longest[name] = max(longest.get(name, 0.0), entry["duration"] / 1e6)
    ranked = sorted(longest.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {ms(d)} ms" for name, d in ranked) or "none over 1 ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_neighbours", description=__doc__)
    p.add_argument("--seconds", type=float, default=30.0, help="per phase (default 30)")
    p.add_argument("--short", action="store_true", help="1.5 s phases (the test's run)")
    p.add_argument("--worker-nice", type=int, default=0,
                   help="the worker's niceness (19: as if on a machine of its own)")  # fmt: skip
    args = p.parse_args(argv)
    if args.short:
        args.seconds = 1.5
    exit_on_sigterm()
    print(machine())
    with redis_server() as rs:
        stack = Stack(rs.url, workers=0, env={"RAGMON_API_KEYS": KEYS}).start()
        stack.nice = args.worker_nice
        stack.add_worker()
        stack.nice = 0
        try:
            ctx = prepare(stack.url)
            baseline = dict(answers(ctx))
            quiet, quiet_cpu = measured(stack, rs, lambda: phase(stack, ctx, args.seconds, None))
            hostile = subprocess.Popen(
                ["nice", "-n", str(CLIENT_NICE), sys.executable, "-m",
                 "tests.reliability.neighbours", stack.url, KEY_A, str(args.seconds * 4 / 3)],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            client = redis.Redis.from_url(rs.url)
            client.config_set("slowlog-log-slower-than", 1000)
            client.config_set("slowlog-max-len", 1024)
            client.slowlog_reset()
            under, under_cpu = measured(
                stack, rs, lambda: phase(stack, ctx, args.seconds, baseline)
            )
            scripts_beside = longest_scripts(client)
            client.close()
            neighbour = json.loads(hostile.communicate(timeout=args.seconds + 600)[0])
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            client_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            extra = max(0.0, under_cpu - quiet_cpu)
            client = client_cpu / (args.seconds * 4 / 3)
            burning = [*hogs(extra), *hogs(client, CLIENT_NICE)]
            try:
                control, _ = measured(stack, rs, lambda: phase(stack, ctx, args.seconds, baseline))
            finally:
                stop_all(burning)
        finally:
            stack.stop()
    print(f"server CPU: quiet {quiet_cpu:.2f} CPUs, appA beside it {under_cpu:.2f}; "
          f"appA's client {client:.2f}")  # fmt: skip
    met = not under["changed"]
    for name in ("health", "ingest", "export"):
        q, u, c = quiet[name], under[name], control[name]
        target = HEALTH_P99_MS / 1000 if name == "health" else RATIO * pct(q, 99)
        ok = pct(u, 99) <= target
        met &= ok
        print(
            f"appB {name:7s} n={len(q)}/{len(u)}  p50 {ms(pct(q, 50))} -> {ms(pct(u, 50))} ms, "
            f"p99 {ms(pct(q, 99))} -> {ms(pct(u, 99))} ms ({pct(u, 99) / pct(q, 99):.2f}x; "
            f"target {ms(target)} ms) {'met' if ok else 'MISSED'}; beside CPU hogs of the "
            f"same CPU instead: p99 {ms(pct(c, 99))} ms ({pct(c, 99) / pct(q, 99):.2f}x)"
        )
    print(f"appB routes: {under['rounds']} rounds of every route under the neighbour, "
          f"answers changed: {under['changed'] or 'none'}")  # fmt: skip
    print(f"longest Lua scripts beside appA (Redis runs one at a time): {scripts_beside}")
    print(f"appA answers: {neighbour}")
    print("targets met" if met else "TARGETS MISSED")
    return 1 if under["changed"] else 0  # a latency missed is a figure; a changed answer a bug


if __name__ == "__main__":
    sys.exit(main())
