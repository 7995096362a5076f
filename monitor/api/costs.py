"""What one request of each route may cost, and whose request it is: declared once, here.

Every route of the API has a row (`tests/monitor/test_route_costs.py` fails for a route
without one, and for a row without a route): whose app it acts for, how many body bytes it
reads (`read_body` takes the limit from here: `body_limit`), how many items one request may
carry, what it reads in Redis and where its work runs. A row is a promise the route's code
keeps and the tests check: the body limit by a request one byte over it, the items by one
item over, the app by another app's key (CONTRIBUTING.md, "Adding a route").
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from ragmon.api.browser import FORM_MAX_BYTES
from ragmon.api.grades import GRADES_MAX_BYTES, MAX_GRADE_EVENTS
from ragmon.api.otlp import MAX_SPANS
from ragmon.core.wire import MAX_BATCH
from ragmon.settings import Settings
from ragmon.store.holds import MAX_BYTES as HELD_BYTES
from ragmon.store.holds import MAX_SPANS as HELD_SPANS

MAX_BODY = -1  # the body limit is RAGMON_MAX_BODY_BYTES


@dataclass(frozen=True)
class Cost:
    """One route's bounds (`body`, `items`: 0 for none) and whose request it is."""

    app: str  # whose data it acts on, and from where that app comes
    body: int  # bytes of body it reads at most (MAX_BODY: RAGMON_MAX_BODY_BYTES)
    items: int  # items one request may carry
    reads: str  # what it reads in Redis
    runs: str  # where its work runs: the event loop, a thread, the decoding or pages process


OWN_EVENTS = "its own events' keys (a repeated id answers the stored status)"
OPERATIONS = Cost("none (the process)", 0, 0, "nothing", "loop")

COSTS: dict[str, Cost] = {
    "POST /v1/retrievals": Cost(
        "each event's labels.app; a bound key's app only", MAX_BODY, 1, OWN_EVENTS,
        "loop; a decoding process over 256 KiB, a share per app"),
    "POST /v1/retrievals/batch": Cost(
        "each event's labels.app; a bound key's app only", MAX_BODY, MAX_BATCH, OWN_EVENTS,
        "loop; a decoding process over 256 KiB, a share per app"),
    "POST /v1/traces": Cost(
        "each span's app attribute; a bound key's app only", MAX_BODY, MAX_SPANS,
        f"{OWN_EVENTS}; its apps' held spans (a span's waiters, at most {HELD_SPANS:,} held "
        f"spans and {HELD_BYTES >> 20} MiB an app)", "a decoding process, a share per app"),
    "POST /v1/grades": Cost(
        "each grade's app; a bound key's app only", GRADES_MAX_BYTES, MAX_BATCH,
        f"the graded events of its apps, at most {MAX_GRADE_EVENTS}", "thread"),
    "GET /v1/estimates": Cost(
        "the key's app, else ?app=", 0, 0, "its app's summary of the window, a worker's",
        "thread"),
    "GET /v1/retrievals": Cost(
        "the key's app, else ?app=", 0, 0, "its app's explorer index, a page's scan budget",
        "thread"),
    "GET /v1/retrievals/{event_id:path}": Cost(
        "the key's app, else ?app=", 0, 0, "one event of its app", "thread"),
    "GET /healthz": OPERATIONS,
    "GET /readyz": Cost("none (the process)", 0, 0, "a PING", "thread"),
    "GET /metrics": Cost(
        "the fleet (metrics keys)", 0, 0, "the aggregates, one rendering per refresh",
        "the metrics process"),
    "GET /openapi.json": OPERATIONS,
    "GET /docs": OPERATIONS,
    "GET /docs/oauth2-redirect": OPERATIONS,
    "GET /redoc": OPERATIONS,
    "GET /ui": Cost(
        "the session's key's app, else ?app=", 0, 0, "the per-series summaries of its apps",
        "the pages process"),
    "GET /ui/events": Cost(
        "the session's key's app, else ?app=", 0, 0, "its app's explorer index", "thread"),
    "GET /ui/events/{app}/{event_id:path}": Cost(
        "the path's app, within the session's key", 0, 0, "one event", "thread"),
    "GET /ui/review": Cost(
        "the session's key's app, else ?app=", 0, 0, "its app's series and a few events",
        "thread"),
    "GET /ui/review/{app}/{event_id:path}": Cost(
        "the path's app, within the session's key", 0, 0, "one event and its series' standing",
        "thread"),
    "POST /ui/grades": Cost(
        "the form's app, within the session's key", FORM_MAX_BYTES, 1, "one event", "thread"),
    "GET /ui/login": OPERATIONS,
    "POST /ui/login": Cost("none (a key to check)", FORM_MAX_BYTES, 0, "nothing", "loop"),
}  # fmt: skip


def route_name(request: Request) -> str:
    """`METHOD /path` of the route that serves `request`, as `COSTS` names it."""
    route = request.scope.get("route")
    return f"{request.method} {getattr(route, 'path', request.url.path)}"


def body_limit(request: Request, settings: Settings) -> int:
    """The bytes of body the request's route may read (never more than RAGMON_MAX_BODY_BYTES)."""
    declared = COSTS[route_name(request)].body
    if declared == MAX_BODY:
        return settings.max_body_bytes
    return min(declared, settings.max_body_bytes)
