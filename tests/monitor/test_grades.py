"""`POST /v1/grades` over real HTTP on events a real worker judged: people's grades are stored
beside the judge's, once per (event, passage, reviewer), scoped by the key's app; a bad item
is named and nothing of its request is stored."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.waiting import scaled

pytestmark = pytest.mark.process  # RQ work horses (the workers fork)

ADMIN, SHOP_KEY = "admin-key-0123456789", "shop-key-0123456789"
KEYS = f"{ADMIN},{SHOP_KEY}:shop"


def client(api: ApiServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    )


@pytest.fixture
def judged(make_api: Callable[..., ApiServer]) -> tuple[ApiServer, dict[str, dict]]:
    """Two apps' events, judged by a worker (lexical judge); one more shop event left queued."""
    api = make_api(RAGMON_API_KEYS=KEYS, RAGMON_GROUP_WINDOW_S="0")
    events = {
        app: make_event(n=6, k=3, labels={"app": app, "retriever": "bm25"}, seed=i)
        for i, app in enumerate(("shop", "other"))
    }
    with client(api, ADMIN) as c:
        for e in events.values():
            assert c.post("/v1/retrievals", json=e).status_code == 202
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    queued = make_event(n=4, k=2, labels={"app": "shop"}, seed=9)
    with client(api, ADMIN) as c:
        assert c.post("/v1/retrievals", json=queued).status_code == 202
    events["queued"] = queued
    return api, events


def grade(event: dict, rank: int, value: int, reviewer: str = "ann", **extra) -> dict:
    return {
        "app": event["labels"]["app"],
        "event_id": event["event_id"],
        "passage_id": event["passages"][rank - 1]["id"],
        "grade": value,
        "reviewer": reviewer,
        **extra,
    }


def read(api: ApiServer, event: dict) -> dict:
    with client(api, ADMIN) as c:
        r = c.get(f"/v1/retrievals/{event['event_id']}", params={"app": event["labels"]["app"]})
    assert r.status_code == 200
    return r.json()


def test_a_grade_is_kept_beside_the_judges_and_a_repeat_changes_nothing(judged) -> None:
    api, events = judged
    shop = events["shop"]
    before = read(api, shop)
    judge_grade = before["passages"][0]["grade"]
    assert before["status"] == "done" and before["judge"] == "lexical/lexical-1/per-event"
    assert before["passages"][0]["graded_by"] == before["judge"]
    mine = (judge_grade + 1) % 4  # a grade other than the judge's: it must not replace it
    body = {"grades": [grade(shop, 1, mine, note="the answer is in the 2nd line")]}
    with client(api, SHOP_KEY) as c:  # a key bound to the event's app
        first = c.post("/v1/grades", json=body)
        assert first.status_code == 200, first.text
        assert first.json()["results"] == [
            {"event_id": shop["event_id"], "passage_id": shop["passages"][0]["id"],
             "reviewer": "ann", "status": "created"}
        ]  # fmt: skip
        after = read(api, shop)
        generation = api.store.human.generation()
        again = c.post("/v1/grades", json=body)
        assert again.json()["results"][0]["status"] == "unchanged"
    assert read(api, shop) == after  # nothing changed: not the time, not the record
    assert api.store.human.generation() == generation
    p = after["passages"][0]
    assert (p["grade"], p["graded_by"]) == (judge_grade, before["judge"])  # the judge's, kept
    assert after["grades"] == before["grades"] and after["measures"] == before["measures"]
    (person,) = p["human_grades"]
    assert (person["reviewer"], person["grade"], person["graded_by"]) == ("ann", mine, "human:ann")
    assert person["note"] == "the answer is in the 2nd line"
    assert all("human_grades" not in q for q in after["passages"][1:])
    (record,) = api.store.human.of_app("shop")
    assert (record["judge_grade"], record["judge"]) == (judge_grade, before["judge"])
    assert record["labels"]["retriever"] == "bm25" and record["rank"] == 1 and record["k"] == 3
    assert record["query"] == shop["query"]  # kept for the anchor set (text storage is on)


def test_another_grade_by_the_same_reviewer_replaces_theirs_and_others_add(judged) -> None:
    api, events = judged
    shop = events["shop"]
    with client(api, ADMIN) as c:
        assert c.post("/v1/grades", json={"grades": [grade(shop, 2, 1)]}).status_code == 200
        r = c.post("/v1/grades", json={"grades": [grade(shop, 2, 3), grade(shop, 2, 0, "bo")]})
    assert [x["status"] for x in r.json()["results"]] == ["updated", "created"]
    people = read(api, shop)["passages"][1]["human_grades"]
    assert sorted((h["reviewer"], h["grade"]) for h in people) == [("ann", 3), ("bo", 0)]


def test_another_apps_key_gets_403_and_nothing_is_stored(judged) -> None:
    api, events = judged
    body = {"grades": [grade(events["shop"], 1, 2), grade(events["other"], 1, 2)]}
    with client(api, SHOP_KEY) as c:
        r = c.post("/v1/grades", json=body)
    assert r.status_code == 403
    assert "grades[1].app" in r.json()["detail"] and "app=shop" in r.json()["detail"]
    assert api.store.human.of_app("shop") == [] and api.store.human.of_app("other") == []
    with httpx.Client(base_url=api.url, timeout=scaled(30)) as anonymous:
        assert anonymous.post("/v1/grades", json=body).status_code == 401


def test_unknown_event_is_404_and_unknown_passage_422_naming_them(judged) -> None:
    api, events = judged
    shop = events["shop"]
    unknown_event = {**grade(shop, 1, 2), "event_id": "no-such-event"}
    unknown_passage = {**grade(shop, 1, 2), "passage_id": "no-such-passage"}
    # the other app's event of a known id is unknown to the app named: ids are scoped by app
    elsewhere = {**grade(events["other"], 1, 2), "app": "shop"}
    with client(api, SHOP_KEY) as c:
        r = c.post("/v1/grades", json={"grades": [grade(shop, 1, 2), unknown_event, elsewhere]})
        assert r.status_code == 404
        named = {(tuple(d["loc"]), d["type"]) for d in r.json()["detail"]}
        assert named == {(("body", "grades", 1, "event_id"), "not_found"),
                         (("body", "grades", 2, "event_id"), "not_found")}  # fmt: skip
        assert "no-such-event" in r.json()["detail"][0]["msg"]
        r = c.post("/v1/grades", json={"grades": [unknown_passage]})
        assert r.status_code == 422
        (d,) = r.json()["detail"]
        assert d["loc"] == ["body", "grades", 0, "passage_id"] and "no-such-passage" in d["msg"]
        r = c.post("/v1/grades", json={"grades": [grade(events["queued"], 1, 2)]})
        assert r.status_code == 422 and "queued" in r.json()["detail"][0]["msg"]
        r = c.post("/v1/grades", json={"grades": [grade(shop, 1, 4)]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "grade"
        r = c.post("/v1/grades", json={"grades": [grade(shop, 1, 2, reviewer="a b")]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "reviewer"
    assert api.store.human.of_app("shop") == []  # the good first item of each was not kept
