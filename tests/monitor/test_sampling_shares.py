"""The sampling plan's share per app: one app's junk label values count as its series budget's
series and one fold (traffic counted after the series cap), so they fill neither the hour's
traffic hash nor the plan, and another app's series keep their place in it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragmon.store.fields import Kind
from ragmon.store.keys import fold
from ragmon.store.sampling_state import hour_of
from tests.support.api_server import ApiServer
from tests.support.events import make_event

JUNK = 2_000  # index values of the hostile app (the 20,000, fewer for the test's time)


@pytest.mark.process  # batches over 1 MiB decode in the API's child process
def test_junk_index_values_fill_neither_the_traffic_nor_the_plan(
    make_api: Callable[..., ApiServer],
) -> None:
    api = make_api(RAGMON_MAX_SERIES="50", RAGMON_MAX_SERIES_PER_APP="10")
    sampler = api.app.state.sampler
    for start in range(0, JUNK, 500):
        events = [
            make_event(n=1, k=1, seed=i, labels={"app": "appA", "index": f"junk{i}"})
            for i in range(start, start + 500)
        ]
        r = api.client.post("/v1/retrievals/batch", json={"events": events})
        assert r.status_code == 202, r.text
    for i in range(3):
        event = make_event(n=2, k=1, seed=10_000 + i, labels={"app": "appB", "index": f"kb{i}"})
        assert api.client.post("/v1/retrievals", json=event).status_code == 202
    sampler.flush()
    now = sampler.clock()
    store = api.store
    hour = {
        k.decode(): int(v)
        for k, v in store.client.hgetall(store.keys.traffic(hour_of(now))).items()
    }
    a_fields = [k for k in hour if k.startswith("appA|")]
    assert len(a_fields) <= 10 + 1  # its budget's series and its fold
    assert sum(v for k, v in hour.items() if k.startswith("appA|")) == JUNK  # nothing lost
    assert hour[fold("appA")[0]] >= JUNK - 10
    assert sum(1 for k in hour if k.startswith("appB|")) == 3
    plan = sampler.replan(now)
    assert sum(1 for k in plan.rates if k.startswith("appA|")) <= 11
    assert sum(1 for k in plan.rates if k.startswith("appB|")) == 3
    # the traffic counts are charged to each app's ledger
    held = store.ledger.read(now).held
    assert held["appA"][Kind.SAMPLING] > 0 and held["appB"][Kind.SAMPLING] > 0
