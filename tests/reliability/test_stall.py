"""A Redis that stalls for 10 s (SIGSTOP, then SIGCONT) under single-event load from clients
that retry on 503 and send no event_id: every write the API answered 503 for is refused by
Redis when it catches up (the ingest script's deadline), so each distinct event is stored and
counted once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from ragmon.settings import Settings
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.stack import RedisServer

pytestmark = pytest.mark.slow

STALL_S = 10.0
CLIENTS = 4
PER_CLIENT = 30


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.mark.slow  # real processes for 12-17 s: out of scripts/test --quick
def test_a_503_during_a_stall_never_lands_later(own_redis: RedisServer) -> None:
    settings = Settings.from_env(
        {"REDIS_URL": own_redis.url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "fixed"},
        dotenv=None,
    )
    api = ApiServer(settings).start()
    codes: Counter[int] = Counter()
    lock = threading.Lock()

    def client(c: int) -> None:
        with httpx.Client(base_url=api.url, timeout=30) as http:  # longer than the API waits
            for i in range(PER_CLIENT):
                ev = make_event(seed=c * 1000 + i)
                del ev["event_id"]  # the API names it: a retry is a new id
                ev["query"] = f"stall-{c}-{i}"
                while True:
                    r = http.post("/v1/retrievals", json=ev)
                    with lock:
                        codes[r.status_code] += 1
                    if r.status_code == 202:
                        break
                    assert r.status_code == 503, r.text
                    time.sleep(0.2)
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        assert own_redis.proc is not None
        os.kill(own_redis.proc.pid, signal.SIGSTOP)
        time.sleep(STALL_S)
        os.kill(own_redis.proc.pid, signal.SIGCONT)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        store = api.store
        queries = Counter()
        for key in store.client.scan_iter("ragmon:ev:*", count=1000):
            queries[json.loads(store.client.hget(key, "p"))["query"]] += 1
        sent = CLIENTS * PER_CLIENT
        print(f"\nstall {STALL_S:g} s: answers {dict(codes)}; stored {sum(queries.values())}")
        assert codes[503] > 0  # the stall was seen: some writes timed out
        assert len(queries) == sent and set(queries.values()) == {1}
        assert store.counters()["events_received"] == sent
    finally:
        if own_redis.proc is not None:
            os.kill(own_redis.proc.pid, signal.SIGCONT)
        api.stop()
