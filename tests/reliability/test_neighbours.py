"""The hostile-neighbour matrix, short form: while appA floods the API, bombs it and sends
hostile numbers (`tests.reliability.neighbours`), appB's request of every route keeps its
answer, and appA's hostile requests are refused, never a 5xx. The latency figures (health
p99, appB's ingest p99 against a quiet baseline) come from the long form,
`python -m tests.bench.bench_neighbours` (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from ragmon.api.costs import COSTS
from tests.reliability.neighbours import CHECKS, KEY_A, KEYS, answers, prepare
from tests.support.stack import Stack
from tests.support.waiting import scaled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
SECONDS = 4.0  # appA's loop: every hostile request several times over


def test_every_route_has_a_check() -> None:
    assert set(CHECKS) == set(COSTS), "add the route's appB request to neighbours.CHECKS"


def test_another_apps_answers_hold_while_one_app_floods_and_bombs(redis_url: str) -> None:
    stack = Stack(redis_url, workers=1, env={"RAGMON_API_KEYS": KEYS}).start()
    try:
        ctx = prepare(stack.url)
        quiet = dict(answers(ctx))
        hostile = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.neighbours", stack.url, KEY_A,
             str(SECONDS)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        rounds = 0
        try:
            while hostile.poll() is None or rounds == 0:
                for route, answer in answers(ctx):
                    assert answer == quiet[route], f"{route}: {answer!r} != {quiet[route]!r}"
                rounds += 1
        finally:
            out, _ = hostile.communicate(timeout=scaled(300))
        got = Counter(json.loads(out))
    finally:
        stack.stop()
    print(f"appB: {rounds} rounds of {len(CHECKS)} routes; appA: {dict(got)}")
    assert rounds >= 1
    kinds = {k.split()[0] for k in got}
    assert kinds == {"flood", "junk-series", "otlp-bomb", "grade-bomb", "hostile-numbers"}
    assert not [k for k in got if k.split()[1].startswith("5") and not k.endswith(" 503")], got
    assert got.get("hostile-numbers 422", 0) == sum(
        n for k, n in got.items() if k.startswith("hostile-numbers")
    )
    assert got.get("grade-bomb 413", 0) >= 1
