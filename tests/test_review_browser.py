"""People grading in a real headless Chromium (Debian's, as `tests/test_explorer_browser.py`):
an app-bound key signs in, grades every passage of an event drawn on `/ui/review` and one
passage on the event page, one click each, and sees the agreement with the judge and the
corrected nDCG@K change; a repeated grade changes nothing; another app's key, an unknown
event or passage and a cross-site form are refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.stack import Stack
from tests.support.waiting import wait_until
from tests.test_explorer_browser import browser, follow, static_page  # noqa: F401 - fixture

pytestmark = pytest.mark.slow
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ADMIN, SHOP_KEY, OTHER_KEY = "admin-0123456789", "shop-key-0123456789", "other-key-0123456789"
SERIES = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "faq"}
WORDS = ["refund", "invoice", "login", "quota", "export", "webhook", "billing", "token"]
SEEDED = 11  # events people graded before the browser: agreement and estimates exist


def shop_event(i: int) -> dict:
    a, b = WORDS[i % len(WORDS)], WORDS[(i * 3 + 1) % len(WORDS)]
    texts = [f"{a} {b} case {i} answered here", f"{b} only", "nothing at all", f"{a} {b}"]
    return {
        "event_id": f"shop-{i}",
        "query": f"{a} {b} case {i}",
        "k": 2,
        "passages": [{"id": f"p{j}", "text": t} for j, t in enumerate(texts)],
        "labels": SERIES,
    }


def api(stack: Stack, key: str) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def corrected_ndcg(stack: Stack) -> dict | None:
    """shop's corrected nDCG@K as a worker last summarized it (None: no summary yet)."""
    with api(stack, ADMIN) as c:
        found = c.get("/v1/estimates", params={"app": "shop"}).json()["series"]
    return found[0]["measures"]["ndcg"]["corrected"] if found else None


def summarized(stack: Stack, other_than: dict | None = None) -> dict:
    """Until a worker's summary of shop's estimates has a corrected nDCG@K other than
    `other_than` (the API asks for a summary when people grade; the review page reads it)."""
    return wait_until(
        lambda: (got := corrected_ndcg(stack)) is not None and got != other_than and got,
        60,
        "shop's corrected nDCG@K summarized anew",
    )


def judged(c: httpx.Client, app: str, event_id: str) -> dict:
    return c.get(f"/v1/retrievals/{event_id}", params={"app": app}).json()


@pytest.fixture
def fed(redis_url: str) -> Iterator[tuple[Stack, list[dict]]]:
    keys = f"{ADMIN},{SHOP_KEY}:shop,{OTHER_KEY}:other"
    stack = Stack(redis_url, workers=1, env={"RAGMON_API_KEYS": keys}).start()
    events = [shop_event(i) for i in range(16)]
    other = {**shop_event(99), "event_id": "other-0", "labels": {"app": "other"}}
    stack.client.headers["Authorization"] = f"Bearer {ADMIN}"
    stack.post([*events, other])
    results = stack.wait_done([e["event_id"] for e in events], timeout=120, app="shop")
    assert all(r["status"] == "done" for r in results)
    with api(stack, ADMIN) as c:
        seed = [
            {"app": "shop", "event_id": r["event_id"], "passage_id": p["id"],
             "grade": min(3, p["grade"] + p["rank"] % 2), "reviewer": "seed"}
            for r in results[:SEEDED] for p in r["passages"]
        ]  # fmt: skip
        assert c.post("/v1/grades", json={"grades": seed}).status_code == 200
    summarized(stack)
    yield stack, results
    stack.stop()


def standing(chrome: webdriver.Chrome) -> tuple[int, str, str]:
    """(pairs, kappa, corrected nDCG@K) as the review page shows them."""
    row = chrome.find_elements(By.CSS_SELECTOR, "#agreement tr")[1]
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    est = {
        r.find_elements(By.TAG_NAME, "td")[0].text: [
            c.text for c in r.find_elements(By.TAG_NAME, "td")
        ]
        for r in chrome.find_elements(By.CSS_SELECTOR, "#estimates tr")[1:]
    }
    return int(cells[1]), cells[4], est["nDCG@K"][2]


def click(chrome: webdriver.Chrome, button: object) -> None:
    """Click a grade button and wait for the page it comes back to."""
    old = chrome.find_element(By.TAG_NAME, "html")
    button.click()  # type: ignore[attr-defined]
    WebDriverWait(chrome, 30).until(lambda b: old != b.find_element(By.TAG_NAME, "html"))


