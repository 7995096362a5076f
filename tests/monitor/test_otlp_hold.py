"""Nesting across exports (`ragmon.api.holding`, `ragmon.store.holds`): a retriever span whose
parent is in another export is held until the parent arrives or its hold ends, over real HTTP
and a real Redis; each held span becomes one event at most, and one app's hold never touches
another's."""

from __future__ import annotations

import time

import pytest

from ragmon.core.wire import event_ref
from ragmon.store.holds import MAX_SPANS
from tests.support.spans import event_id, export, retriever_attrs, span
from tests.support.stack import sample_value
from tests.support.waiting import scaled

pytestmark = pytest.mark.process  # the API decodes OTLP in its child process

PROTOBUF = {"content-type": "application/x-protobuf"}
BOT = {"app": "support-bot"}


def post(api, spans, resource=None) -> None:
    body = export(spans, resource).SerializeToString()
    r = api.client.post("/v1/traces", content=body, headers=PROTOBUF)
    assert r.status_code == 200, r.text


def stored(api, s, app: str = "support-bot") -> str | None:
    return api.store.statuses([event_ref(app, event_id(s))])[0]


def holds(api, outcome: str) -> float:
    """ragmon_otlp_holds_total{outcome}, once the writer has flushed it (0 until then)."""
    text = api.client.get("/metrics").text
    try:
        return sample_value(text, "ragmon_otlp_holds_total", {"outcome": outcome})
    except KeyError:
        return 0.0


