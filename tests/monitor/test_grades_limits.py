"""People's grades stay inside their app's share: texts kept once per event (not copied into
every record), people per event bounded, the bytes counted for the app, a `507` naming the app
and the limit past its room, and a write that reaches Redis after the API gave up is refused
whole (never "503 and stored whole")."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from ragmon.api.grades import MAX_REVIEWERS_PER_EVENT
from ragmon.api.storage import REFRESH_S
from ragmon.core.wire import MAX_TEXT_CHARS, event_ref
from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.events import make_event

pytestmark = pytest.mark.process  # RQ work horses (the workers fork)


def judged_big_event(api: ApiServer, app: str = "shop") -> dict:
    """An event of 5 passages of MAX_TEXT_CHARS each, judged by a worker."""
    event = make_event(n=5, k=5, labels={"app": app}, seed=7)
    for i, p in enumerate(event["passages"]):
        p["text"] = (f"passage {i} " + "lorem ipsum " * MAX_TEXT_CHARS)[:MAX_TEXT_CHARS]
    assert api.client.post("/v1/retrievals", json=event).status_code == 202
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    return event


def grades(event: dict, reviewers: list[str]) -> dict:
    return {
        "grades": [
            {"app": event["labels"]["app"], "event_id": event["event_id"],
             "passage_id": p["id"], "grade": i % 4, "reviewer": who}
            for who in reviewers for i, p in enumerate(event["passages"])
        ]
    }  # fmt: skip


def held_bytes(api: ApiServer, event: dict) -> tuple[float, int]:
    """(bytes the ledger counts for the app's grades, bytes Redis says their keys take)."""
    store = api.store
    app = event["labels"]["app"]
    ref = event_ref(app, event["event_id"])
    keys = (store.keys.human_grades(ref), store.keys.human_texts(ref))
    used = sum(int(store.client.memory_usage(k) or 0) for k in keys)
    return store.human.held([app])[app], used


def test_texts_are_kept_once_and_people_per_event_are_bounded(
    make_api: Callable[..., ApiServer],
) -> None:
    api = make_api(RAGMON_APP_STORAGE_MB="2")
    event = judged_big_event(api)
    people = [f"reviewer-{i}" for i in range(MAX_REVIEWERS_PER_EVENT)]
    r = api.client.post("/v1/grades", json=grades(event, people))
    assert r.status_code == 200, r.text
    counted, used = held_bytes(api, event)
    texts = 5 * MAX_TEXT_CHARS
    # 80 records and the texts once: not 80 copies of a 32 KB passage (about 2.6 MB)
    assert texts < counted < texts + 80 * 1000
    assert used < 1.5 * counted
    one_more = grades(event, ["one-too-many"])
    r = api.client.post("/v1/grades", json=one_more)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-1] == "reviewer"
    assert str(MAX_REVIEWERS_PER_EVENT) in r.json()["detail"][0]["msg"]
    assert held_bytes(api, event)[0] == counted  # nothing of it stored
    # the anchor set still reads each grade's texts
    records = api.store.human.of_app("shop")
    assert len(records) == 80 and all(len(r["text"]) == MAX_TEXT_CHARS for r in records)


def test_grades_count_in_the_apps_share_and_stop_at_their_room(
    make_api: Callable[..., ApiServer],
) -> None:
    api = make_api(RAGMON_APP_GRADES_MB="shop=0.1,5", RAGMON_APP_STORAGE_MB="other=0.45")
    event = judged_big_event(api)
    other = judged_big_event(api, app="other")  # 160 KB of its 0.45 MB
    r = api.client.post("/v1/grades", json=grades(event, ["ann"]))
    assert r.status_code == 507
    detail = r.json()["detail"]
    assert "'shop'" in detail and "RAGMON_APP_GRADES_MB=0.1 MB" in detail
    assert api.store.human.of_app("shop") == []  # nothing of the request stored
    assert api.client.post("/v1/grades", json=grades(other, ["ann"])).status_code == 200
    assert api.store.human.held(["other"])["other"] > 5 * MAX_TEXT_CHARS
    # the app's share counts its grades beside its events: one more such event passes it
    time.sleep(REFRESH_S * 1.5)  # the API's figure is re-read after REFRESH_S
    more = make_event(n=5, k=5, labels={"app": "other"}, seed=11)
    for p in more["passages"]:
        p["text"] = "x" * MAX_TEXT_CHARS
    r = api.client.post("/v1/retrievals", json=more)
    assert r.status_code == 507 and "RAGMON_APP_STORAGE_MB=0.45" in r.json()["detail"]


def test_a_grade_write_reaching_redis_after_its_deadline_stores_nothing(
    make_api: Callable[..., ApiServer],
) -> None:
    api = make_api()
    event = make_event(n=2, k=2, labels={"app": "shop"}, seed=8)
    record = {"app": "shop", "event_id": event["event_id"], "passage_id": "p8-0", "grade": 2,
              "reviewer": "ann"}  # fmt: skip
    with pytest.raises(redis.ResponseError, match="DEADLINE"):
        api.store.human.write([record], deadline=1.0)
    assert api.store.human.of_event("shop", event["event_id"]) == []
    assert api.store.human.write([record]) == ["created"]
