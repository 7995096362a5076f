"""What the retrieval signals add to the API's work per event: instructions, counted by valgrind.

    .venv/bin/python -m tests.bench.bench_signals [--short]

The API's own work per event that the signals touch, without HTTP or Redis: a request body read
into items (`prepare_events`: parse, validate, seal, sample, and `signal_record`), INGEST's
arguments built (`plan_ingest`) and encoded as redis-py sends them. Counted with and without
the signals (`signal_record` swapped for one that records none: the items then carry no group)
as `bench_instructions` counts (callgrind, instrumented from the first request on; N and 6N
requests, the difference over 5N, so what a program does once cancels): CPU time on this shared
machine moved by ±30 % between runs, instruction counts do not. The event is bench_ingest's
(K = 10, 20 scored passages), alone in its body and 100 to a batch. The figure to hold against
the +10 % budget is the added work over the whole server's CPU per event, which
`bench_ingest` measures (docs/performance.md).
"""

from __future__ import annotations

import argparse
import gc
import os
from concurrent.futures import ThreadPoolExecutor

from tests.bench.bench_instructions import callgrind_count, instrument

CASES = {"single": 1, "batch": 100}  # events per request


def _no_signals(query: str, k: int, ids: object, scores: object) -> str:
    return ""


def child(case: str, variant: str, n: int) -> None:
    """The measured program: `n` requests of `case` through the write path's own work."""
    import redis
    from redis.connection import Encoder

    from ragmon.api import service
    from ragmon.api.schemas import RetrievalBatch, RetrievalEvent
    from ragmon.settings import Settings
    from ragmon.store import Store
    from ragmon.store.ingest import plan_ingest, signal_setup
    from tests.bench.common import Bodies, batch_template, event_template, topics

    settings = Settings.from_env({"REDIS_URL": "redis://localhost:1"}, dotenv=None)
    store = Store(redis.Redis(), settings)  # never connects: nothing here talks to Redis
    pairs = topics()
    if case == "single":
        bodies, model = Bodies(event_template(*pairs[0])), RetrievalEvent
    else:
        bodies, model = Bodies(batch_template(pairs, CASES[case])), RetrievalBatch
    if variant == "without":
        service.signal_record = _no_signals  # type: ignore[assignment]
    encoder = Encoder("utf-8", "strict", False)
    setup = signal_setup(store.keys, settings)  # as the Store builds it, once
    ready = [bodies.next() for _ in range(n)]
    gc.collect()
    gc.freeze()  # as the API does after start-up
    instrument()
    for body in ready:
        items = service.prepare_events(settings, body, model, None, store.sealer)
        plan = plan_ingest(store.keys, settings, items, setup=setup)
        for a in (*plan.keys, *plan.args):
            encoder.encode(a)


def count(case: str, variant: str, n: int) -> int:
    return callgrind_count("tests.bench.bench_signals", [case, variant, str(n)], 1800)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_signals", description=__doc__)
    p.add_argument("--short", action="store_true", help="fewer requests")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    requests = {"single": 40 if args.short else 200, "batch": 2 if args.short else 6}
    jobs = [(c, v, m * requests[c]) for c in CASES for v in ("with", "without") for m in (1, 6)]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        total = dict(zip(jobs, pool.map(lambda job: count(*job), jobs), strict=True))
    print("Instructions per event of the API's write path (parse .. INGEST's arguments encoded)")
    print("| body | with signals | without | added |")
    print("| --- | --- | --- | --- |")
    for c, per_request in CASES.items():
        n = requests[c]
        per = {
            v: (total[c, v, 6 * n] - total[c, v, n]) / (5 * n * per_request)
            for v in ("with", "without")
        }
        added = per["with"] - per["without"]
        name = f"{c} ({per_request} event{'s' * (per_request > 1)})"
        print(f"| {name} | {per['with']:,.0f} | {per['without']:,.0f} | "
              f"{added:+,.0f} ({added / per['without']:+.1%}) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