def wait_for(check, what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + scaled(seconds)
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def ensemble():
    """An ensemble retriever span over two inner ones, under a chain span."""
    chain = span({"openinference.span.kind": "CHAIN"}, name="RunnableSequence")
    outer = span(retriever_attrs(query="q outer"), name="EnsembleRetriever", parent=chain)
    inner = [span(retriever_attrs(query=f"q inner {i}"), name="BM25", parent=outer)
             for i in range(2)]  # fmt: skip
    return chain, outer, inner


def test_inner_spans_sent_before_their_outer_one_are_nested_not_events(api):
    """SimpleSpanProcessor's order: each span alone, inner ones first (they end first)."""
    chain, outer, inner = ensemble()
    for s in inner:
        post(api, [s])
    assert [stored(api, s) for s in inner] == [None, None]  # held
    post(api, [outer])  # decides the inner ones: nested; the outer one waits for the chain
    post(api, [chain])
    assert stored(api, outer) == "queued" and [stored(api, s) for s in inner] == [None, None]
    wait_for(lambda: holds(api, "released") == 1, "the outer span released")
    assert (holds(api, "held"), holds(api, "nested")) == (3, 2)
    held = api.store.client.hgetall("ragmon:hold:support-bot")
    assert held == {b"n": b"0"} and not api.store.client.exists("ragmon:hold:support-bot|due")
    assert api.store.ledger.read(time.time()).held["support-bot"].get("hold", 0) == 0


def test_a_batch_cut_between_inner_and_outer_gives_one_event(api):
    chain, outer, inner = ensemble()
    post(api, [inner[0]])
    post(api, [inner[1], outer, chain])  # the next batch
    assert [stored(api, s) for s in (outer, *inner)] == ["queued", None, None]
    wait_for(lambda: holds(api, "nested") == 1, "the held inner span nested")


def test_a_parent_that_came_first_decides_its_child_at_once(api):
    """A Collector can reorder: the outer span first, then an inner one."""
    _, outer, inner = ensemble()
    post(api, [outer])  # held for its chain span
    post(api, [inner[0]])
    wait_for(lambda: holds(api, "nested") == 1, "the inner span nested on arrival")
    assert stored(api, inner[0]) is None


def test_a_hold_that_ends_stores_the_span_once(make_api):
    api = make_api(RAGMON_OTLP_HOLD_S="0.5")
    chain, outer, _ = ensemble()
    post(api, [outer])
    post(api, [outer])  # a re-export while it is held: accepted once
    wait_for(lambda: stored(api, outer) == "queued", "the held span stored when its hold ended")
    wait_for(lambda: holds(api, "expired") == 1, "counted expired")
    assert holds(api, "again") == 1
    post(api, [chain])  # its parent, late: nothing left to decide
    post(api, [outer])  # and a re-export after: held again, and the event id stores it once
    wait_for(lambda: holds(api, "expired") == 2, "the re-export's hold ended")
    text = api.client.get("/metrics").text
    assert sample_value(text, "ragmon_events_received_total") == 1
    assert holds(api, "released") == 0


def test_nested_own_makes_a_held_inner_span_an_event_under_its_own_name(make_api):
    api = make_api(RAGMON_OTLP_NESTED="own")
    _, outer, inner = ensemble()
    post(api, [inner[0]])
    post(api, [outer])
    wait_for(lambda: stored(api, inner[0]) == "queued", "the inner span stored under its name")
    got = api.client.get(f"/v1/retrievals/{event_id(inner[0])}", params=BOT).json()
    assert got["labels"]["retriever"] == "BM25"
    assert stored(api, outer) is None  # still waiting for its chain span


def test_one_app_filling_its_hold_neither_holds_nor_drops_anothers(api):
    """appA fills its hold with orphans (and names appB's trace and span ids as its parents):
    its own spans past the limit are stored at once; appB's are held and decided as before."""
    chain, outer, inner = ensemble()
    a = {"service.name": "appA"}
    fake_outer = span(retriever_attrs(), name="EnsembleRetriever", trace_id=outer.trace_id,
                      span_id=outer.span_id)  # fmt: skip
    post(api, [fake_outer], a)  # appA claims appB's outer span ids: only in its own hold
    orphans = [span(retriever_attrs(query=f"a{i}"), parent=span({}, name="x"))
               for i in range(MAX_SPANS + 1)]  # fmt: skip
    for i in range(0, len(orphans), 1000):
        post(api, orphans[i : i + 1000], a)
    assert stored(api, orphans[-1], "appA") == "queued"  # past appA's limit: an event at once
    assert stored(api, orphans[0], "appA") is None  # within it: held
    post(api, [inner[0]])  # appB's inner span: held, though appA's hold is full
    assert stored(api, inner[0]) is None
    post(api, [outer, chain])
    wait_for(lambda: holds(api, "nested") == 1, "appB's inner span nested")
    assert stored(api, inner[0]) is None and stored(api, outer) == "queued"
    assert holds(api, "full") == 1


def test_a_decided_span_not_stored_is_claimed_again_until_it_is(settings):
    """Never lost: a span claimed (its hold over) whose store failed before `done` is claimed
    again once its lease ends, and leaves only with `done`."""
    from ragmon.store import Store
    from ragmon.store.holds import LEASE_S

    store = Store.connect(settings)
    t0, hold = 1_000_000.0, settings.otlp_hold_s
    child, parent = "a" * 48, "b" * 48
    assert store.holds.admit("app", [], [(child, parent, "blob")], now=t0) == [(child, "held", "")]
    assert store.holds.admit("app", [], [(child, parent, "blob")], now=t0 + 1) == [
        (child, "again", "")
    ]
    assert store.holds.admit("app", now=t0 + hold + 1) == [(child, "expired", "blob")]
    assert (
        store.holds.admit("app", [(parent, "n")], now=t0 + hold + 2) == []
    )  # leased: out of reach
    assert store.holds.due_apps(now=t0 + hold + 2) == []
    later = t0 + hold + 2 + LEASE_S
    assert store.holds.due_apps(now=later) == ["app"]
    assert store.holds.admit("app", now=later) == [(child, "expired", "blob")]
    store.holds.done("app", [child], now=later)
    assert store.holds.admit("app", now=later + 2 * LEASE_S) == []
    assert store.holds.due_apps(now=later + 2 * LEASE_S) == []
    assert store.ledger.read(later).held["app"]["hold"] == 0
    store.close()
