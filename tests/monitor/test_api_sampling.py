"""Sampling through the real API and Redis: each event keeps the probability with which it was
chosen for judging, and in `planned` mode each series gets the plan's rate."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragmon.workers.worker import make_worker
from tests.support.events import make_event
from tests.support.waiting import wait_until

pytestmark = pytest.mark.server  # the real API over HTTP


@pytest.mark.process  # a 40-event batch is decoded in the API's child process
def test_a_fixed_rate_is_each_events_inclusion_probability(make_api):
    api = make_api(RAGMON_SAMPLE_RATE="0.5")
    events = [make_event(seed=i) for i in range(40)]
    results = api.client.post("/v1/retrievals/batch", json={"events": events}).json()["results"]
    kept = next(r["event_id"] for r in results if r["status"] != "sampled_out")
    got = api.client.get(f"/v1/retrievals/{kept}", params={"app": "test"}).json()
    assert got["inclusion_probability"] == 0.5


@pytest.mark.process  # /metrics renders in a child process
def test_a_fixed_rate_is_exported_per_series_with_the_budgets_forecast(make_api):
    """RAGMON_SAMPLING=fixed: within seconds of a new series' first events (not at the next
    minute's plan), /metrics gives its rate, and the pace and run-out of the day's budget."""
    api = make_api(RAGMON_SAMPLE_RATE="0.5", RAGMON_DAILY_BUDGET_USD="10")
    event = make_event(seed=7)
    event["labels"] = {**event["labels"], "retriever": "fresh"}
    api.client.post("/v1/retrievals", json=event)
    where = (("app", "test"), ("index", "default"), ("retriever", "fresh"), ("segment", "default"))
    found = wait_until(
        lambda: metrics(api).get(("ragmon_sampling_rate", where)) is not None and metrics(api),
        20,
        "the new series' rate on /metrics",
    )
    assert found[("ragmon_sampling_rate", where)] == 0.5
    # what the coverage panel and rule divide by: events weigh 1 at a fixed rate
    assert found[("ragmon_sampling_fixed_rate", ())] == 0.5
    assert found[("ragmon_sampling_mode", (("mode", "fixed"),))] == 1.0
    assert found[("ragmon_sampling_pace", ())] >= 0.0
    assert ("ragmon_sampling_budget_runout_timestamp_seconds", ()) in found


def test_every_event_judged_has_probability_one(api):
    event = make_event(seed=1)
    assert api.client.post("/v1/retrievals", json=event).status_code == 202
    got = api.client.get(f"/v1/retrievals/{event['event_id']}", params={"app": "test"}).json()
    assert got["inclusion_probability"] == 1.0


@pytest.mark.process  # its batches are over INLINE_MAX_BYTES: the decoding process
def test_planned_rates_follow_each_series_traffic(make_api):
    api = make_api(
        RAGMON_SAMPLING="planned", RAGMON_TARGET_HALF_WIDTH="0.03", RAGMON_MIN_JUDGED_PER_DAY="0"
    )
    sampler = api.app.state.sampler

    def batch(retriever: str, n: int, seed: int) -> list[dict]:
        out = []
        for i in range(n):
            ev = make_event(seed=seed + i)
            ev["labels"] = {**ev["labels"], "retriever": retriever}
            out.append(ev)
        return out

    old_series(api, "big", "small")  # both counted for days: their traffic is read over 48 h
    for start in range(0, 3000, 1000):  # a busy series and a quiet one
        api.client.post("/v1/retrievals/batch", json={"events": batch("big", 1000, start)})
    api.client.post("/v1/retrievals/batch", json={"events": batch("small", 5, 10_000)})
    sampler.flush()
    traffic = sampler.state.traffic(time.time())
    (big,) = [k for k in traffic if "|big|" in k]
    (small,) = [k for k in traffic if "|small|" in k]
    assert traffic[big][-1] == 3000 and traffic[small][-1] == 5
    plan = sampler.refresh(time.time(), force=True)
    assert plan.rates[small] == 1.0
    assert plan.rates[big] < 0.1  # (1.96 x 0.3 / 0.03)^2 = 384 events a week of ~10k
    assert sampler.rates().of(big) == plan.rates[big]
    # new events of the busy series are judged at its rate, and say so
    results = api.client.post(
        "/v1/retrievals/batch", json={"events": batch("big", 600, 20_000)}
    ).json()["results"]
    kept = [r["event_id"] for r in results if r["status"] != "sampled_out"]
    assert 0 < len(kept) < 100
    got = api.client.get(f"/v1/retrievals/{kept[0]}", params={"app": "test"}).json()
    assert got["inclusion_probability"] == plan.rates[big]


@pytest.mark.slow
def test_exported_means_are_the_weighted_means_of_the_events(make_api):
    """Events judged at two rates: /metrics' sum / count of each series is the mean of its
    judged events weighted by 1 / inclusion_probability, computed here from GET."""
    api = make_api(
        RAGMON_SAMPLING="planned",
        RAGMON_TARGET_HALF_WIDTH="0.03",
        RAGMON_MIN_JUDGED_PER_DAY="0",
        RAGMON_GROUP_WINDOW_S="0",
    )
    sampler = api.app.state.sampler

    def batch(retriever: str, seeds: range) -> list[dict]:
        out = []
        for i in seeds:
            ev = make_event(seed=i)
            ev["labels"] = {**ev["labels"], "retriever": retriever}
            out.append(ev)
        return out

    old_series(api, "big", "small")
    sent = [*batch("big", range(300)), *batch("small", range(1000, 1005))]
    api.client.post("/v1/retrievals/batch", json={"events": sent})  # all judged: no plan yet
    sampler.flush()
    plan = sampler.refresh(time.time(), force=True)
    (big,) = [k for k in plan.rates if "|big|" in k]
    assert 0.05 < plan.rates[big] < 0.9
    more = batch("big", range(2000, 2300))
    api.client.post("/v1/retrievals/batch", json={"events": more})
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    judged: dict[str, list[tuple[float, float]]] = {}
    for ev in [*sent, *more]:
        got = api.client.get(f"/v1/retrievals/{ev['event_id']}", params={"app": "test"}).json()
        if got["status"] == "done":
            series = got["labels"]["retriever"]
            judged.setdefault(series, []).append(
                (got["measures"]["ndcg"], got["inclusion_probability"])
            )
    assert {p for _, p in judged["big"]} == {1.0, plan.rates[big]}  # two rates in one series
    exported = metrics(api)
    for series, rows in judged.items():
        w = [1 / p for _, p in rows]
        want = sum(wi * y for wi, (y, _) in zip(w, rows, strict=True)) / sum(w)
        where = (("app", "test"), ("index", "default"), ("retriever", series),
                 ("segment", "default"))  # fmt: skip
        total = exported[("ragmon_retrieval_ndcg_sum", where)]
        count = exported[("ragmon_retrieval_ndcg_count", where)]
        assert count == pytest.approx(sum(w), rel=1e-9)
        assert total / count == pytest.approx(want, rel=1e-9)
        # the alerts' effective number of judged events: _count^2 / the weight squares
        squares = exported[("ragmon_retrieval_weight_squares_total", where)]
        assert squares == pytest.approx(sum(x * x for x in w), rel=1e-9)
    # the coverage panel's share: the small series, judged whole, stands for all its events
    small = (("app", "test"), ("index", "default"), ("retriever", "small"), ("segment", "default"))
    received = exported[("ragmon_signal_results_count", small)]
    assert exported[("ragmon_retrieval_ndcg_count", small)] / received == 1.0 == received / 5
    assert ("ragmon_sampling_fixed_rate", ()) not in exported  # planned: divided by nothing


def old_series(api, *retrievers: str) -> None:
    """Series first counted three days ago (the planner reads a younger one's traffic over the
    time it has existed)."""
    key = api.app.state.store.keys.sampling_first
    client = api.app.state.store.client
    for r in retrievers:
        client.hset(key, f"test|default|{r}|default", int(time.time() - 3 * 86400))


def metrics(api) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{api.url}/metrics", timeout=60).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_a_sampled_out_event_shows_its_probability(make_api):
    api = make_api(RAGMON_SAMPLE_RATE="0.5")
    events = [make_event(seed=i) for i in range(40)]
    results = api.client.post("/v1/retrievals/batch", json={"events": events}).json()["results"]
    out = next(r["event_id"] for r in results if r["status"] == "sampled_out")
    got = api.client.get(f"/v1/retrievals/{out}", params={"app": "test"}).json()
    assert got["status"] == "sampled_out"
    assert got["inclusion_probability"] == 0.5
    # kept for the idempotency window only (it was 35 days), then GET says it was not kept
    store = api.app.state.store
    key = store.keys.event(f"test|{out}")
    assert 0 < store.client.ttl(key) <= api.settings.idempotency_s == 900
    store.client.delete(key)  # the window ends
    gone = api.client.get(f"/v1/retrievals/{out}", params={"app": "test"})
    assert gone.status_code == 404 and "not kept" in gone.json()["detail"]
    assert "RAGMON_IDEMPOTENCY_S" in gone.json()["detail"]
