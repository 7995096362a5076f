"""The fleet under faults, long: tests/reliability/fleet.py's scenario with more traffic, with
and without RAGMON_WAIT_REPLICAS, with the replica in step and behind, `--rounds` times each.

    .venv/bin/python -m tests.bench.bench_fleet [--step 300] [--pause 0.01] [--rounds 2]

A Redis primary, a replica and three Sentinels (quorum 2); two `ragmon serve` and three
`ragmon worker` on them; the fake OpenAI judge (50 ms an answer); single events posted one after
another (`--pause` between them), alternating between the two APIs and retried on 503 and
connection errors. Once `--step` events are acknowledged the primary dies by SIGKILL (when the
Sentinels have promoted the replica it restarts, empty, and they make it a replica); `--step`
events later the worker in a drain job dies, then an API, and the traffic ends `--step` events
after that. Each run prints its tally (sent, acknowledged, done, counted) and the failover's
figures: events acknowledged yet missing after it (and how long before the kill each was
acknowledged), the kill to the promotion, the kill to the next `202`.
"""

from __future__ import annotations

import argparse

from tests.bench.common import exit_on_sigterm, machine
from tests.reliability import fleet


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_fleet", description=__doc__)
    p.add_argument("--step", type=int, default=300, help="events between faults (300)")
    p.add_argument("--pause", type=float, default=0.01, help="seconds between events (0.01)")
    p.add_argument("--rounds", type=int, default=2, help="runs with and without WAIT (2)")
    args = p.parse_args(argv)
    exit_on_sigterm()
    print(machine(), flush=True)
    bad = 0
    for r in range(args.rounds):
        for wait, lag in ((1, False), (0, False), (1, True), (0, True)):
            seed0 = 1_000_000 * (4 * r + 2 * wait + lag + 1)
            o = fleet.run(args.step, wait, args.pause, lag, seed0=seed0)
            t = o.tally
            print(f"round {r + 1}: {t.line()}", flush=True)
            if o.lost:
                ages = ", ".join(f"{s * 1000:.0f}" for s in sorted(o.lost_before_kill_s))
                print(f"  lost events acknowledged this many ms before the kill: {ages}")
            kept = t.accepted - len(o.lost)
            once = o.observed == (t.done, t.done) and kept == t.done == t.counted
            window = o.lag_s if lag else fleet.WINDOW_S
            late = [s for s in o.lost_before_kill_s if s > window]
            ok = once and not late and not (wait and o.lost)
            verdict = "ok" if ok else "FAILED"
            where = f"lost outside the {window * 1000:.0f} ms window: {len(late)}"
            print(f"  {verdict}: judged and counted once: {once}; {where}", flush=True)
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
