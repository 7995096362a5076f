"""The hostile neighbour: one app (`appA`, its own key) floods the API, bombs it and sends
hostile numbers, while another app (`appB`) uses every route; appB's answers must not change.

    python -m tests.reliability.neighbours URL KEY SECONDS     # appA's loop; prints its answers

`CHECKS` has one request of appB per route of `ragmon.api.costs.COSTS` (a test fails when a
route has none), each returning what must stay the same: `answers(ctx)` before and while the
neighbour runs. Used by `tests/reliability/test_neighbours.py` (the short form: answers and
bounds) and `tests/bench/bench_neighbours.py` (the long form: the p99 figures).
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.events import make_event
from tests.support.spans import export, retriever_attrs, span
from tests.support.waiting import wait_until

KEY_A, KEY_B = "neighbour-a-key-0123456789", "neighbour-b-key-0123456789"
KEYS = f"{KEY_A}:appA,{KEY_B}:appB"
PROTOBUF = {"content-type": "application/x-protobuf"}

# ---- appA: the neighbour ---------------------------------------------------------------------


def _events_body(labels: Callable[[int], dict[str, str]], n: int, passages: int) -> bytes:
    """A batch of `n` events of appA, encoded once; `ROUND` in its ids is replaced by the
    round's number, so every round's events are new at the cost of one `bytes.replace`."""
    events = [make_event(n=passages, k=1, seed=j, labels=labels(j)) for j in range(n)]
    for j, e in enumerate(events):
        e["event_id"] = f"ROUND{'0' * 6}-{j}"
    return json.dumps({"events": events}).encode()


@functools.cache
def _bodies() -> dict[str, bytes]:
    """appA's bodies, built on first use (not when a test module imports this one)."""
    one = {"app": "appA", "event_id": "e", "passage_id": "p", "grade": 1, "reviewer": "r"}
    return {
        "flood": _events_body(lambda j: {"app": "appA"}, 1000, 5),
        "junk": _events_body(lambda j: {"app": "appA", "index": f"junkROUND{'0' * 6}-{j}"},
                             1000, 1),
        "grades": json.dumps({"grades": [one] * 400_000}).encode(),  # 30 MB
        "bomb": gzip.compress(b"\x0a\x00" * 15_700_000, compresslevel=9),
    }  # fmt: skip


JSON = {"content-type": "application/json"}


def _round(body: bytes, i: int) -> bytes:
    return body.replace(b"ROUND000000", f"R{i:010d}".encode())


def _flood(c: httpx.Client, i: int) -> httpx.Response:
    """1,000 ordinary events in one batch."""
    return c.post("/v1/retrievals/batch", content=_round(_bodies()["flood"], i), headers=JSON)


def _junk_series(c: httpx.Client, i: int) -> httpx.Response:
    """1,000 events, each its own index value (the sampling plan's and series budget's bomb)."""
    return c.post("/v1/retrievals/batch", content=_round(_bodies()["junk"], i), headers=JSON)


def _otlp_bomb(c: httpx.Client, i: int) -> httpx.Response:
    """30 KB of gzip inflating to 31 MB of empty spans."""
    return c.post(
        "/v1/traces", content=_bodies()["bomb"], headers={**PROTOBUF, "content-encoding": "gzip"}
    )


def _grade_bomb(c: httpx.Client, i: int) -> httpx.Response:
    """A grades body of 30 MB (400,000 grades)."""
    return c.post("/v1/grades", content=_bodies()["grades"], headers=JSON)


def _hostile_numbers(c: httpx.Client, i: int) -> httpx.Response:
    """Scores of 1.4e154, 1e308, NaN and Infinity."""
    event = make_event(n=2, k=2, seed=i, labels={"app": "appA"})
    event["passages"][0]["score"] = 0.5
    score = ("1.4e154", "1e308", "NaN", "Infinity")[i % 4]
    text = json.dumps(event).replace('"score": 0.5', f'"score": {score}', 1)
    return c.post("/v1/retrievals", content=text, headers=JSON)


HOSTILE: dict[str, Callable[[httpx.Client, int], httpx.Response]] = {
    "flood": _flood,
    "junk-series": _junk_series,
    "otlp-bomb": _otlp_bomb,
    "grade-bomb": _grade_bomb,
    "hostile-numbers": _hostile_numbers,
}


def neighbour(url: str, key: str, seconds: float) -> Counter[str]:
    """appA's loop for `seconds`: each hostile request in turn; the answers by kind and
    status."""
    out: Counter[str] = Counter()
    end = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        i = 0
        while time.monotonic() < end:
            for name, send in HOSTILE.items():
                try:
                    out[f"{name} {send(c, i).status_code}"] += 1
                except httpx.HTTPError as exc:
                    out[f"{name} {type(exc).__name__}"] += 1
            i += 1
    return out


# ---- appB: every route, and what must not change ---------------------------------------------


@dataclass
class Context:
    """appB's fixtures: its judged events (`fixed`), a grade, a signed-in browser."""

    url: str
    api: httpx.Client
    ui: httpx.Client
    fixed: list[dict] = field(default_factory=list)
    sent: int = 0

    def event(self, index: str = "new") -> dict:
        self.sent += 1
        return make_event(n=3, k=2, seed=500_000 + self.sent,
                          labels={"app": "appB", "index": index})  # fmt: skip


