"""The fleet-wide judge limiter: Redis sliding windows shared by processes, seen by the server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.judge_state import Budget, JudgeCall, JudgeState
from ragmon.workers.admission import RateLimiter
from tests.support.api_server import ApiServer
from tests.support.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parents[2]


def max_in_window(times: list[float], window: float) -> int:
    """The most arrivals in any half-open window [t, t + window)."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


# Waits are whole milliseconds of Redis' clock: the bound allows two roundings.
MS = 0.002


@pytest.fixture
def state(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield JudgeState(client)
    client.close()


def test_requests_per_window(state):
    t0 = time.monotonic()
    admitted = [state.try_acquire("m", rpm=3, tpm=0, tokens=10, window_s=1.0) for _ in range(4)]
    took = time.monotonic() - t0
    assert [t is not None for _, t in admitted] == [True, True, True, False]
    wait = admitted[3][0]
    assert 1.0 - took - MS <= wait <= 1.0  # until the oldest call leaves the window
    assert state.window_usage("m", 1.0) == (3, 30)
    time.sleep(wait + 0.01)
    assert state.try_acquire("m", rpm=3, tpm=0, tokens=10, window_s=1.0)[1] is not None


def test_tokens_per_window_with_settled_usage(state):
    t0 = time.monotonic()
    _, a = state.try_acquire("m", rpm=0, tpm=100, tokens=60, window_s=5.0)
    wait, b = state.try_acquire("m", rpm=0, tpm=100, tokens=60, window_s=5.0)
    took = time.monotonic() - t0
    assert a is not None and b is None and 5.0 - took - MS <= wait <= 5.0
    before = state.client.zscore(state.keys.rate("m", "req"), a.call_id)
    time.sleep(0.01)
    state.settle(a, 30)  # the call used fewer tokens than reserved
    assert state.client.zscore(state.keys.rate("m", "req"), a.call_id) > before  # re-stamped
    _, c = state.try_acquire("m", rpm=0, tpm=100, tokens=60, window_s=5.0)
    assert c is not None
    assert state.window_usage("m", 5.0) == (2, 90)


def test_a_call_bigger_than_the_tpm_runs_alone(state):
    t0 = time.monotonic()
    _, big = state.try_acquire("m", rpm=0, tpm=100, tokens=500, window_s=1.0)
    assert big is not None
    wait, none = state.try_acquire("m", rpm=0, tpm=100, tokens=1, window_s=1.0)
    took = time.monotonic() - t0
    assert none is None and 1.0 - took - MS <= wait <= 1.0


def test_models_have_separate_windows(state):
    assert state.try_acquire("a", rpm=1, tpm=0, tokens=1)[1] is not None
    assert state.try_acquire("b", rpm=1, tpm=0, tokens=1)[1] is not None
    assert state.try_acquire("a", rpm=1, tpm=0, tokens=1)[1] is None


def test_limiter_waits_its_turn(state):
    limiter = RateLimiter(state, "m", rpm=2, tpm=0, window_s=0.5)

    async def go() -> list[float]:
        async def one() -> float:
            await limiter.acquire(1)
            return time.perf_counter()

        return list(await asyncio.gather(*(one() for _ in range(6))))

    t0 = time.perf_counter()
    times = [t - t0 for t in asyncio.run(go())]
    assert max_in_window(times, 0.45) <= 2
    assert max(times) >= 1.0  # 6 calls at 2 per 0.5 s need three windows


def test_budget(state):
    assert not Budget(state, 0).exhausted("2030-01-01")
    state.record_call("m", "ok", 0.1, "2030-01-01", 1000, 10, cost_usd=0.75)
    assert not Budget(state, 1.0).exhausted("2030-01-01")
    state.record_call("m", "ok", 0.1, "2030-01-01", 1000, 10, cost_usd=0.25)
    assert Budget(state, 1.0).exhausted("2030-01-01")
    assert 0 < state.client.ttl(state.keys.spend("2030-01-01")) <= 8 * 86400


def test_calls_counted_together_add_up_to_the_same_counters_as_one_by_one(state):
    """`record_calls` (the judge's once-per-event write) sums its fields before writing."""
    calls = [
        JudgeCall("m", "ok", 0.2, "2030-01-02", 100, 3, 0.5),
        JudgeCall("m", "ok", 0.7, "2030-01-02", 120, 2, 0.25),
        JudgeCall("m", "timeout", None, "2030-01-02"),
        JudgeCall("m", "ok", 0.3, "2030-01-03", 10, 1, 0.125),
        JudgeCall("n", "malformed", 0.1, "2030-01-02", 50, 9),
    ]
    days = ("2030-01-02", "2030-01-03")
    hashes = [state.keys.counters, state.keys.hist, *map(state.keys.day_counters, days)]

    def taken() -> tuple[list[dict[bytes, float]], list[float]]:
        out = [{f: float(v) for f, v in state.client.hgetall(k).items()} for k in hashes]
        spent = [state.spent(day) for day in days]
        for key in hashes[2:] + [state.keys.spend(day) for day in days]:
            assert state.client.ttl(key) > 0
        state.client.delete(*hashes, *(state.keys.spend(day) for day in days))
        return out, spent

    for c in calls:
        state.record_call(c.model, c.outcome, c.latency_s, c.day, c.input_tokens,
                          c.output_tokens, c.cost_usd)  # fmt: skip
    one_by_one = taken()
    state.record_calls(calls)
    together = taken()
    assert together[1] == pytest.approx(one_by_one[1])
    for got, expected in zip(together[0], one_by_one[0], strict=True):
        assert got == pytest.approx(expected)


# ---- across processes, as the provider sees it ----------------------------------------------

HAMMER = """
import asyncio, sys
import openai, redis
from ragmon.store.judge_state import JudgeState
from ragmon.workers.admission import RateLimiter

redis_url, base_url = sys.argv[1], sys.argv[2]
n, rpm, window = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

async def main():
    limiter = RateLimiter(JudgeState(redis.Redis.from_url(redis_url)), "m", rpm, 0, window)
    client = openai.AsyncOpenAI(api_key="k", base_url=base_url, max_retries=0)
    async def one(i):
        ticket = await limiter.acquire(100)
        try:
            messages = [{"role": "user", "content": str(i)}]
            await client.chat.completions.create(model="m", messages=messages)
        finally:
            limiter.settle(ticket, 100)
    await asyncio.gather(*(one(i) for i in range(n)))
    await client.close()

asyncio.run(main())
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.slow
def test_processes_share_the_window_as_seen_by_the_server(redis_url):
    rpm, window, margin, procs, per_proc = 8, 2.0, 0.15, 3, 12
    with FakeLLM(latency=0.05) as fake:
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    HAMMER,
                    redis_url,
                    fake.url,
                    str(per_proc),
                    str(rpm),
                    str(window + margin),
                ],
                env=_env(),
                cwd=ROOT,
            )  # fmt: skip
            for _ in range(procs)
        ]
        for child in children:
            assert child.wait(timeout=60) == 0
        times = [r.at for r in fake.chat_requests()]
    assert len(times) == procs * per_proc
    assert max_in_window(times, window) <= rpm
    assert max(times) - min(times) >= (procs * per_proc / rpm - 1) * window  # it did hold back


@pytest.mark.slow
def test_two_workers_never_exceed_the_rpm_in_any_minute(redis_url):
    """Two `ragmon worker` processes, RAGMON_JUDGE_RPM=10, 16 calls: the server sees at most
    10 in any 60 s (this test takes a little over a minute)."""
    rpm = 10
    with FakeLLM(latency=0.05) as fake:
        env = {
            "REDIS_URL": redis_url,
            "RAGMON_JUDGE": "openai",
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "sk-test",
            "RAGMON_JUDGE_RPM": str(rpm),
            "RAGMON_JOB_BATCH_SIZE": "1",
        }
        settings = Settings.from_env(env, dotenv=None)
        api = ApiServer(settings).start()
        try:
            ids = []
            for i in range(8):
                event = {
                    "query": f"question number {i} about fleas",
                    "k": 1,
                    "passages": [
                        {"id": "a", "text": f"fleas answer {i}"},
                        {"id": "b", "text": f"other text {i}"},
                    ],
                }
                r = api.client.post("/v1/retrievals", json=event)
                assert r.status_code == 202
                ids.append(r.json()["event_id"])
            workers = [
                subprocess.Popen(
                    [sys.executable, "-m", "ragmon.cli", "worker", "--burst", "--name", f"w{n}"],
                    env=_env(**env),
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for n in range(2)
            ]
            for w in workers:
                assert w.wait(timeout=180) == 0
            store = Store.connect(settings)
            statuses = [store.result("default", eid)["status"] for eid in ids]
            names = {w.decode() for w in store.client.smembers("rq:workers")} | {"w0", "w1"}
        finally:
            api.stop()
        calls = fake.chat_requests()
        times = [r.at for r in calls]
    assert statuses == ["done"] * 8
    assert len(names) >= 2
    # each worker's start-up probe is one call, admitted by the same limit as the others
    assert sum("<<<PASSAGE" in r.prompt for r in calls) == 16 and len(times) == 18
    assert max_in_window(times, 60.0) <= rpm
    assert sorted(times)[rpm] - min(times) >= 60.0  # the 11th call waited for the window
