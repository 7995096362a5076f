"""The API over real HTTP with a real Redis: validation, idempotency, limits, schema."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from tests.support.events import make_event, ref, result_url
from tests.support.waiting import scaled

pytestmark = pytest.mark.server  # the real API over HTTP


def _ts(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat()


# (description, change to a valid event, the field `loc` must end with)
BAD_EVENTS = [
    ("empty event_id", {"event_id": ""}, ["event_id"]),
    ("event_id too long", {"event_id": "x" * 129}, ["event_id"]),
    ("no query", {"query": None}, ["query"]),
    ("empty query", {"query": ""}, ["query"]),
    ("query too long", {"query": "q" * 8193}, ["query"]),
    ("k missing", {"k": None}, ["k"]),
    ("k zero", {"k": 0}, ["k"]),
    ("k too big", {"k": 101}, ["k"]),
    ("k not int", {"k": "ten"}, ["k"]),
    ("k a boolean", {"k": True}, ["k"]),
    ("k a string of digits", {"k": "5"}, ["k"]),
    ("too many passages", {"k": 5, "passages": "repeat:201"}, ["passages"]),
    ("no passages", {"passages": None}, ["passages"]),
    ("passage id empty", {"passages.0.id": ""}, ["passages", 0, "id"]),
    ("passage id too long", {"passages.1.id": "i" * 257}, ["passages", 1, "id"]),
    ("passage text empty", {"passages.2.text": ""}, ["passages", 2, "text"]),
    ("passage text too long", {"passages.2.text": "t" * 32769}, ["passages", 2, "text"]),
    ("passage grade 4", {"passages.0.grade": 4}, ["passages", 0, "grade"]),
    ("passage grade -1", {"passages.0.grade": -1}, ["passages", 0, "grade"]),
    ("passage score not a number", {"passages.0.score": "high"}, ["passages", 0, "score"]),
    ("relevant_total negative", {"relevant_total": -1}, ["relevant_total"]),
    ("relevant_total a boolean", {"relevant_total": False}, ["relevant_total"]),
    ("passage grade a boolean", {"passages.0.grade": True}, ["passages", 0, "grade"]),
    ("label value with space", {"labels": {"app": "my app"}}, ["labels", "app"]),
    ("label value too long", {"labels": {"index": "i" * 65}}, ["labels", "index"]),
    ("unknown label key", {"labels": {"user": "bob"}}, ["labels", "user"]),
    ("timestamp without offset", {"timestamp": "2026-11-20T10:00:00"}, ["timestamp"]),
    ("timestamp too old", {"timestamp": _ts(-timedelta(days=36))}, ["timestamp"]),
    ("timestamp in the future", {"timestamp": _ts(timedelta(hours=2))}, ["timestamp"]),
    ("timestamp garbage", {"timestamp": "yesterday"}, ["timestamp"]),
    ("unknown field", {"user_id": "u1"}, ["user_id"]),
]


def _apply(event: dict, change: dict) -> dict:
    event = {**event, "passages": [dict(p) for p in event["passages"]]}
    for key, value in change.items():
        if key.startswith("passages."):
            _, i, field = key.split(".")
            event["passages"][int(i)][field] = value
        elif key == "passages" and isinstance(value, str):
            how, n = value.split(":")
            base = event["passages"]
            if how == "first":
                event["passages"] = base[: int(n)]
            else:
                event["passages"] = [{**base[0], "id": f"r{i}"} for i in range(int(n))]
        elif value is None:
            event.pop(key, None)
        else:
            event[key] = value
    return event


@pytest.mark.parametrize(("what", "change", "field"), BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
def test_bad_event_is_422_naming_the_field(api, what, change, field):
    r = api.client.post("/v1/retrievals", json=_apply(make_event(), change))
    assert r.status_code == 422, r.text
    locs = [e["loc"] for e in r.json()["detail"]]
    assert any(loc[1 : 1 + len(field)] == field for loc in locs), (what, locs)
    assert all(e["msg"] for e in r.json()["detail"])
    assert api.store.client.keys("ragmon:ev:*") == []


@pytest.mark.parametrize(
    ("what", "change", "field"), BAD_EVENTS[::4], ids=[b[0] for b in BAD_EVENTS[::4]]
)
def test_bad_item_in_batch_stores_nothing(api, what, change, field):
    events = [make_event(seed=i) for i in range(5)]
    events[3] = _apply(events[3], change)
    r = api.client.post("/v1/retrievals/batch", json={"events": events})
    assert r.status_code == 422, r.text
    locs = [e["loc"] for e in r.json()["detail"]]
    assert any(
        loc[:3] == ["body", "events", 3] and loc[3 : 3 + len(field)] == field for loc in locs
    )
    assert api.store.client.keys("ragmon:ev:*") == []
    assert api.store.queue_depth() == 0


@pytest.mark.process  # a batch of 1,001 events is over INLINE_MAX_BYTES: the decoding process
def test_not_json_and_wrong_shapes(api):
    for body in (b"not json", b"[]", b'{"events": "x"}'):
        r = api.client.post(
            "/v1/retrievals", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422
    r = api.client.post("/v1/retrievals/batch", json={"events": []})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "events"]
    r = api.client.post("/v1/retrievals/batch", json={"events": [make_event()] * 1001})
    assert r.status_code == 422


def test_accepted_then_duplicate_answers_stored_status(api):
    event = make_event()
    r = api.client.post("/v1/retrievals", json=event)
    assert r.status_code == 202
    assert r.json() == {"event_id": event["event_id"], "status": "queued"}
    again = api.client.post("/v1/retrievals", json=event)
    assert again.status_code == 200 and again.json()["status"] == "queued"
    got = api.client.get(result_url(event)).json()
    assert got["status"] == "queued" and got["k"] == 5 and got["labels"]["app"] == "test"
    assert got["labels"]["segment"] == "default"
    assert api.store.queue_depth() == 1  # pending, in the write that answered 202
    assert api.store.counters()["events_received"] == 1


def wait_drain_job(store, timeout: float = 15.0) -> None:
    """Wait until the API enqueued the drain job it owes after its write."""
    deadline = time.monotonic() + scaled(timeout)
    while store.delivery.jobs.waiting() == 0:
        assert time.monotonic() < deadline, "no drain job enqueued"
        time.sleep(0.05)


def test_event_without_id_gets_one(api):
    event = make_event()
    del event["event_id"]
    r = api.client.post("/v1/retrievals", json=event)
    assert r.status_code == 202 and len(r.json()["event_id"]) == 32


def test_unknown_event_is_404(api):
    assert api.client.get("/v1/retrievals/nope").status_code == 404


def test_batch_with_duplicates_inside(api):
    a, b = make_event(seed=1), make_event(seed=2)
    r = api.client.post("/v1/retrievals/batch", json={"events": [a, b, a]})
    assert r.status_code == 202
    assert [x["event_id"] for x in r.json()["results"]] == [
        a["event_id"],
        b["event_id"],
        a["event_id"],
    ]
    assert api.store.counters()["events_received"] == 2


@pytest.mark.process  # a batch of 400 events is over INLINE_MAX_BYTES: the decoding process
def test_sampling_is_deterministic_on_the_id(make_api):
    api = make_api(RAGMON_SAMPLE_RATE="0.5")
    events = [make_event(seed=i) for i in range(400)]
    first = api.client.post("/v1/retrievals/batch", json={"events": events}).json()["results"]
    out = sum(r["status"] == "sampled_out" for r in first)
    assert 140 < out < 260
    api.store.client.flushall()
    second = api.client.post("/v1/retrievals/batch", json={"events": events}).json()["results"]
    assert [r["status"] for r in first] == [r["status"] for r in second]
    assert api.store.queue_depth() == 400 - out  # only the sampled-in wait for the judge
    out_id = next(r["event_id"] for r in first if r["status"] == "sampled_out")
    got = api.client.get(f"/v1/retrievals/{out_id}", params={"app": "test"})
    assert got.json()["status"] == "sampled_out"


def test_body_over_limit_is_413(make_api):
    api = make_api(RAGMON_MAX_BODY_BYTES="2048")
    event = make_event()
    event["passages"][0]["text"] = "x" * 3000
    r = api.client.post("/v1/retrievals", json=event)
    assert r.status_code == 413 and "limit" in r.json()["detail"]
    assert api.store.client.keys("ragmon:ev:*") == []


def test_an_app_at_its_queue_limit_gets_503_and_the_other_apps_go_on(make_api):
    api = make_api(RAGMON_QUEUE_LIMIT="2")
    busy = [make_event(seed=i, labels={"app": "busy"}) for i in range(3)]
    assert api.client.post("/v1/retrievals/batch", json={"events": busy[:2]}).status_code == 202
    r = api.client.post("/v1/retrievals", json=busy[2])
    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
    assert "'busy'" in r.json()["detail"] and "RAGMON_QUEUE_LIMIT=2" in r.json()["detail"]
    assert api.store.statuses([ref(busy[2])]) == [None]
    quiet = make_event(seed=9, labels={"app": "quiet"})
    assert api.client.post("/v1/retrievals", json=quiet).status_code == 202
    # a batch naming the app at its limit is refused whole, its other app's event too
    mixed = [make_event(seed=20, labels={"app": "quiet"}), busy[2]]
    r = api.client.post("/v1/retrievals/batch", json={"events": mixed})
    assert r.status_code == 503 and "'busy'" in r.json()["detail"]
    assert api.store.statuses([ref(mixed[0])]) == [None]
    # an id already stored is answered, not refused: nothing new would wait
    assert api.client.post("/v1/retrievals", json=busy[0]).status_code == 200


@pytest.mark.process
def test_rejections_are_counted_by_reason(api):
    api.client.post("/v1/retrievals", json={"k": 0})
    import time

    deadline = time.monotonic() + scaled(5)
    while 'ragmon_events_rejected_total{reason="invalid"}' not in api.client.get("/metrics").text:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_health_and_openapi(api):
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"status": "ok"}
    spec = api.client.get("/openapi.json").json()
    for path in ("/v1/retrievals", "/v1/retrievals/batch", "/v1/retrievals/{event_id}", "/metrics"):
        assert path in spec["paths"]
    body = spec["paths"]["/v1/retrievals"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/RetrievalEvent"
    event = spec["components"]["schemas"]["RetrievalEvent"]
    assert {"query", "k", "passages"} <= set(event["required"])
    assert "Passage" in spec["components"]["schemas"] and "Labels" in spec["components"]["schemas"]


@pytest.mark.process
def test_readyz_when_redis_is_down(make_api, redis_server):
    api = make_api()
    redis_server.stop()
    try:
        assert api.client.get("/readyz").status_code == 503
        r = api.client.post("/v1/retrievals", json=make_event())
        assert r.status_code == 503 and "retry-after" in r.headers
    finally:
        redis_server.start()


def test_writes_enqueue_one_drain_job_while_none_waits(make_api):
    api = make_api()
    for seed in range(3):
        assert api.client.post("/v1/retrievals", json=make_event(seed=seed)).status_code == 202
    wait_drain_job(api.store)
    assert api.store.delivery.jobs.waiting() == 1  # one drain job for the three events
    job = api.store.delivery.jobs.queue.jobs[0]
    assert job.func_name == "ragmon.workers.jobs.drain" and job.args == ()
    api.store.delivery.started()  # as the job does when a worker starts it
    assert api.client.post("/v1/retrievals", json=make_event(seed=5)).status_code == 202
    deadline = time.monotonic() + scaled(15)
    while api.store.delivery.jobs.waiting() < 2:  # the next write wakes another
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("event_id", ["a/b", "/lead", "trail/", "a//b", "a/../b", "a?b#c", "ü"])
def test_an_event_id_with_slashes_or_url_characters_reads_back(api, event_id):
    ev = make_event(seed=3)
    ev["event_id"] = event_id
    assert api.client.post("/v1/retrievals", json=ev).status_code == 202
    path = "/v1/retrievals/" + quote(event_id, safe="")
    got = api.client.get(path, params={"app": ev["labels"]["app"]})
    assert got.status_code == 200 and got.json()["event_id"] == event_id


@pytest.mark.parametrize("event_id", [".", "..", "a\nb", "a\x00"])
def test_an_event_id_that_no_url_can_name_is_refused(api, event_id):
    ev = make_event(seed=4)
    ev["event_id"] = event_id
    r = api.client.post("/v1/retrievals", json=ev)
    assert r.status_code == 422
    assert "event_id" in str(r.json()["detail"])
