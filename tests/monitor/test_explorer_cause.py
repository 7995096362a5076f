"""From `/ui` to the cause in two actions (issue 36, item 4), over real HTTP on a real Redis:
a series leads to its worst events, lists show the query, free-text search over queries,
metadata filters, grade sources named truthfully; the search stays bounded per request."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape

import pytest

from ragmon.core.search import SCAN_BUDGET, parse_search
from ragmon.store.sealing import new_key
from tests.monitor.test_explorer_api import finish
from tests.support.api_server import ApiServer

pytestmark = pytest.mark.server  # the real API over HTTP


@pytest.fixture
def api(make_api: Callable[..., ApiServer]) -> ApiServer:
    server = make_api()
    for i in range(12):
        grades = [0, 0, 1] if i % 3 else [3, 2, 0]
        meta = {"tenant": "acme" if i % 2 else "globex", "beta": i % 4 == 0}
        finish(server.store, "shop", i, "bm25", grades, metadata=meta)
    return server


def _rows(page: str) -> list[str]:
    return re.findall(r"<tr class=event>(.*?)</tr>", page, re.S)


@pytest.mark.process  # the overview is built in the API's pages child process
def test_a_series_leads_to_its_worst_events_with_their_queries(api: ApiServer) -> None:
    overview = api.client.get("/ui").text
    link = unescape(re.search(r'<a class=worst href="([^"]+)"', overview).group(1))
    assert "sort=ndcg" in link and "retriever=bm25" in link
    page = api.client.get(link).text
    rows = _rows(page)
    assert len(rows) == 12
    ndcg = [float(re.findall(r"<td class=n>([\d.–]+)</td>", r)[0]) for r in rows]
    assert ndcg == sorted(ndcg) and ndcg[0] < ndcg[-1]  # worst first
    assert all("secret question shop" in r for r in rows), "each row shows its query"


def test_free_text_search_over_queries(api: ApiServer) -> None:
    found = api.client.get("/v1/retrievals", params={"query": "Question SHOP 7"}).json()
    assert [e["event_id"] for e in found["events"]] == ["shop-7"]
    assert found["events"][0]["query"] == "secret question shop 7"
    # every word must occur; words are matched inside longer words too ("quest")
    assert (
        len(api.client.get("/v1/retrievals", params={"query": "quest shop"}).json()["events"]) == 12
    )
    assert api.client.get("/v1/retrievals", params={"query": "shop nothing"}).json()["events"] == []
    page = api.client.get("/ui/events", params={"query": "question shop 11"}).text
    assert [r for r in _rows(page) if "shop-11" in r] and len(_rows(page)) == 1
    assert 'name="query" value="question shop 11"' in page  # the form keeps it
    assert api.client.get("/v1/retrievals", params={"query": " ,. "}).status_code == 400


def test_metadata_filters(api: ApiServer) -> None:
    acme = api.client.get("/v1/retrievals", params={"meta.tenant": "acme"}).json()["events"]
    assert sorted(e["event_id"] for e in acme) == sorted(f"shop-{i}" for i in range(1, 12, 2))
    assert all(e["metadata"]["tenant"] == "acme" for e in acme)
    both = api.client.get("/v1/retrievals", params={"meta": "tenant=globex, beta=true"}).json()
    assert sorted(e["event_id"] for e in both["events"]) == ["shop-0", "shop-4", "shop-8"]
    page = api.client.get("/ui/events", params={"meta.tenant": "globex", "meta.beta": "true"})
    assert page.status_code == 200 and len(_rows(page.text)) == 3
    assert "metadata tenant=globex" in page.text
    bad = api.client.get("/v1/retrievals", params={"meta": "tenant"})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("meta: expected key=value")


def test_a_rare_query_reads_a_bounded_share_per_request(make_api: Callable[..., ApiServer]) -> None:
    """A word that no query holds: each page reads at most SCAN_BUDGET records and says it is
    partial, with a cursor to go on."""
    api = make_api()
    for i in range(30):
        finish(api.store, "shop", i, "bm25", [0, 1, 0])
    body = api.client.get("/v1/retrievals", params={"query": "absent"}).json()
    assert body["events"] == [] and body["scanned"] == 30 <= SCAN_BUDGET
    found = api.store.explore.search(parse_search({"query": "absent"}), budget=10)
    assert found.scanned == 10 and found.partial and found.cursor


def test_grade_sources_name_the_judge_truthfully(make_api: Callable[..., ApiServer]) -> None:
    api = make_api()
    finish(api.store, "shop", 1, "bm25", [3, 0, 0], judge="lexical/lexical-1/per-event")
    finish(api.store, "shop", 2, "bm25", [3, 0, 0], judge="gpt-4o-mini/umbrela-1/pointwise")
    lexical = _rows(api.client.get("/ui/events", params={"query": "shop 1"}).text)[0]
    assert "lexical judge (offline, no LLM) 3" in lexical and "LLM" not in lexical.replace(
        "no LLM", ""
    )
    assert "LLM judge 3" in _rows(api.client.get("/ui/events", params={"query": "shop 2"}).text)[0]
    page = api.client.get("/ui/events/shop/shop-1").text
    assert "lexical judge (offline, no LLM)" in page and "LLM judge" not in page
    assert "LLM judge" in api.client.get("/ui/events/shop/shop-2").text


def test_no_query_column_text_when_text_storage_is_off(make_api: Callable[..., ApiServer]) -> None:
    api = make_api(RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=new_key())
    finish(api.store, "shop", 1, "bm25", [3, 0, 0])
    page = api.client.get("/ui/events").text
    assert "secret question" not in page and len(_rows(page)) == 1
    assert api.client.get("/v1/retrievals", params={"query": "secret"}).json()["events"] == []


@pytest.mark.process  # the overview is built in the API's pages child process
def test_a_series_at_the_floor_is_flagged_first(make_api: Callable[..., ApiServer]) -> None:
    api = make_api()
    for i in range(6):
        finish(api.store, "shop", i, "good", [3, 2, 0])
        finish(api.store, "shop", 100 + i, "stale", [0, 0, 0])
    finish(api.store, "shop", 200, "young", [0, 0, 0])  # one event is not enough to flag
    overview = api.client.get("/ui").text
    rows = re.findall(r"<tr( class=floor)?><td>shop</td><td>kb</td><td>(\w+)</td>", overview)
    assert rows[0] == (" class=floor", "stale")
    assert {name for flag, name in rows if flag} == {"stale"}
    assert "at the floor: Hit@K 0.000, nDCG@K 0.000 over 6 events in the last 24 h" in overview
