"""The pooled ideal in a real Redis (`Store.pool`, script `POOL`): best grade per passage,
per app and judge identity, bounded, expiring with the judgment cache."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ragmon.settings import Settings
from ragmon.store import Store, query_hash
from ragmon.store.pool import POOL_CAP

MODEL, VERSION = "gpt-4o-mini", "umbrela-3:pointwise"
QUERY = "how long is the life cycle of a flea"


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def test_the_pool_keeps_each_passage_best_grade_and_answers_the_union(store: Store) -> None:
    assert store.pool.merge("shop", MODEL, VERSION, QUERY, {"a": 2, "b": 1}) == {"a": 2, "b": 1}
    # another retriever, the same question in other spacing and case: one pool
    got = store.pool.merge("shop", MODEL, VERSION, "  How long is the LIFE cycle of a flea",
                           {"a": 1, "c": 3})  # fmt: skip
    assert got == {"a": 2, "b": 1, "c": 3}
    assert store.pool.merge("shop", MODEL, VERSION, QUERY, {}) == {"a": 2, "b": 1, "c": 3}


def test_pools_are_per_app_and_per_judge_identity(store: Store) -> None:
    store.pool.merge("shop", MODEL, VERSION, QUERY, {"a": 3})
    assert store.pool.merge("other-app", MODEL, VERSION, QUERY, {"b": 1}) == {"b": 1}
    assert store.pool.merge("shop", "gpt-4.1", VERSION, QUERY, {}) == {}
    keys = sorted(k.decode() for k in store.client.keys("ragmon:pool:*"))
    qh = query_hash(QUERY)
    assert keys == [f"ragmon:pool:other-app|{MODEL}:{VERSION}:{qh}",
                    f"ragmon:pool:shop|{MODEL}:{VERSION}:{qh}"]  # fmt: skip


def test_an_entry_not_seen_for_the_cache_ttl_leaves_the_pool(store: Store) -> None:
    store.pool.merge("shop", MODEL, VERSION, QUERY, {"a": 3, "b": 2})
    key = store.keys.pool("shop", MODEL, VERSION, query_hash(QUERY))
    ttl = int(store.settings.cache_ttl_days * 86400)
    assert 0 < store.client.ttl(key) <= ttl
    old = int(time.time()) - ttl - 1
    store.client.hset(key, "a", f"3 {old}")  # last seen longer ago than the cache keeps grades
    assert store.pool.merge("shop", MODEL, VERSION, QUERY, {"c": 1}) == {"b": 2, "c": 1}
    assert not store.client.hexists(key, "a")


def test_the_pool_is_bounded_and_the_lowest_grades_leave_first(store: Store) -> None:
    many = {f"p{i}": 1 for i in range(POOL_CAP)}
    store.pool.merge("shop", MODEL, VERSION, QUERY, many)
    got = store.pool.merge("shop", MODEL, VERSION, QUERY, {"best": 3, "good": 2})
    assert got["best"] == 3 and len(got) == POOL_CAP + 2  # this event's answer has them all
    key = store.keys.pool("shop", MODEL, VERSION, query_hash(QUERY))
    assert store.client.hlen(key) == POOL_CAP
    assert store.client.hexists(key, "best") and store.client.hexists(key, "good")


def test_no_pool_when_the_cache_keeps_nothing(redis_url: str) -> None:
    env = {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_CACHE_TTL_DAYS": "0"}
    store = Store.connect(Settings.from_env(env, dotenv=None))
    assert store.pool.merge("shop", MODEL, VERSION, QUERY, {"a": 3}) is None
    assert store.client.keys("ragmon:pool:*") == []
