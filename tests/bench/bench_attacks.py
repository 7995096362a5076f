"""`/healthz` and the API's memory during each attack of issue 33, against a quiet baseline on
the same server in the same run.

    .venv/bin/python -m tests.bench.bench_attacks [--seconds 15] [--only NAME,NAME]

For each attack of `tests.reliability.attacks.ATTACKS`: a fresh `ragmon serve` (the attack's
settings and open-files limit) on a flushed Redis, warmed with one ordinary request of the
attacked route (so the decoding process exists before the baseline); then `/healthz` on a fresh
connection every 50 ms for `--seconds` alone (quiet), then for `--seconds` while the attack runs
in a process of its own. Printed per attack: health checks answered, p50/p99/max quiet and
under attack, the p99 ratio, the growth of the API's resident memory under attack (its own
process, and with its children), and the attack's answers by status. Targets: p99 under
attack <= 100 ms, memory growth <= 200 MiB (both figures).
"""

from __future__ import annotations

import argparse
import json
import sys

import redis

from tests.bench.common import exit_on_sigterm, machine, ms, pct
from tests.reliability.attacks import ATTACKS, attacking, serve, watch
from tests.support.stack import redis_server

P99_MS, MEMORY_MIB = 100.0, 200.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_attacks", description=__doc__)
    p.add_argument("--seconds", type=float, default=15.0, help="per phase (default 15)")
    p.add_argument("--only", help="comma-separated attacks, of " + ",".join(ATTACKS))
    args = p.parse_args(argv)
    exit_on_sigterm()
    print(machine())
    names = args.only.split(",") if args.only else list(ATTACKS)
    met = True
    with redis_server() as rs:
        for name in names:
            with redis.Redis.from_url(rs.url) as client:
                client.flushdb()
            proc, url = serve(ATTACKS[name], rs.url)
            try:
                quiet = watch(url, proc.pid, args.seconds)
                with attacking(name, url, args.seconds) as attack:
                    under = watch(url, proc.pid, args.seconds)
                    answers = json.loads(attack.communicate(timeout=args.seconds + 300)[0])
            finally:
                proc.stop()
            q, u = quiet.answered, under.answered
            grew = max(under.api_grew_mib, under.tree_grew_mib)
            ok = under.failed == 0 and pct(u, 99) * 1000 <= P99_MS and grew <= MEMORY_MIB
            met &= ok
            print(
                f"{name:28s} /healthz {len(u)}/{len(under.latencies)} answered; p50 "
                f"{ms(pct(q, 50))} -> {ms(pct(u, 50))} ms, p99 {ms(pct(q, 99))} -> "
                f"{ms(pct(u, 99))} ms "
                f"({pct(u, 99) / pct(q, 99):.1f}x), max {ms(max(u, default=0))} ms; memory "
                f"API +{under.api_grew_mib:.0f} MiB, with its children "
                f"+{under.tree_grew_mib:.0f} MiB; answers {answers}; {'ok' if ok else 'NOT met'}",
                flush=True,
            )
    print(f"targets: every /healthz answered, p99 <= {P99_MS:g} ms, memory <= +{MEMORY_MIB:g} MiB:"
          f" {'met' if met else 'NOT met'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
