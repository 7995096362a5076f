"""People grade in the explorer: `/ui/review` (events drawn at random from one series) and the
grade buttons of every page, which POST to `/ui/grades`.

A grade from a page goes through the same checks and store as `POST /v1/grades`
(`GradeService`): the signed-in key's app scope, a judged event, a known passage. The POST must
come from this site (`Browser.page_post`: a cross-site form is refused before its body is read)
and hold a session; the reviewer's name is remembered in a cookie of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from ragmon.api.auth import Principal
from ragmon.api.browser import Browser
from ragmon.api.grades import GradeService
from ragmon.api.schemas import GradeBatch
from ragmon.api.service import Refused, validation_errors
from ragmon.core import pages, review_pages
from ragmon.core.pages import GradeForm
from ragmon.core.search import parse_search
from ragmon.core.wire import LABEL_KEYS, Status, series_name, split_ref
from ragmon.oversight import GAUGE_DAYS, HUMAN, LAST, last_days, summarized, summarized_agreement
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.templates import render

REVIEWER_COOKIE = "ragmon_reviewer"
REVIEWER_AGE_S = 90 * 86400
DRAWS = 8  # events drawn at once: the first the reviewer has not graded yet is shown

Built = tuple[str, int] | Response
Answer = Callable[[Request, Callable[[Principal | None], Awaitable[Built]]], Awaitable[Response]]
Read = Callable[..., Awaitable[Any]]


def window_start() -> float:
    """Unix seconds of the estimates' window's first day: the review page draws from there."""
    return datetime.combine(last_days().start, time.min, UTC).timestamp()


def reviewer_of(request: Request) -> str:
    """The reviewer's name: the cookie's (set by their first grade). A link's `reviewer`
    parameter never files grades under another name (`grade_form` shows it instead)."""
    return (request.cookies.get(REVIEWER_COOKIE) or "")[:64]


def grade_form(request: Request) -> GradeForm:
    """The buttons' form for a page: come back to this very page after a grade; a reviewer a
    link names that is not the signed-in one is only offered (typed in the field to switch)."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    reviewer = reviewer_of(request)
    asked = (request.query_params.get("reviewer") or "")[:64]
    return GradeForm(reviewer, back, asked if asked != reviewer else "")


def _detail(detail: Any) -> str:
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, d['loc'][1:]))}: {d['msg']}" for d in detail)
    return str(detail)


def add_review_routes(
    router: APIRouter,
    settings: Settings,
    store: Store,
    browser: Browser,
    grades: GradeService,
    answer: Answer,
    read: Read,
) -> None:
    """`/ui/review`, `/ui/review/{app}/{event_id}` and the buttons' `POST /ui/grades`."""

    def standing_of(labels: dict[str, str]) -> dict[str, Any]:
        """What people's grades say so far about this app's judge and this series."""
        agreement = {
            judge if ref == HUMAN else f"{judge} vs {ref}": a
            for (_, judge, ref), a in summarized_agreement(store, labels["app"]).items()
        }
        window = last_days()
        _, _, found = summarized(store, LAST, labels)
        measures = found[0].measures if found else {}
        return review_pages.standing(agreement, measures, len(window.days))

    def bound_app(principal: Principal | None, asked: str | None) -> str | None:
        bound = principal.app if principal is not None else None
        if bound is not None and asked not in (None, "", bound):
            raise PermissionError(f"app: this API key may only read app={bound}")
        return bound or asked or None

    @router.get("/review")
    async def review(request: Request) -> Response:
        """Without a whole series: the series to choose from. With one: a judged event of it
        drawn at random (the first of `DRAWS` this reviewer has not graded), redirected to."""
        params = dict(request.query_params)
        reviewer = reviewer_of(request)

        async def build(principal: Principal | None) -> tuple[str, int] | Response:
            app = bound_app(principal, params.get("app"))
            chosen = {k: params[k] for k in LABEL_KEYS if params.get(k)}
            if app:
                chosen["app"] = app
            if set(chosen) != set(LABEL_KEYS):
                search = parse_search({"app": app} if app else {})
                names = await read(store.explore.series, search)
                counts = await read(store.explore.counts, names, window_start())
                return render(review_pages.choose(list(zip(names, counts, strict=True)))), 200
            refs = await read(store.explore.draw, series_name(chosen), DRAWS, window_start())
            if not refs:
                text = (f"No judged event of this series in the last {GAUGE_DAYS} days, the "
                        "window the corrected estimates count.")  # fmt: skip
                return render(pages.message("Review", text)), 404
            pick = refs[0]
            for ref in refs:
                graded = await read(store.human.of_event, *split_ref(ref))
                if not any(r["reviewer"] == reviewer for r in graded):
                    pick = ref
                    break
            target = review_pages.review_event_url(*split_ref(pick))
            return RedirectResponse(target, 303)

        return await answer(request, build)

    @router.get("/review/{app}/{event_id:path}")
    async def review_event(request: Request, app: str, event_id: str) -> Response:
        async def build(principal: Principal | None) -> Built:
            bound_app(principal, app)
            found = await read(store.result, app, event_id)
            if found is None or found.get("status") != Status.DONE:
                text = "Unknown or not judged event (never received, expired, or queued)."
                return render(pages.message("Review", text)), 404
            labels = found["labels"]
            (held,) = await read(store.explore.counts, [series_name(labels)], window_start())
            standing = await read(standing_of, labels)
            return render(review_pages.review(found, grade_form(request), held, standing)), 200

        return await answer(request, build)

    @router.post("/grades")
    async def grade(request: Request) -> Response:
        """One button's grade: `grade` is `<0-3>:<passage id>`; back to `next` once stored."""
        try:
            principal, form = await browser.page_post(request)
            value, _, passage_id = form.get("grade", "").partition(":")
            item = {
                "app": form.get("app", ""),
                "event_id": form.get("event_id", ""),
                "passage_id": passage_id,
                "grade": int(value) if value.isdigit() else value,
                "reviewer": form.get("reviewer", "").strip(),
            }
            try:
                batch = GradeBatch.model_validate({"grades": [item]})
            except ValidationError as exc:
                raise Refused(422, None, validation_errors(exc)) from None
            await grades.submit(principal, batch)
            reviewer = batch.grades[0].reviewer
        except Refused as exc:
            return HTMLResponse(
                render(pages.message("Grade not stored", _detail(exc.detail))), exc.status
            )
        target = form.get("next", "")
        if not target.startswith("/ui/"):  # never redirect off the explorer
            target = "/ui/review"
        response = RedirectResponse(target, 303)
        response.set_cookie(
            REVIEWER_COOKIE, reviewer, max_age=REVIEWER_AGE_S,
            path="/ui", httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return response
