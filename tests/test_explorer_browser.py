"""The event explorer in a real headless Chromium (Debian's, through chromium-driver and
Selenium), on a stack fed with the demo traffic: the series overview, the event list filtered
to bm25 with nDCG < 0.3, then one event with its passages and grades.

`RAGMON_SCREENSHOTS=docs/img` keeps the screenshots the docs show (`docs/explorer.md`).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragmon.core.pages import source_words
from ragmon.demo.traffic import demo_events
from tests.monitor.test_explorer_api import finish
from tests.support.api_server import ApiServer
from tests.support.stack import Stack

pytestmark = pytest.mark.slow
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    exe, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not exe or not driver:
        pytest.skip(
            "chromium or chromium-driver missing (apt-get install -y chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = exe
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    yield chrome
    chrome.quit()


@pytest.fixture
def fed(redis_url: str) -> Iterator[Stack]:
    stack = Stack(redis_url, workers=1).start()  # the pages, not the fleet, are under test
    events = demo_events(per_day=20)  # 280: the bm25 regression's 7 days hold about 45
    stack.post(events)
    stack.wait_done([e["event_id"] for e in events], timeout=300, app="support-bot")
    yield stack
    stack.stop()


def shot(browser: webdriver.Chrome, name: str) -> None:
    where = os.environ.get("RAGMON_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(where) / f"explorer-{name}.png"))


def follow(browser: webdriver.Chrome, element: object, expect: str) -> None:
    """Click and wait for the page it leads to (a click does not wait for the navigation)."""
    element.click()  # type: ignore[attr-defined]
    WebDriverWait(browser, 30).until(lambda b: expect in b.current_url)


def cells(row: object, tag: str = "td") -> list[str]:
    return [c.text for c in row.find_elements(By.TAG_NAME, tag)]  # type: ignore[attr-defined]


def test_from_the_overview_to_one_bad_bm25_event(browser: webdriver.Chrome, fed: Stack) -> None:
    browser.get(f"{fed.url}/ui")
    rows = browser.find_elements(By.CSS_SELECTOR, "#series tr")[1:]
    by_retriever = {cells(r)[2]: r for r in rows}
    assert {"bm25", "dense-v1", "hybrid-v2"} <= set(by_retriever)
    held = sum(int(r.find_element(By.CSS_SELECTOR, "[data-events] a.worst").text) for r in rows)
    assert held == 280  # every demo event judged and held
    shot(browser, "overview")

    # bm25's count leads to its events worst first (issue 36: two actions to the cause), each
    # with its query; then filter to bm25 alone, nDCG < 0.3
    follow(browser, by_retriever["bm25"].find_element(By.CSS_SELECTOR, "a.worst"), "bm25")
    assert "sort=ndcg" in browser.current_url
    head = cells(browser.find_element(By.CSS_SELECTOR, "#events tr"), "th")
    worst = [dict(zip(head, cells(r), strict=True))
             for r in browser.find_elements(By.CSS_SELECTOR, "#events tr.event")]  # fmt: skip
    assert worst and all(w["query"] not in ("", "–") for w in worst)
    ndcg = [float(w["nDCG@K"]) for w in worst]
    assert ndcg == sorted(ndcg), "worst first"
    form = browser.find_element(By.ID, "filters")
    for name in ("index", "segment"):
        form.find_element(By.NAME, name).clear()
    form.find_element(By.NAME, "ndcg_lt").send_keys("0.3")
    follow(browser, form.find_element(By.TAG_NAME, "button"), "ndcg_lt=0.3")
    assert "retriever=bm25" in browser.current_url
    head = cells(browser.find_element(By.CSS_SELECTOR, "#events tr"), "th")
    listed = browser.find_elements(By.CSS_SELECTOR, "#events tr.event")
    assert listed, "the demo's bm25 regression leaves events with nDCG < 0.3"
    for r in listed:
        values = dict(zip(head, cells(r), strict=True))
        assert values["series"].split("/")[1] == "bm25"
        assert float(values["nDCG@K"]) < 0.3
    shot(browser, "events")

    # the same list as JSON, with the same filters: the page shows what the API finds
    api = fed.client.get(
        "/v1/retrievals", params={"retriever": "bm25", "ndcg_lt": "0.3", "sort": "ndcg"}
    )
    assert [e["event_id"] for e in api.json()["events"]] == [
        r.find_element(By.TAG_NAME, "a").text for r in listed
    ]

    link = listed[0].find_element(By.TAG_NAME, "a")
    event_id = link.text
    follow(browser, link, link.get_attribute("href") or event_id)
    assert browser.find_element(By.ID, "status").text == "done"
    passages = browser.find_elements(By.CSS_SELECTOR, "#passages tr")[1:]
    stored = fed.client.get(f"/v1/retrievals/{event_id}", params={"app": "support-bot"}).json()
    assert len(passages) == len(stored["passages"]) > 0
    for tr, p in zip(passages, stored["passages"], strict=True):
        rank, pid, _, grade, source, _, text, _ = cells(tr)  # the last: people's grades
        assert (int(rank), pid, text) == (p["rank"], p["id"], p["text"])
        assert grade == ("" if p["grade"] is None else str(p["grade"]))
        word = source_words(p["grade_source"], p["graded_by"])  # "lexical judge (…)": no LLM
        assert "LLM judge" not in word or not (p["graded_by"] or "").startswith("lexical/")
        by = p["graded_by"]  # the judge identity
        assert source == (f"{word} ({by})" if by not in (None, "known") else word)
    measures = dict(
        cells(r, "th") + cells(r) for r in browser.find_elements(By.CSS_SELECTOR, "#measures tr")
    )
    assert float(measures["nDCG@K"]) == pytest.approx(stored["measures"]["ndcg"], abs=5e-4)
    shot(browser, "event")


def test_a_retriever_poor_from_its_first_day_is_flagged(
    browser: webdriver.Chrome, make_api: Callable[..., ApiServer]
) -> None:
    """A retriever that was never good has no change to colour: the overview flags its level
    (Hit@K a quarter, the level alert's line 0.6) in red and lists it first."""
    api = make_api()
    for i in range(40):
        finish(api.store, "shop", i, "good", [3, 2, 0])
        finish(api.store, "shop", 100 + i, "weak", [3, 0, 0] if i % 4 == 0 else [0, 0, 1])
    browser.get(f"{api.url}/ui")
    rows = browser.find_elements(By.CSS_SELECTOR, "#series tr")[1:]
    assert [cells(r)[2] for r in rows] == ["weak", "good"]
    flag = rows[0].find_element(By.CSS_SELECTOR, "td.worse")
    assert flag.text == "poor level: Hit@K 0.250 below 0.6 over 40 events in the last 24 h"
    assert flag.value_of_css_property("color") == "rgba(187, 0, 0, 1)"  # .worse: #b00
    assert cells(rows[1])[-1] == ""


def test_a_cross_site_form_cannot_sign_the_browser_in(
    browser: webdriver.Chrome, make_api: Callable[..., ApiServer]
) -> None:
    """Login CSRF in a real browser: a page of another site (`localhost` against the API's
    `127.0.0.1`) submits the sign-in form with its own key; the browser must stay signed out.
    The explorer's own sign-in form still works."""
    key = "browser-key-0123456789"
    api = make_api(RAGMON_API_KEYS=key)
    form = (
        f'<form method=post action="{api.url}/ui/login"><input name=key value="{key}">'
        "<input name=next value=/ui></form><script>document.forms[0].submit()</script>"
    )
    with static_page(form) as evil:
        browser.delete_all_cookies()
        browser.get(evil)
        WebDriverWait(browser, 30).until(lambda b: b.current_url.startswith(api.url))
        assert "cross-site request refused" in browser.page_source
    browser.get(f"{api.url}/ui")
    assert "Sign in" in browser.page_source  # no session was set
    browser.find_element(By.NAME, "key").send_keys(key)
    follow(browser, browser.find_element(By.TAG_NAME, "button"), "/ui")
    WebDriverWait(browser, 30).until(lambda b: "Sign in" not in b.title)
    assert key not in str(browser.get_cookies())  # the cookie holds a session, not the key


@contextmanager
def static_page(html: str) -> Iterator[str]:
    """Serve one HTML page on `localhost` (another site than the API's 127.0.0.1)."""
    body = html.encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
