"""Fuzz the real API from its own OpenAPI schema with schemathesis: no answer may be a 5xx.

    python -m tests.reliability.fuzz --examples 1000      # several thousand requests

starts a Redis and `ragmon serve` (with an API key, sent on every request) on loopback, runs
`schemathesis run` against `/openapi.json` with the `not_a_server_error` check, and counts
every response's status from schemathesis' NDJSON report. Exit status 1 on any 5xx.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.support.stack import REPO, RedisServer, ragmon_env, start_api

KEY = "fuzz-api-key-0123456789abcdef"
_STATUS = re.compile(r'"status_code": ?(\d{3})')


@dataclass
class FuzzResult:
    statuses: Counter
    returncode: int
    seconds: float
    output: str

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.statuses.items() if code >= 500)

    def summary(self) -> str:
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(self.statuses.items()))
        return (
            f"schemathesis: {self.requests} requests in {self.seconds:.0f} s, "
            f"{self.server_errors} answered 5xx ({codes})"
        )


def schemathesis_bin() -> str:
    found = Path(sys.executable).with_name("schemathesis")
    return str(found) if found.exists() else (shutil.which("schemathesis") or "schemathesis")


def fuzz(examples: int, seed: int = 1, workers: int = 1) -> FuzzResult:
    """Run the whole fuzz on fresh processes and return what the server answered."""
    redis = RedisServer().start()
    tmp = Path(tempfile.mkdtemp(prefix="ragmon-fuzz-"))
    env = ragmon_env(redis.url, RAGMON_API_KEYS=KEY, PYTHONPATH=str(REPO))
    api = None
    try:
        api, url = start_api(env, cwd=tmp)
        report = tmp / "report.ndjson"
        started = time.monotonic()
        proc = subprocess.run(
            [
                schemathesis_bin(), "run", f"{url}/openapi.json",
                "--checks", "not_a_server_error",
                "-H", f"Authorization: Bearer {KEY}",
                "--max-examples", str(examples),
                "--seed", str(seed),
                "--workers", str(workers),
                "--generation-database", "none",
                "--request-timeout", "30",
                "--report", "ndjson", "--report-ndjson-path", str(report),
            ],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        seconds = time.monotonic() - started
        statuses: Counter = Counter()
        if report.exists():
            for line in report.read_text().splitlines():
                statuses.update(int(c) for c in _STATUS.findall(line))
        return FuzzResult(statuses, proc.returncode, seconds, proc.stdout + proc.stderr)
    finally:
        if api is not None:
            api.stop(grace=15)
        redis.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.fuzz")
    p.add_argument("--examples", type=int, default=1000, help="max examples per operation")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    result = fuzz(args.examples, args.seed, args.workers)
    tail = result.output.strip().splitlines()[-12:]
    print("\n".join(tail))
    print(result.summary())
    print(json.dumps({"requests": result.requests, "5xx": result.server_errors}))
    return 1 if result.server_errors or result.requests == 0 or result.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
