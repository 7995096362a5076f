"""Redis' memory at its limit, with real processes (issue 43): near `maxmemory` the app holding
most gets `507` naming the limit while another app's events are still stored, every accepted
event is judged (none lost), /metrics keeps answering with the forecast the alert reads; and
`ragmon worker` and `ragmon serve` warn at start when Redis' eviction policy could drop
accepted events."""

from __future__ import annotations

import time

import pytest
import redis

from tests.support.cli import Ragmon
from tests.support.events import make_event
from tests.support.stack import RedisServer, Stack, clean_env, free_port, sample_value
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow

LIMIT_MB = 16


def big_event(i: int, app: str) -> dict:
    ev = make_event(n=4, k=2, seed=i)
    ev["labels"] = {**ev["labels"], "app": app}
    for p in ev["passages"]:
        p["text"] = f"{p['text']} " + "filler words " * 200  # ~2.6 KB a passage
    return ev


def labeled(client: redis.Redis) -> int:
    return int(client.hget("ragmon:c", "events_labeled") or 0)


def test_near_maxmemory_the_app_holding_most_gets_507_and_nothing_accepted_is_lost() -> None:
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used + LIMIT_MB * 1024 * 1024)
        client.config_set("maxmemory-policy", "noeviction")
        stack = Stack(server.url, workers=1, env={"RAGMON_JUDGE": "lexical",
                                                  "RAGMON_SAMPLE_RATE": "1"}).start()  # fmt: skip
        try:
            accepted: list[str] = []
            refusal = None
            for b in range(400):
                batch = [big_event(b * 20 + i, "flood") for i in range(20)]
                r = stack.client.post("/v1/retrievals/batch", json={"events": batch})
                if r.status_code == 507:
                    refusal = r.json()["detail"]
                    break
                assert r.status_code == 202, r.text
                accepted += [e["event_id"] for e in batch]
            assert refusal is not None, "never refused"
            assert "'flood'" in refusal and "maxmemory" in refusal
            assert "RAGMON_MEMORY_HIGH" in refusal
            quiet = [big_event(10_000 + i, "quiet") for i in range(3)]
            r = stack.client.post("/v1/retrievals/batch", json={"events": quiet})
            assert r.status_code == 202, r.text  # another app's events are still stored
            deadline = time.monotonic() + scaled(300)
            while labeled(client) < len(accepted) + len(quiet):  # every accepted one judged
                assert time.monotonic() < deadline, (labeled(client), len(accepted))
                time.sleep(0.5)
            sample = stack.wait_done(accepted[:: max(1, len(accepted) // 50)], app="flood")
            assert {d["status"] for d in sample} == {"done"}  # nothing accepted is lost
            assert {d["status"] for d in stack.wait_done([e["event_id"] for e in quiet],
                                                         app="quiet")} == {"done"}  # fmt: skip
            text = stack.metrics()
            rejected = sample_value(text, "ragmon_events_rejected_total", {"reason": "memory_high"})
            assert rejected >= 1
            maxmemory = sample_value(text, "ragmon_redis_maxmemory_bytes")
            forecast = sample_value(text, "ragmon_memory_forecast_total_bytes")
            assert maxmemory > 0 and forecast > 0.9 * maxmemory  # RagmonMemoryForecastHigh's
            assert sample_value(text, "ragmon_redis_evicting") == 0
            flood = sample_value(text, "ragmon_memory_held_bytes", {"app": "flood"})
            assert flood > 0.5 * LIMIT_MB * 1024 * 1024
        finally:
            stack.stop()
    finally:
        server.stop()


def test_an_evicting_policy_is_a_warning_at_start(tmp_path) -> None:
    server = RedisServer().start()
    try:
        redis.Redis.from_url(server.url).config_set("maxmemory-policy", "allkeys-lru")
        env = clean_env(REDIS_URL=server.url, RAGMON_JUDGE="lexical")
        worker = Ragmon(["worker"], env, cwd=tmp_path)
        api = Ragmon(["serve", "--port", str(free_port())], env, cwd=tmp_path)
        try:
            for proc in (worker, api):
                (line,) = proc.wait_for(r"maxmemory-policy is allkeys-lru")
                assert "WARNING" in line and "noeviction" in line
        finally:
            worker.stop()
            api.stop()
    finally:
        server.stop()