def prepare(url: str) -> Context:
    """appB's judged events (index `fixed`), one graded and summarized, a browser signed in
    with its key."""
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY_B}"}, timeout=60)
    ui = httpx.Client(base_url=url, timeout=60, headers={"Origin": url})
    ctx = Context(url, api, ui)
    ctx.fixed = [ctx.event("fixed") for _ in range(4)]
    r = api.post("/v1/retrievals/batch", json={"events": ctx.fixed})
    r.raise_for_status()

    def judged() -> bool:
        found = [api.get(f"/v1/retrievals/{e['event_id']}").json() for e in ctx.fixed]
        return all(f.get("status") == "done" for f in found)

    wait_until(judged, 60, "appB's events judged")
    api.post("/v1/grades", json={"grades": [_grade(ctx)]}).raise_for_status()

    def summarized() -> bool:  # a worker's summary, with the grade: no later one changes it
        found = api.get("/v1/estimates", params={"index": "fixed"}).json()
        return any(s["graded_events"] for s in found["series"])

    wait_until(summarized, 60, "appB's estimates summarized with its grade")
    r = ui.post("/ui/login", data={"key": KEY_B, "next": "/ui"})
    assert r.status_code == 303 and "failed" not in r.headers["location"], r.headers
    return ctx


def _grade(ctx: Context) -> dict:
    e = ctx.fixed[0]
    return {"app": "appB", "event_id": e["event_id"], "passage_id": e["passages"][0]["id"],
            "grade": 2, "reviewer": "bea"}  # fmt: skip


def _post_one(ctx: Context) -> Any:
    r = ctx.api.post("/v1/retrievals", json=ctx.event())
    return r.status_code, r.json()["status"]


def _post_batch(ctx: Context) -> Any:
    r = ctx.api.post("/v1/retrievals/batch", json={"events": [ctx.event() for _ in range(3)]})
    return r.status_code, [x["status"] for x in r.json()["results"]]


def _traces(ctx: Context) -> Any:
    attrs = retriever_attrs(metadata={"index": "new", "k": 2})
    body = export([span(attrs)], resource={"service.name": "appB"}).SerializeToString()
    r = ctx.api.post("/v1/traces", content=body, headers=PROTOBUF)
    return r.status_code, r.content  # an empty ExportTraceServiceResponse: nothing rejected


def _grades(ctx: Context) -> Any:
    r = ctx.api.post("/v1/grades", json={"grades": [_grade(ctx)]})
    return r.status_code, [
        {k: v for k, v in x.items() if k != "status"} for x in r.json()["results"]
    ]


def _estimates(ctx: Context) -> Any:
    """appB's estimates of its fixed events; `summarized_at` moves with its new events."""
    r = ctx.api.get("/v1/estimates", params={"index": "fixed"})
    return r.status_code, {k: v for k, v in r.json().items() if k != "summarized_at"}


def _json(path: str, client: str = "api", **params: str) -> Callable[[Context], Any]:
    def check(ctx: Context) -> Any:
        r = getattr(ctx, client).get(path.format(id=ctx.fixed[0]["event_id"]), params=params)
        return r.status_code, r.json()

    return check


def _page(path: str, status: int = 200, client: str = "ui") -> Callable[[Context], Any]:
    def check(ctx: Context) -> Any:
        r = getattr(ctx, client).get(path.format(id=ctx.fixed[0]["event_id"]))
        return r.status_code if r.status_code != 303 else (303, r.headers["location"][:5])

    return check


def _metrics(ctx: Context) -> Any:
    r = httpx.get(ctx.url + "/metrics", timeout=120)
    return r.status_code, 'app="appB",index="fixed"' in r.text


def _ui_grade(ctx: Context) -> Any:
    g = _grade(ctx)
    form = {"app": "appB", "event_id": g["event_id"], "grade": f"2:{g['passage_id']}",
            "reviewer": "bea", "next": "/ui/review"}  # fmt: skip
    r = ctx.ui.post("/ui/grades", data=form)
    return r.status_code, r.headers.get("location")


def _ui_login(ctx: Context) -> Any:
    r = httpx.post(ctx.url + "/ui/login", data={"key": KEY_B, "next": "/ui"},
                   headers={"Origin": ctx.url})  # fmt: skip
    return r.status_code, r.headers.get("location")


CHECKS: dict[str, Callable[[Context], Any]] = {
    "POST /v1/retrievals": _post_one,
    "POST /v1/retrievals/batch": _post_batch,
    "POST /v1/traces": _traces,
    "POST /v1/grades": _grades,
    "GET /v1/estimates": _estimates,
    "GET /v1/retrievals": _json("/v1/retrievals", index="fixed"),
    "GET /v1/retrievals/{event_id:path}": _json("/v1/retrievals/{id}"),
    "GET /healthz": _json("/healthz"),
    "GET /readyz": _json("/readyz"),
    "GET /metrics": _metrics,
    "GET /openapi.json": _json("/openapi.json"),
    "GET /docs": _page("/docs", client="api"),
    "GET /docs/oauth2-redirect": _page("/docs/oauth2-redirect", client="api"),
    "GET /redoc": _page("/redoc", client="api"),
    "GET /ui": _page("/ui?index=fixed"),
    "GET /ui/events": _page("/ui/events?index=fixed"),
    "GET /ui/events/{app}/{event_id:path}": _page("/ui/events/appB/{id}"),
    "GET /ui/review": _page("/ui/review?app=appB"),
    "GET /ui/review/{app}/{event_id:path}": _page("/ui/review/appB/{id}"),
    "POST /ui/grades": _ui_grade,
    "GET /ui/login": _page("/ui/login"),
    "POST /ui/login": _ui_login,
}


def answers(ctx: Context) -> Iterator[tuple[str, Any]]:
    """appB's answer of each route."""
    for route, check in CHECKS.items():
        yield route, check(ctx)


if __name__ == "__main__":
    print(json.dumps(dict(neighbour(sys.argv[1], sys.argv[2], float(sys.argv[3])))))