def test_grading_in_the_browser_moves_agreement_and_the_corrected_estimate(
    browser: webdriver.Chrome,  # noqa: F811 - the fixture imported above
    fed: tuple[Stack, list[dict]],
) -> None:
    stack, results = fed
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/ui/login?next=/ui/review")
    browser.find_element(By.NAME, "key").send_keys(SHOP_KEY)  # a key bound to app shop
    # the sign-in page's own URL names /ui/review (next=): wait for the page itself
    follow(browser, browser.find_element(By.TAG_NAME, "button"), f"{stack.url}/ui/review")
    links = browser.find_elements(By.CSS_SELECTOR, "#series-to-review a")
    assert [a.text for a in links] == ["shop/kb/bm25/faq"]  # not app other's
    follow(browser, links[0], "/ui/review/shop/")
    event_id = browser.current_url.split("?")[0].rsplit("/", 1)[1]
    shown = next(r for r in results if r["event_id"] == event_id)
    assert browser.find_element(By.ID, "query").text == shown["query"]
    pairs, kappa, ndcg = standing(browser)
    summary = corrected_ndcg(stack)
    assert pairs == 4 * SEEDED and kappa != "n/a" and ndcg != "n/a"

    browser.find_element(By.ID, "reviewer").send_keys("ann")
    for rank in range(1, len(shown["passages"]) + 1):  # every passage, one click each: 0
        row = browser.find_elements(By.CSS_SELECTOR, "#review tr")[rank]
        click(browser, row.find_element(By.XPATH, ".//button[starts-with(., '0 ')]"))
    assert browser.find_element(By.ID, "progress").text == "4 of 4"
    summarized(stack, summary)  # a worker summarized the estimates anew

    def all_four() -> tuple[int, str, str] | None:  # a summary between two clicks has fewer
        browser.refresh()
        got = standing(browser)
        return got if got[0] == pairs + 4 else None

    # ann's four grades are pairs with the judge's
    after = wait_until(all_four, 60, "the review page's summary with ann's four grades", 0.5)
    assert after[1] != kappa and after[2] != ndcg  # agreement and the estimate moved
    with api(stack, SHOP_KEY) as c:
        mine = [h for p in judged(c, "shop", event_id)["passages"]
                for h in p.get("human_grades", ()) if h["reviewer"] == "ann"]  # fmt: skip
    assert [h["grade"] for h in mine] == [0, 0, 0, 0]

    # the event page: the same buttons beside the judge's grades; a repeat changes nothing
    other_id = next(r["event_id"] for r in results if r["event_id"] != event_id)
    browser.get(f"{stack.url}/ui/events/shop/{other_id}")
    assert browser.find_element(By.ID, "reviewer").get_attribute("value") == "ann"  # remembered
    first = browser.find_elements(By.CSS_SELECTOR, "#passages tr")[1]
    click(browser, first.find_element(By.XPATH, ".//button[starts-with(., '3 ')]"))
    first = browser.find_elements(By.CSS_SELECTOR, "#passages tr")[1]
    assert "ann: 3" in first.text
    with api(stack, SHOP_KEY) as c:
        before = judged(c, "shop", other_id)
        click(browser, first.find_element(By.XPATH, ".//button[starts-with(., '3 ')]"))
        assert judged(c, "shop", other_id) == before  # not even the time changed

    # another app's key, unknown event and passage: refused, named
    with api(stack, OTHER_KEY) as c:
        r = c.post("/v1/grades", json={"grades": [
            {"app": "shop", "event_id": event_id, "passage_id": "p0", "grade": 1,
             "reviewer": "eve"}]})  # fmt: skip
        assert r.status_code == 403 and "grades[0].app" in r.json()["detail"]
    with api(stack, SHOP_KEY) as c:
        item = {"app": "shop", "event_id": "no-such-event", "passage_id": "p0", "grade": 1,
                "reviewer": "ann"}  # fmt: skip
        r = c.post("/v1/grades", json={"grades": [item]})
        assert r.status_code == 404 and r.json()["detail"][0]["loc"][-1] == "event_id"
        r = c.post("/v1/grades", json={"grades": [{**item, "event_id": event_id,
                                                   "passage_id": "p-none"}]})  # fmt: skip
        assert r.status_code == 422 and "p-none" in r.json()["detail"][0]["msg"]
    browser.get(f"{stack.url}/ui/review?app=other")
    assert "may only read app=shop" in browser.page_source

    # a page of another site submits a grade in this signed-in browser: refused, not stored
    form = (
        f'<form method=post action="{stack.url}/ui/grades">'
        f'<input name=app value=shop><input name=event_id value="{other_id}">'
        "<input name=reviewer value=mallory><input name=next value=/ui>"
        '<input name=grade value="0:p1"></form><script>document.forms[0].submit()</script>'
    )
    with static_page(form) as evil:
        browser.get(evil)
        WebDriverWait(browser, 30).until(lambda b: b.current_url.startswith(stack.url))
        assert "cross-site request refused" in browser.page_source
    with api(stack, SHOP_KEY) as c:
        people = [h["reviewer"] for p in judged(c, "shop", other_id)["passages"]
                  for h in p.get("human_grades", ())]  # fmt: skip
    assert "mallory" not in people and "ann" in people
