"""The ledger of what each app holds in Redis by class (`ragmon.store.ledger`), against a real
Redis: charges held for their window and no longer, a window of minutes counted without a
day's over-estimate, the forecast from rates and windows, and the ingest write charging it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.fields import Kind
from ragmon.store.ledger import BUCKETS, allocated, windows

T0 = 1_800_000_000.0  # a fixed time: the buckets do not depend on when the test runs


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, idempotency_s=600, result_ttl_days=35, text_ttl_days=8))
    yield s
    s.client.close()


def charge(store: Store, app: str, kind: Kind, n: int, at: float) -> None:
    with store.client.pipeline(transaction=True) as pipe:
        store.ledger.charge(pipe, app, kind, n, at)
        pipe.execute()


def test_a_charge_is_held_for_its_window_then_leaves(store: Store) -> None:
    window = windows(store.settings)[Kind.IDEM]
    assert window == 600
    charge(store, "a", Kind.IDEM, 1000, T0)
    assert store.ledger.read(T0 + 1).held["a"][Kind.IDEM] == pytest.approx(1000, rel=0.1)
    # past the window, at most one bucket's worth (a twelfth) is counted, then nothing
    after = store.ledger.read(T0 + window + window / BUCKETS / 2).held.get("a", {})
    assert after.get(Kind.IDEM, 0) <= 1000 / 2
    assert store.ledger.read(T0 + window + 2 * window / BUCKETS).held.get("a", {}) == {}


def test_a_window_of_minutes_holds_minutes_of_a_steady_rate(store: Store) -> None:
    # 10 bytes a second for an hour: a 10-minute window holds about 6,000 bytes, not the hour's
    for s in range(0, 3600, 5):
        charge(store, "a", Kind.IDEM, 50, T0 + s)
    held = store.ledger.read(T0 + 3600).held["a"][Kind.IDEM]
    assert held == pytest.approx(10 * 600, rel=0.1)


def test_the_forecast_is_the_rate_times_the_window_per_app(store: Store) -> None:
    # two hours of records at 100 bytes a second for "a", 1 for "b": 35 days at those rates
    for s in range(0, 7200, 60):
        charge(store, "a", Kind.RECORD, 6000, T0 + s)
        charge(store, "b", Kind.RECORD, 60, T0 + s)
    reading = store.ledger.read(T0 + 7200)
    window = 35 * 86400
    assert reading.forecast["a"][Kind.RECORD] == pytest.approx(100 * window, rel=0.05)
    assert reading.forecast["b"][Kind.RECORD] == pytest.approx(1 * window, rel=0.05)
    assert reading.held["a"][Kind.RECORD] == pytest.approx(100 * 7200, rel=0.05)
    assert reading.forecast_total == pytest.approx(101 * window, rel=0.05)


def test_ingest_charges_each_created_event_once_and_sampled_out_keys_expire(store: Store) -> None:
    payload = json.dumps({"query": "q" * 5000, "k": 1})
    items = [IngestItem(f"j{i}", payload, False, "big") for i in range(20)]
    items += [IngestItem(f"s{i}", payload, True, "big", probability=0.01) for i in range(200)]
    store.ingest(items)
    store.ingest(items)  # duplicates: not charged again
    grown = sum(store.client.memory_usage(store.keys.event(it.ref)) or 0 for it in items)
    held = store.ledger.read(time.time()).held["big"]
    assert held[Kind.TEXTS] == pytest.approx(20 * allocated(5000), rel=0.2)
    assert held[Kind.IDEM] < 200 * 400  # a sampled-out event keeps no payload
    # what the ledger counts is what the events' keys take
    assert sum(held.values()) == pytest.approx(grown, rel=0.2)
    ttl = store.client.ttl(store.keys.event("big|s1"))
    assert 0 < ttl <= 600
