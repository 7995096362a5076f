"""The sampling plan's share per app: one app's junk label values count as its series budget's
series and one fold (traffic counted after the series cap), so they fill neither the hour's
traffic hash nor the plan, and another app's series keep their place in it; the pacing's
fields are charged to their app, and an app at its share of Redis adds none."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ragmon.store.fields import Kind
from ragmon.store.keys import fold
from ragmon.store.sampling_state import hour_of
from tests.support.api_server import ApiServer
from tests.support.events import make_event

pytestmark = pytest.mark.server  # the real API over HTTP

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


@pytest.mark.server  # two real APIs in this process
def test_two_api_processes_pace_a_new_series_as_one(redis_url: str) -> None:
    """The pacing's counts are the fleet's: a new series sent half to each of two API processes
    has about one cap of events chosen in a planning interval, not one cap per process. Each
    round waits until both processes have shared their choices (the fleet's count in Redis) and
    read the fleet's back (a second's flush: what the others chose meanwhile is the overshoot)."""
    from ragmon.api.sampler import PLAN_S, cold_cap
    from ragmon.core.clock import SteppedClock
    from ragmon.settings import Settings
    from tests.support.waiting import wait_until

    s = Settings.from_env(
        {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "planned",
         "RAGMON_MIN_JUDGED_PER_DAY": "20"},
        dotenv=None,
    )  # fmt: skip
    cap = cold_cap(s, 0.0)
    assert cap == 20  # without a budget: the daily minimum, per interval
    clock = SteppedClock(PLAN_S * (int(time.time() // PLAN_S)) + 1)  # one interval throughout
    apis = [ApiServer(s, clock=clock).start(), ApiServer(s, clock=clock).start()]
    series = "test|default|fresh|default"
    try:
        store, chosen, sent = apis[0].store, 0, 0
        pace_n = store.keys.pace(int(clock() // PLAN_S), "n")
        for round_ in range(6):
            for a, api in enumerate(apis):
                events = [
                    make_event(n=2, k=1, seed=1000 * round_ + 100 * a + i,
                               labels={"app": "test", "retriever": "fresh"})
                    for i in range(10)
                ]  # fmt: skip
                r = api.client.post("/v1/retrievals/batch", json={"events": events})
                assert r.status_code == 202, r.text
                chosen += sum(x["status"] != "sampled_out" for x in r.json()["results"])
                sent += len(events)

            def shared(sent: int = sent) -> bool:
                fleet = int(store.client.hget(pace_n, series) or 0)
                return fleet == sent and all(
                    x.app.state.sampler.seen[series][0] == sent for x in apis
                )

            wait_until(shared, 30, "both processes' choices shared, and read back by each")
    finally:
        for api in apis:
            api.stop()
    # one process alone chooses its first `cap` events whole and then few: two that did not
    # share would choose about 2 * cap
    print(f"\n{sent} events of a new series over two API processes: {chosen} chosen, cap {cap:g}")
    assert cap <= chosen < 1.5 * cap, chosen


@pytest.mark.server  # a real API in this process
def test_an_app_at_its_share_adds_no_pacing_and_another_apps_is_charged_to_it(
    redis_url: str,
) -> None:
    from ragmon.api.sampler import PLAN_S
    from ragmon.core.sampling import APP_MARK
    from ragmon.settings import Settings
    from ragmon.store.sampling_state import pace_bytes
    from tests.support.waiting import wait_until

    s = Settings.from_env(
        {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "planned",
         "RAGMON_MIN_JUDGED_PER_DAY": "20", "RAGMON_APP_STORAGE_MB": "shop=1"},
        dotenv=None,
    )  # fmt: skip
    api = ApiServer(s).start()
    store = api.store
    try:
        with store.client.pipeline(transaction=True) as pipe:  # shop holds its share
            store.ledger.charge(pipe, "shop", Kind.RECORD, 1024 * 1024, time.time())
            pipe.execute()
        for app, status in (("shop", 507), ("news", 202)):
            event = make_event(n=2, k=1, seed=7, labels={"app": app, "index": "kb"})
            r = api.client.post("/v1/retrievals", json=event)
            assert r.status_code == status and (status == 202 or "'shop'" in r.text), r.text
        news = "news|kb|default|default"
        interval = int(time.time() // PLAN_S)
        keys = [store.keys.pace(i, "p") for i in (interval - 1, interval)]

        def fleet() -> dict[str, float]:
            return {k.decode(): float(v) for key in keys
                    for k, v in store.client.hgetall(key).items()}  # fmt: skip

        wait_until(lambda: news in fleet(), 30, "the API shared its pacing with the fleet")
        shared = fleet()
        assert not any(k.startswith(("shop|", APP_MARK + "shop")) for k in shared)
        pace = {a: kinds[Kind.PACE] for a, kinds in store.ledger.read(time.time()).held.items()
                if Kind.PACE in kinds}  # fmt: skip
        p = shared[news]
        assert pace == {"news": pace_bytes(news, 1, p) + pace_bytes(APP_MARK + "news", 1, p)}
    finally:
        api.stop()
