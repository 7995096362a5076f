"""The RQ contract of the ingest fast path (`ragmon.store.rq_jobs`).

The fast path replays, in Lua, the commands RQ's `enqueue_many` issues; the exact path calls
`enqueue_many` itself. The same events through each, into two fresh Redis databases, must leave
the same keys, types, fields, values and TTLs (job ids, which RQ draws at random, and the
receipt and enqueue times are the only differences allowed). An RQ upgrade that changes what a
job is fails here, by name, instead of writing jobs RQ cannot read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from rq.job import Job

from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.rq_jobs import JOB_FUNC
from tests.support.stack import RedisServer

# Fields that hold the time they were written: compared by presence only.
CLOCK_FIELDS = {b"rt", b"created_at", b"enqueued_at"}
TTL_SLACK_MS = 5_000  # the two writes are moments apart


def items() -> list[IngestItem]:
    out = [
        IngestItem(f"e{i}", json.dumps({"k": 1, "n": i}), app="shop" if i % 2 else "default")
        for i in range(5)
    ]
    return [*out, IngestItem("s", json.dumps({"k": 1}), sampled_out=True)]


@pytest.fixture
def two_stores(redis_server: RedisServer) -> Iterator[tuple[Store, Store]]:
    stores = []
    for db in (1, 2):
        url = f"{redis_server.url.rstrip('/')}/{db}"
        redis.Redis.from_url(url).flushdb()
        settings = Settings.from_env({"REDIS_URL": url}, dotenv=None)
        stores.append(Store.connect(replace(settings, job_batch_size=2)))
    yield stores[0], stores[1]
    for s in stores:
        s.client.flushdb()
        s.client.close()


def snapshot(client: redis.Redis) -> dict[bytes, tuple]:
    """Every key: its type, contents and TTL, with RQ's random job ids numbered in queue order."""
    ids = [
        j for q in client.keys(b"rq:queue:*") if client.type(q) == b"list"
        for j in client.lrange(q, 0, -1)
    ]  # fmt: skip
    names = {j: b"JOB%d" % i for i, j in enumerate(ids)}
    pattern = re.compile(b"|".join(map(re.escape, names))) if names else None

    def norm(raw: bytes) -> bytes:
        return pattern.sub(lambda m: names[m.group(0)], raw) if pattern else raw

    out: dict[bytes, tuple] = {}
    for key in client.keys(b"*"):
        kind = client.type(key)
        value: object
        if kind == b"hash":
            value = {
                norm(f): b"<clock>" if f in CLOCK_FIELDS else norm(v)
                for f, v in client.hgetall(key).items()
            }
        elif kind == b"list":
            value = [norm(v) for v in client.lrange(key, 0, -1)]
        elif kind == b"set":
            value = sorted(norm(v) for v in client.smembers(key))
        elif kind == b"zset":
            value = [(norm(v), s) for v, s in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"string":
            value = norm(client.get(key))
        else:
            value = kind
        out[norm(key)] = (kind, value, client.pttl(key))
    return out


def test_the_fast_path_writes_exactly_what_rq_enqueue_many_writes(
    two_stores: tuple[Store, Store],
) -> None:
    fast, rq_api = two_stores
    answers = fast.ingest(items())  # one Lua call replaying the recorded commands
    assert answers == rq_api.ingest_exact(items())  # RQ's own Queue.enqueue_many
    assert answers == [("queued", True)] * 5 + [("sampled_out", True)]
    a, b = snapshot(fast.client), snapshot(rq_api.client)
    assert sorted(a) == sorted(b)
    for key, (kind, value, ttl) in a.items():
        assert (kind, value) == b[key][:2], key
        assert ttl == b[key][2] if ttl < 0 else abs(ttl - b[key][2]) <= TTL_SLACK_MS, key
    # What the comparison covered: three jobs (batches of 2) RQ itself can read back.
    jobs = [Job.fetch(j, connection=fast.client) for j in fast.queue.get_job_ids()]
    assert [j.func_name for j in jobs] == [JOB_FUNC] * 3
    assert [len(j.args[0]) for j in jobs] == [2, 2, 1]
    assert any(k.startswith(b"rq:job:") for k in a) and any(k.startswith(b"rq:queue") for k in a)


def test_the_snapshot_sees_a_difference(two_stores: tuple[Store, Store]) -> None:
    fast, rq_api = two_stores
    fast.ingest(items())
    rq_api.ingest_exact(items())
    job = rq_api.queue.get_job_ids()[0]
    rq_api.client.hset(f"rq:job:{job}", "timeout", "7200")
    assert snapshot(fast.client) != snapshot(rq_api.client)


def test_a_dead_work_horse_is_told_from_other_job_failures() -> None:
    """By RQ's own exception class (subclasses too), not by comparing its name as a string."""
    from rq.exceptions import AbandonedJobError

    from ragmon.store.rq_jobs import abandoned

    assert abandoned(AbandonedJobError) and abandoned(type("Sub", (AbandonedJobError,), {}))
    assert not abandoned(RuntimeError) and not abandoned(None)
