"""`GET /v1/retrievals` and the `/ui` pages over real HTTP: filters, cursors, clear errors, and
an app-bound key that never sees another app's events, in JSON or in HTML."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from ragmon.api.browser import COOKIE
from ragmon.core.measures import compute
from ragmon.core.wire import event_ref
from ragmon.store import Store, text_hash
from ragmon.store.records import without_texts
from ragmon.store.sealing import new_key
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.waiting import scaled

pytestmark = pytest.mark.server  # the real API over HTTP

ADMIN, SHOP_KEY = "admin-key-0123456789", "shop-key-0123456789"
KEYS = f"{ADMIN},{SHOP_KEY}:shop"
NOW = datetime.now(UTC).replace(microsecond=0)


def finish(store: Store, app: str, i: int, retriever: str, grades: list[int], **extra) -> None:
    """Store and finish one event as a worker does (passage text kept unless stripped);
    `judge=<identity>` names the judge that graded it."""
    judge = extra.pop("judge", None)
    labels = {"app": app, "index": "kb", "retriever": retriever, "segment": "all"}
    event = {
        "event_id": f"{app}-{i}",
        "timestamp": (NOW - timedelta(minutes=i)).isoformat(),
        "query": f"secret question {app} {i}",
        "k": 3,
        "passages": [{"id": f"p{j}", "text": f"text {j}"} for j in range(len(grades))],
        "labels": labels,
        "_received_at": time.time(),
        **extra,
    }
    ref = event_ref(app, event["event_id"])
    store.client.hset(store.keys.event(ref), mapping={"s": "queued", "rt": time.time()})
    store.client.hset(store.keys.event(ref), "p", store.sealer.seal(_json(event)))
    result = {
        "event_id": event["event_id"],
        "status": "done",
        "measures": compute(grades, 3),
        "labels": labels,
        "grades": grades,
        "grade_source": ["judge"] * len(grades),
    }
    if judge:
        result["judge"] = judge
    stripped = None if store.settings.store_text else without_texts(event)
    assert store.finish(event, result, grades, stripped)


def _json(event: dict) -> str:
    import json

    return json.dumps({k: v for k, v in event.items() if not k.startswith("_")})


@pytest.fixture
def api(make_api: Callable[..., ApiServer]) -> ApiServer:
    server = make_api(RAGMON_API_KEYS=KEYS)
    for i in range(12):
        finish(server.store, "shop", i, ("bm25", "dense")[i % 2], [0, 0, 1] if i % 3 else [3, 2, 0])
    for i in range(5):
        finish(server.store, "blog", i, "bm25", [0, 0, 0])
    return server


NESTED = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
FAILED_NAN = base64.urlsafe_b64encode(b'["time",true,"nan"]').decode()
FAILED_WORD = base64.urlsafe_b64encode(b'["time",true,"abc"]').decode()


def ui_client(api: ApiServer) -> httpx.Client:
    ui = httpx.Client(base_url=api.url, follow_redirects=False, timeout=scaled(30))
    assert ui.post("/ui/login", data={"key": ADMIN}).status_code == 303
    return ui


def get(api: ApiServer, key: str, path: str = "/v1/retrievals", **params: str) -> httpx.Response:
    return api.client.get(path, params=params, headers={"Authorization": f"Bearer {key}"})


def test_search_filters_and_pages_with_cursors(api: ApiServer) -> None:
    first = get(api, ADMIN, app="shop", retriever="bm25", hit="0", limit="2")
    assert first.status_code == 200
    body = first.json()
    assert [e["event_id"] for e in body["events"]] == ["shop-2", "shop-4"]  # newest first
    assert all(
        e["measures"]["hit"] == 0 and e["labels"]["retriever"] == "bm25" for e in body["events"]
    )
    second = get(
        api, ADMIN, app="shop", retriever="bm25", hit="0", limit="2", cursor=body["next_cursor"]
    )
    assert [e["event_id"] for e in second.json()["events"]] == ["shop-8", "shop-10"]
    by_ndcg = get(api, ADMIN, sort="ndcg", order="desc", limit="1").json()["events"]
    assert by_ndcg[0]["measures"]["ndcg"] == 1.0


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"ndgc_lt": "0.3"}, "ndgc_lt: unknown parameter"),
        ({"ndcg_lt": "low"}, "ndcg_lt: expected a number"),
        ({"sort": "speed"}, "sort: one of time"),
        ({"cursor": "nonsense!"}, "cursor: not a cursor"),
        ({"from": "yesterday"}, "from: expected epoch milliseconds or ISO 8601"),
        ({"limit": "5000"}, "limit: between 1 and 200"),
        # hostile values (before: 500, or a 503 "event store unavailable" from the store thread)
        ({"ndcg_lt": "nan"}, "ndcg_lt: expected a finite number, got 'nan'"),
        ({"t_gt": "inf"}, "t_gt: expected a finite number"),
        ({"hit": "-Infinity"}, "hit: expected a finite number"),
        ({"ndcg_ge": "1e400"}, "ndcg_ge: expected a finite number"),
        ({"from": "9" * 400}, "from: epoch milliseconds out of range (at most 13 digits)"),
        ({"to": "-" + "9" * 400}, "to: epoch milliseconds out of range"),
        ({"from": "99999999999999"}, "from: epoch milliseconds out of range"),
        ({"from": "\u00b2"}, "from: expected epoch milliseconds or ISO 8601"),
        ({"cursor": NESTED}, "cursor: not a cursor"),
        ({"cursor": "A" * 5000}, "cursor: not a cursor"),
        ({"status": "failed", "cursor": FAILED_NAN}, "cursor: not a cursor"),
        ({"status": "failed", "cursor": FAILED_WORD}, "cursor: not a cursor"),
    ],
)
def test_a_bad_parameter_is_named_in_one_line(api: ApiServer, params: dict, says: str) -> None:
    r = get(api, ADMIN, **params)
    assert r.status_code == 400
    assert r.json()["detail"].startswith(says) and "\n" not in r.json()["detail"]
    page = ui_client(api).get("/ui/events", params=params)  # the explorer's page says the same
    assert page.status_code == 400 and "Bad search" in page.text


def test_thresholds_past_the_measures_range_are_searches_not_errors(api: ApiServer) -> None:
    """Finite values outside any measure's range (1e308) are valid thresholds: all or none."""
    assert len(get(api, ADMIN, ndcg_lt="1e308", app="shop").json()["events"]) == 12
    assert get(api, ADMIN, ndcg_gt="1e308").json()["events"] == []
    assert len(get(api, ADMIN, ndcg_gt="-1e308", app="blog").json()["events"]) == 5


