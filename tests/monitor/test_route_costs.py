"""Every route declares its cost and its app in one place (`ragmon.api.costs`): a route added
without a row fails here, and so does a row whose route is gone; each body limit is kept (a
body one byte over answers `413`), and so is each item limit (one item over answers `422`)."""

from __future__ import annotations

import json

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from ragmon.api import create_app
from ragmon.api.costs import COSTS, MAX_BODY
from ragmon.settings import Settings
from ragmon.store import Store
from tests.support.api_server import ApiServer


def served(settings: Settings) -> set[str]:
    """`METHOD /path` of every route the API serves."""
    app = create_app(settings, store=Store.connect(settings))
    out = set()
    routes = list(app.routes)
    while routes:
        route = routes.pop()
        if isinstance(route, APIRoute | Route):
            out |= {f"{m} {route.path}" for m in route.methods or () if m != "HEAD"}
        elif hasattr(route, "original_router"):  # an included router (its paths prefixed)
            prefix = route.include_context.prefix
            assert not prefix, "a prefix given at include_router: add it to the paths here"
            routes += route.original_router.routes
    return out


def test_every_route_has_a_row_and_every_row_a_route(settings: Settings) -> None:
    routes = served(settings)
    assert sorted(routes - set(COSTS)) == [], "declare these routes in ragmon.api.costs.COSTS"
    assert sorted(set(COSTS) - routes) == [], "rows of ragmon.api.costs.COSTS without a route"


def test_the_check_fails_for_an_undeclared_route(settings: Settings) -> None:
    app = create_app(settings, store=Store.connect(settings))

    @app.get("/v1/undeclared")
    async def undeclared() -> dict:
        return {}

    routes = {f"{m} {r.path}" for r in app.routes if isinstance(r, APIRoute) for m in r.methods}
    assert routes - set(COSTS) == {"GET /v1/undeclared"}


BODIES = {
    path.split()[1]: cost.body
    for path, cost in COSTS.items()
    if path.startswith("POST /v1/") and cost.body not in (0, MAX_BODY)
}


@pytest.mark.parametrize("path", sorted(BODIES))
def test_a_body_one_byte_over_its_routes_limit_is_refused(api: ApiServer, path: str) -> None:
    limit = BODIES[path]
    assert limit < api.settings.max_body_bytes  # else the API-wide limit is what is tested
    r = api.client.post(path, content=b" " * (limit + 1),
                        headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 413, r.text
    assert str(limit) in r.json()["detail"]


def test_one_grade_over_the_declared_items_is_refused_before_it_is_built(api: ApiServer) -> None:
    items = COSTS["POST /v1/grades"].items
    grade = {"app": "a", "event_id": "e", "passage_id": "p", "grade": 1, "reviewer": "r"}
    body = json.dumps({"grades": [grade] * (items + 1)})
    r = api.client.post("/v1/grades", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] == "too_long"
