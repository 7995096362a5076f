"""Signing in to `/ui` and every page POST: from this site only, within a small body, and a
cookie that holds a session, never the key (`ragmon.api.browser`), over real HTTP."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from ragmon.api.auth import KeyRing
from ragmon.api.browser import COOKIE, FORM_MAX_BYTES
from tests.support.api_server import ApiServer
from tests.support.waiting import scaled

KEY, SHOP_KEY = "admin-key-0123456789", "shop-key-0123456789"


@pytest.fixture
def api(make_api: Callable[..., ApiServer]) -> ApiServer:
    return make_api(RAGMON_API_KEYS=f"{KEY},{SHOP_KEY}:shop")


def page(api: ApiServer) -> httpx.Client:
    return httpx.Client(base_url=api.url, follow_redirects=False, timeout=scaled(30))


def sign_in(ui: httpx.Client, key: str, **headers: str) -> httpx.Response:
    return ui.post("/ui/login", data={"key": key, "next": "/ui"}, headers=headers)


@pytest.mark.process  # the overview is built in the API's pages child process
def test_the_cookie_holds_a_session_not_the_key(api: ApiServer) -> None:
    ui = page(api)
    r = sign_in(ui, KEY, origin=api.url)
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    session = ui.cookies[COOKIE]
    assert KEY not in session and KEY not in r.headers["set-cookie"]
    assert "httponly" in r.headers["set-cookie"].lower()
    assert ui.get("/ui").status_code == 200  # the session opens the pages
    # the key itself in the cookie opens nothing, nor does a session altered by one character
    for forged in (KEY, session[:-1] + ("A" if session[-1] != "A" else "B")):
        other = page(api)
        other.cookies.set(COOKIE, forged)
        assert other.get("/ui").status_code == 303  # to the sign-in page


def test_a_session_ends_when_its_key_leaves_the_configuration() -> None:
    ring = KeyRing((KEY, f"{SHOP_KEY}:shop"))
    session = ring.session(SHOP_KEY, 60)
    assert session is not None and ring.from_session(session).app == "shop"
    assert KeyRing((KEY,)).from_session(session) is None  # the shop key was removed
    assert ring.session("not-a-configured-key-000", 60) is None
    assert ring.from_session(ring.session(KEY, -1)) is None  # expired


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "null"},  # a sandboxed frame or a redirect chain
        {"sec-fetch-site": "cross-site"},
    ],
)
def test_a_cross_site_form_cannot_sign_a_browser_in(api: ApiServer, headers: dict) -> None:
    """Login CSRF: another site's page posting the attacker's key in the victim's browser."""
    ui = page(api)
    r = sign_in(ui, KEY, **headers)
    assert r.status_code == 403 and "cross-site request refused" in r.json()["detail"]
    assert COOKIE not in ui.cookies and "set-cookie" not in r.headers


def test_same_site_posts_pass(make_api: Callable[..., ApiServer]) -> None:
    api = make_api(RAGMON_API_KEYS=KEY, RAGMON_EXPLORER_URL="https://mon.example.com/ui")
    for headers in (
        {"origin": api.url},
        {"origin": "https://mon.example.com"},  # behind a proxy: RAGMON_EXPLORER_URL's origin
        {"sec-fetch-site": "same-origin"},
        {},  # neither header: not a browser, so not a cross-site form
    ):
        ui = page(api)
        assert sign_in(ui, KEY, **headers).status_code == 303 and COOKIE in ui.cookies, headers


def test_the_login_body_is_limited(api: ApiServer) -> None:
    ui = page(api)
    big = {"key": KEY, "next": "/ui", "pad": "x" * FORM_MAX_BYTES}
    assert ui.post("/ui/login", data=big).status_code == 413
    # without Content-Length (chunked) it is cut off as it streams in
    chunks = (b"pad=" + b"x" * 4096 for _ in range(1000))
    r = ui.post("/ui/login", content=chunks,
                headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert r.status_code == 413 and COOKIE not in ui.cookies