@pytest.mark.process  # the overview is built in the API's pages child process
def test_an_app_bound_key_never_sees_another_apps_events(api: ApiServer) -> None:
    mine = get(api, SHOP_KEY, limit="200").json()["events"]
    assert len(mine) == 12 and {e["labels"]["app"] for e in mine} == {"shop"}
    assert get(api, SHOP_KEY, app="blog").status_code == 403
    # filters that would match only blog's events find nothing rather than blog's
    assert get(api, SHOP_KEY, retriever="bm25", ndcg_lt="0.01").json()["events"] == [
        e for e in get(api, ADMIN, app="shop", retriever="bm25", ndcg_lt="0.01").json()["events"]
    ]
    finish(api.store, "blog", 99, "bm25", [0, 0, 0], trace_id="t-1")
    assert get(api, SHOP_KEY, trace_id="t-1").json()["events"] == []
    assert len(get(api, ADMIN, trace_id="t-1").json()["events"]) == 1
    assert api.client.get("/v1/retrievals").status_code == 401
    # the pages: sign in with the bound key, then only shop's series and events appear
    ui = httpx.Client(base_url=api.url, follow_redirects=True, timeout=scaled(30))
    assert "Sign in" in ui.get("/ui").text
    ui.post("/ui/login", data={"key": SHOP_KEY, "next": "/ui"})
    overview = ui.get("/ui")
    assert "shop" in overview.text and "blog" not in overview.text
    assert ui.get("/ui/events", params={"app": "blog"}).status_code == 403
    assert ui.get("/ui/events/blog/blog-1").status_code == 403
    page = ui.get("/ui/events/shop/shop-0")
    assert page.status_code == 200 and "secret question shop 0" in page.text


@pytest.mark.process  # the overview is built in the API's pages child process
def test_a_refused_key_does_not_sign_in(api: ApiServer) -> None:
    ui = httpx.Client(base_url=api.url, follow_redirects=True, timeout=scaled(30))
    r = ui.post("/ui/login", data={"key": "wrong", "next": "https://evil.example/"})
    assert "That key was refused" in r.text and COOKIE not in ui.cookies
    r = ui.post("/ui/login", data={"key": ADMIN, "next": "https://evil.example/"})
    assert r.url.path == "/ui"  # never redirected off the explorer


def test_text_storage_off_shows_hashes_and_says_why(make_api: Callable[..., ApiServer]) -> None:
    api = make_api(RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=new_key())
    store = api.store
    finish(store, "shop", 1, "bm25", [3, 0, 0])
    page = api.client.get("/ui/events/shop/shop-1").text
    assert "Text storage is off (RAGMON_STORE_TEXT=false)" in page
    assert "secret question" not in page and "text hash" in page
    assert text_hash("text 0") in page and text_hash("secret question shop 1") in page


def test_a_sealing_key_dropped_too_early_is_named_not_a_store_outage(
    make_api: Callable[..., ApiServer],
) -> None:
    """An event still queued (sealed) read after its key left RAGMON_TEXT_KEYS: the answer
    names the setting (before: 503 "event store unavailable", as if Redis were down)."""
    first = make_api(RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=new_key())
    assert first.client.post("/v1/retrievals", json=make_event(event_id="e1")).status_code == 202
    rotated = make_api(RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=new_key())  # old key dropped
    r = rotated.client.get("/v1/retrievals/e1?app=test")
    assert r.status_code == 500 and "not in RAGMON_TEXT_KEYS" in r.json()["detail"], r.text
    assert "unavailable" not in r.text and "retry-after" not in r.headers
    page = rotated.client.get("/ui/events/test/e1")
    assert page.status_code == 500 and "not in RAGMON_TEXT_KEYS" in page.text
    assert "Event store unavailable" not in page.text
    assert rotated.client.get("/readyz").status_code == 200  # Redis itself is fine
