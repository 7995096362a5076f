"""The event explorer's pages under `/ui`, server-rendered (values from `ragmon.core.pages`,
HTML from `ragmon.templates`); the only writes are people's grades (`ragmon.api.review`).

The overview (`/ui`) is read and rendered in a child process of its own at the lowest CPU
priority (`ragmon.api.child`): its Python (the series' sums parsed, a Welch test per cell,
the HTML) grows with the series and, in the API process, held the event loop and the GIL
while other apps' events waited.

With API keys on (RAGMON_API_KEYS), a browser signs in once with a key and holds a session
(`ragmon.api.browser`: an HttpOnly cookie scoped to `/ui`, not the key); a key bound to an app
sees that app only, as on `GET /v1/retrievals`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ragmon.api.auth import Principal
from ragmon.api.browser import Browser
from ragmon.api.child import ChildProcess
from ragmon.api.grades import GradeService
from ragmon.api.review import add_review_routes, grade_form
from ragmon.api.service import Refused
from ragmon.core import pages
from ragmon.core.search import Search, SearchError, parse_search
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.templates import render

PROBLEMS = {500: "Cannot show this page", 503: "Event store unavailable"}


def scope(search: Search, principal: Principal | None) -> Search:
    """The search an API key may run: a key bound to an app searches that app only (asking for
    another app is refused, as on writes)."""
    bound = principal.app if principal is not None else None
    if bound is None:
        return search
    asked = search.labels.get("app")
    if asked not in (None, bound):
        raise PermissionError(f"app: this API key may only read app={bound}")
    return search.with_app(bound)


PAGE_SHARE = 0.25  # of the API process's time that explorer pages may take
PAGE_WAIT_MAX_S = 1.0  # the longest wait after one page (a page slowed by Redis, not by CPU)
PAGE_NICENESS = 19
_child_store: Store | None = None  # the pages' child's store, connected on its first page


def pages_child() -> ChildProcess:
    """The child process that builds overview pages, at nice 19 (ingest wins the CPU)."""
    return ChildProcess(_child_start)


def _child_start() -> None:
    os.nice(PAGE_NICENESS)


def overview_html(settings: Settings, store: Store, search: Search) -> str:
    """The overview page of the series `search` matches."""
    rows = [pages.SeriesRow(**r) for r in store.explore.overview(search)]
    rule = pages.LevelRule(settings.alert_z, settings.alert_min_events)
    return render(pages.overview(rows, settings.result_ttl_days, rule))


def child_ready() -> bool:
    """Runs in the pages' child process: nothing (the first call waits for it to start)."""
    return True


def overview_in_child(settings: Settings, search: Search) -> str:
    """Runs in the pages' child process: one Store for its life."""
    global _child_store
    if _child_store is None:
        _child_store = Store.connect(settings)
    return overview_html(settings, _child_store, search)


def explorer_ui(
    settings: Settings, store: Store, browser: Browser, grades: GradeService, child: ChildProcess
) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)
    # Pages take at most PAGE_SHARE of the time (their Redis reads and, for the overview, the
    # pages child's CPU; other pages, bounded by their scan budget, in the API process): one is
    # built at a time, and the next waits (1 / PAGE_SHARE - 1) times as long as the last one
    # took. Pages wait for each other, never the ingest routes (clients loading one app's
    # overview back to back held another app's ingest before the share;
    # tests/bench/bench_tenants.py).
    one_page = asyncio.Semaphore(1)

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), settings.store_timeout_s)

    async def answer(request: Request, build: Callable[[Principal | None], Any]) -> Response:
        principal = browser.principal(request)
        if principal is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", 303)
        try:
            async with one_page:
                started = time.monotonic()
                built = await build(principal)  # a failed build (Redis away) waits for nothing
                spent = time.monotonic() - started
                await asyncio.sleep(min(PAGE_WAIT_MAX_S, spent * (1 / PAGE_SHARE - 1)))
            if isinstance(built, Response):  # a redirect
                return built
            html, status = built
        except SearchError as exc:
            return HTMLResponse(render(pages.message("Bad search", str(exc))), 400)
        except PermissionError as exc:
            return HTMLResponse(render(pages.message("Not allowed", str(exc))), 403)
        except Refused as exc:
            return HTMLResponse(render(pages.message("Refused", str(exc.detail))), exc.status)
        except Exception as exc:  # Redis unreachable or too slow, a sealing key missing...
            # the page says what to check; the exception (addresses, its text) is logged
            refused = grades.unavailable(exc)
            title = PROBLEMS.get(refused.status, "Event store unavailable")
            return HTMLResponse(render(pages.message(title, str(refused.detail))), refused.status)
        return HTMLResponse(html, status)

    @router.get("")
    async def overview(request: Request) -> Response:
        async def build(principal: Principal | None) -> tuple[str, int]:
            search = scope(parse_search(dict(request.query_params)), principal)
            # a child that died (OOM kill ...) raises here once and is replaced next time; its
            # start (seconds on a busy machine) is not the store's time: not under the timeout
            await child.run(child_ready)
            built = child.run(overview_in_child, settings, search)
            return await asyncio.wait_for(built, settings.store_timeout_s), 200

        return await answer(request, build)

    @router.get("/events")
    async def events(request: Request) -> Response:
        async def build(principal: Principal | None) -> tuple[str, int]:
            search = scope(parse_search(dict(request.query_params)), principal)
            found = await read(store.explore.search, search)
            return render(pages.events(search, found.events, found.cursor, found.partial)), 200

        return await answer(request, build)

    @router.get("/events/{app}/{event_id:path}")
    async def event(request: Request, app: str, event_id: str) -> Response:
        async def build(principal: Principal | None) -> tuple[str, int]:
            scope(parse_search({"app": app}), principal)
            found = await read(store.result, app, event_id)
            if found is None:
                text = "Unknown event (never received, or expired: RAGMON_RESULT_TTL_DAYS)."
                return render(pages.message("Unknown event", text)), 404
            return render(pages.event(found, settings.store_text, grade_form(request))), 200

        return await answer(request, build)

    add_review_routes(router, settings, store, browser, grades, answer, read)

    @router.get("/login")
    async def login_page(next: str = "/ui", failed: bool = False) -> Response:
        return HTMLResponse(render(pages.login(next, failed)))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await browser.form(request)  # from this site only, within its limits
        target = form.get("next", "/ui")
        if not target.startswith("/ui"):  # never redirect off the explorer
            target = "/ui"
        response = RedirectResponse(target, 303)
        if not browser.sign_in(request, response, form.get("key", "")):
            return RedirectResponse(f"/ui/login?failed=1&next={quote(target, safe='')}", 303)
        return response

    return router
