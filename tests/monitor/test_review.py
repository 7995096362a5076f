"""The explorer's review page and grade buttons over real HTTP: a signed-in app-bound key draws
events of its own series at random, grades them with a same-site POST (the grade lands beside
the judge's, as through `POST /v1/grades`), and nothing else can grade: another app's event,
an unknown passage, a cross-site form, no session."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import pytest

from ragmon.api.review import REVIEWER_COOKIE
from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.waiting import scaled

pytestmark = pytest.mark.process  # RQ work horses (the workers fork)

ADMIN, SHOP_KEY = "admin-key-0123456789", "shop-key-0123456789"
SERIES = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "faq"}


def post_and_judge(api: ApiServer, events: dict[str, dict]) -> None:
    """Send `events` as the admin and judge them with an in-process worker."""
    with httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=scaled(30)
    ) as c:
        for e in events.values():
            assert c.post("/v1/retrievals", json=e).status_code == 202
    make_worker(api.settings).work(burst=True, with_scheduler=False)


@pytest.fixture
def judged(make_api: Callable[..., ApiServer]) -> tuple[ApiServer, dict[str, dict]]:
    api = make_api(RAGMON_API_KEYS=f"{ADMIN},{SHOP_KEY}:shop", RAGMON_GROUP_WINDOW_S="0")
    events = {f"shop-{i}": make_event(n=4, k=2, labels=SERIES, seed=i, event_id=f"shop-{i}")
              for i in range(5)}  # fmt: skip
    events["other-0"] = make_event(n=4, k=2, labels={"app": "other"}, seed=9, event_id="other-0")
    post_and_judge(api, events)
    return api, events


def signed_in(api: ApiServer, key: str) -> httpx.Client:
    ui = httpx.Client(base_url=api.url, follow_redirects=False, timeout=scaled(30))
    r = ui.post("/ui/login", data={"key": key, "next": "/ui"}, headers={"origin": api.url})
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    return ui


def people(api: ApiServer, app: str, event_id: str) -> list[dict]:
    return api.store.human.of_event(app, event_id)


def test_an_app_bound_key_draws_its_series_and_grades_with_one_click(judged) -> None:
    api, events = judged
    ui = signed_in(api, SHOP_KEY)
    listing = ui.get("/ui/review")
    assert listing.status_code == 200 and "shop/kb/bm25/faq" in listing.text
    assert "other/" not in listing.text  # another app's series is not offered
    drawn = ui.get("/ui/review", params={**SERIES, "reviewer": "ann"})
    assert drawn.status_code == 303
    path = urlsplit(drawn.headers["location"]).path
    event_id = path.rsplit("/", 1)[1]
    assert path == f"/ui/review/shop/{event_id}" and event_id in events
    page = ui.get(drawn.headers["location"])
    assert page.status_code == 200
    event = events[event_id]
    assert event["query"] in page.text
    assert all(p["text"] in page.text for p in event["passages"])  # as the judge saw them
    assert "drawn at random among its 5 judged events of the last 7 days" in page.text
    assert "LLM judge" not in page.text  # no judge grade to anchor on
    buttons = re.findall(r'<button name=grade value="(\d):([^"]+)"', page.text)
    assert len(buttons) == 4 * len(event["passages"])  # 3..0 per passage

    target = event["passages"][1]["id"]
    form = {"app": "shop", "event_id": event_id, "next": drawn.headers["location"],
            "reviewer": "ann", "grade": f"2:{target}"}  # fmt: skip
    r = ui.post("/ui/grades", data=form, headers={"origin": api.url})
    assert r.status_code == 303 and r.headers["location"] == drawn.headers["location"]
    assert ui.cookies[REVIEWER_COOKIE] == "ann"
    (stored,) = people(api, "shop", event_id)
    assert (stored["passage_id"], stored["grade"], stored["reviewer"]) == (target, 2, "ann")
    again = ui.get(drawn.headers["location"])
    assert "class=chosen>2 highly relevant" in again.text and "1 of 4" in again.text
    # the event page has the same buttons, beside the judge's grades, for the same reviewer
    shown = ui.get(f"/ui/events/shop/{event_id}")
    assert shown.status_code == 200 and "people: ann: 2" in shown.text
    assert shown.text.count("<button name=grade") == 4 * len(event["passages"])
    r = ui.post("/ui/grades", data={**form, "grade": f"2:{target}"}, headers={"origin": api.url})
    assert r.status_code == 303 and len(people(api, "shop", event_id)) == 1  # a repeat: no change


def test_nothing_else_can_grade(judged) -> None:
    api, events = judged
    ui = signed_in(api, SHOP_KEY)
    event = events["shop-0"]
    base = {"app": "shop", "event_id": "shop-0", "next": "/ui/review", "reviewer": "ann",
            "grade": f"3:{event['passages'][0]['id']}"}  # fmt: skip
    cross = ui.post("/ui/grades", data=base, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403 and "cross-site" in cross.text
    other = {**base, "app": "other", "event_id": "other-0",
             "grade": f"3:{events['other-0']['passages'][0]['id']}"}  # fmt: skip
    r = ui.post("/ui/grades", data=other, headers={"origin": api.url})
    assert r.status_code == 403 and "may only grade app=shop" in r.text
    r = ui.post("/ui/grades", data={**base, "grade": "3:no-such"}, headers={"origin": api.url})
    assert r.status_code == 422 and "no-such" in r.text
    r = ui.post("/ui/grades", data={**base, "event_id": "nope"}, headers={"origin": api.url})
    assert r.status_code == 404 and "nope" in r.text
    anonymous = httpx.Client(base_url=api.url, follow_redirects=False, timeout=scaled(30))
    assert anonymous.post("/ui/grades", data=base, headers={"origin": api.url}).status_code == 401
    assert ui.get("/ui/review", params={**SERIES, "app": "other"}).status_code == 403
    assert people(api, "shop", "shop-0") == [] and people(api, "other", "other-0") == []


def test_the_review_page_draws_from_the_estimates_window_only(
    make_api: Callable[..., ApiServer],
) -> None:
    # It drew from the whole retention (35 days) while the estimates count the last 7: a grade
    # of an older event counted for nothing.
    api = make_api(RAGMON_API_KEYS=f"{ADMIN},{SHOP_KEY}:shop", RAGMON_GROUP_WINDOW_S="0")
    old = (datetime.now(UTC) - timedelta(days=20)).isoformat()
    events = {f"new-{i}": make_event(n=3, k=2, labels=SERIES, seed=i, event_id=f"new-{i}")
              for i in range(3)}  # fmt: skip
    events |= {f"old-{i}": make_event(n=3, k=2, labels=SERIES, seed=10 + i, event_id=f"old-{i}",
                                      timestamp=old) for i in range(12)}  # fmt: skip
    post_and_judge(api, events)
    ui = signed_in(api, SHOP_KEY)
    listing = ui.get("/ui/review")
    assert re.search(r"shop/kb/bm25/faq</a></td><td class=n>3<", listing.text)
    drawn = set()
    for _ in range(12):
        r = ui.get("/ui/review", params=SERIES)
        assert r.status_code == 303
        drawn.add(r.headers["location"].rsplit("/", 1)[1])
    assert drawn and all(e.startswith("new-") for e in drawn), drawn


def test_a_link_never_files_grades_under_another_reviewer(judged) -> None:
    api, events = judged
    ui = signed_in(api, SHOP_KEY)
    event = events["shop-0"]
    form = {"app": "shop", "event_id": "shop-0", "next": "/ui/review/shop/shop-0",
            "reviewer": "ann", "grade": f"2:{event['passages'][0]['id']}"}  # fmt: skip
    assert ui.post("/ui/grades", data=form, headers={"origin": api.url}).status_code == 303
    page = ui.get("/ui/review/shop/shop-1", params={"reviewer": "mallory"})
    assert page.status_code == 200
    assert 'id=reviewer name=reviewer value="ann"' in page.text  # the signed-in reviewer
    assert "id=reviewer-asked" in page.text and "<b>mallory</b>" in page.text
    fresh = signed_in(api, SHOP_KEY)  # no reviewer yet: the link's name is not filled in
    page = fresh.get("/ui/review/shop/shop-1", params={"reviewer": "mallory"})
    assert 'id=reviewer name=reviewer value=""' in page.text and "<b>mallory</b>" in page.text
