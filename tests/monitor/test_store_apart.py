"""Passages retried apart from their event in a real Redis (`Store.apart`): one entry per
passage, claimed once when due, bounded per app (`APART_CAP`) and in time (`APART_TTL_S`, the
ladder's end), and sealed when text storage is off."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.apart import APART_CAP, APART_TTL_S, Apart

DELAYS = (10, 30, 120, 600, 1800)


def item(app: str = "shop", text: str = "fleas live two to three months") -> Apart:
    return Apart(app, app, "gpt-4o-mini", "umbrela-3:pointwise", "flea life", "d1", text)


def due_now(store: Store, app: str = "shop") -> None:
    key = store.keys.apart(app)
    store.client.zadd(key, dict.fromkeys(store.client.zrange(key, 0, -1), 0), xx=True)


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def test_a_passage_waits_once_and_is_claimed_once_when_due(store: Store) -> None:
    assert store.apart.add(item(), DELAYS)
    assert not store.apart.add(item(), DELAYS)  # the same passage of another event: one retry
    assert store.apart.waiting("shop") == 1
    assert not store.apart.due() and store.apart.claim(10) == []  # due in 10 s
    due_now(store)
    assert store.apart.due() and not store.delivery.pending("shop")
    assert store.delivery.due()  # what wakes a drain job
    (got,) = store.apart.claim(10)
    assert (got.query, got.text, got.tries) == ("flea life", item().text, 1)
    assert store.apart.claim(10) == []  # taken: no second caller gets it
    assert store.apart.again(got, DELAYS)  # failing again: due after the next delay
    due = store.client.zscore(store.keys.apart("shop"), got.id)
    assert due is not None and 25 < due - time.time() <= 30
    due_now(store)
    (again,) = store.apart.claim(10)
    assert again.tries == 2
    store.apart.done(again)
    assert store.apart.waiting("shop") == 0
    for key in store.client.keys("ragmon:apart:*"):
        assert 0 < store.client.ttl(key) <= APART_TTL_S


def test_each_app_holds_at_most_the_cap(store: Store) -> None:
    for i in range(APART_CAP):
        assert store.apart.add(item(text=f"passage {i}"), DELAYS)
    assert not store.apart.add(item(text="one more"), DELAYS)
    assert store.apart.add(item(app="other", text="one more"), DELAYS)  # another app's room
    assert store.apart.waiting("shop") == APART_CAP


def test_a_retry_ends_with_the_ladder_or_the_ttl(store: Store) -> None:
    store.apart.add(item(), DELAYS)
    due_now(store)
    (got,) = store.apart.claim(1)
    last = Apart(**{**got.__dict__, "tries": len(DELAYS)})
    assert not store.apart.again(last, DELAYS)  # the ladder's last step: dropped
    assert store.apart.waiting("shop") == 0
    store.apart.add(item(), DELAYS)
    due_now(store)
    (got,) = store.apart.claim(1)
    old = Apart(**{**got.__dict__, "first": time.time() - APART_TTL_S + 20})
    assert not store.apart.again(old, DELAYS)  # the next try would fall past the TTL
    store.apart.add(item(), DELAYS)
    stale = Apart(**{**item().__dict__, "first": time.time() - APART_TTL_S - 1})
    store.client.hset(store.keys.apart_payloads("shop"), stale.id, stale.dump())
    due_now(store)
    assert store.apart.claim(1) == [] and store.apart.waiting("shop") == 0  # expired: dropped


def test_the_passage_text_is_sealed_when_text_storage_is_off(redis_url: str) -> None:
    key = Fernet.generate_key().decode()
    s = Settings.from_env({"REDIS_URL": redis_url, "RAGMON_STORE_TEXT": "false",
                           "RAGMON_TEXT_KEYS": key}, dotenv=None)  # fmt: skip
    store = Store.connect(s)
    store.apart.add(item(text="quokka secret passage"), DELAYS)
    raw = store.client.hgetall(store.keys.apart_payloads("shop"))
    assert raw and not any(b"quokka" in v or b"flea" in v for v in raw.values())
    due_now(store)
    assert [got.text for got in store.apart.claim(1)] == ["quokka secret passage"]
