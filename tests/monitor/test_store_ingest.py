"""The delivery path's Redis side against a real Redis: the ingest write (`scripts.INGEST`:
events, their apps' pending sets, the per-app queue limit, one drain job while none waits),
and the claims (`scripts.CLAIM`: apps in turn, leases, the one way back)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.delivery import MAX_ATTEMPTS, RETRY_DELAYS_S
from ragmon.store.ingest import AppAtLimit

PAYLOAD = json.dumps({"k": 1})


def item(event_id: str, sampled_out: bool = False, app: str = "default") -> IngestItem:
    return IngestItem(event_id, PAYLOAD, sampled_out, app)


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, job_batch_size=2, queue_limit=1000))
    yield s
    s.client.close()


def refs(*ids: str, app: str = "default") -> list[str]:
    return [event_ref(app, i) for i in ids]


def pending(store: Store, app: str = "default") -> list[str]:
    return [r.decode() for r in store.client.zrange(store.keys.pending(app), 0, -1)]


def drain_jobs(store: Store) -> int:
    return store.delivery.jobs.waiting()


def test_new_events_wait_in_their_apps_pending_set_and_one_drain_job_is_enqueued(
    store: Store,
) -> None:
    written = store.ingest([item("a"), item("b"), item("c"), item("s", sampled_out=True)])
    assert written.outcomes == [("queued", True)] * 3 + [("sampled_out", True)]
    assert pending(store) == refs("a", "b", "c")  # sampled out: never judged
    assert drain_jobs(store) == 1
    job = store.delivery.jobs.queue.jobs[0]
    assert job.func_name == "ragmon.workers.jobs.drain" and job.args == ()
    store.ingest([item("d")])
    assert drain_jobs(store) == 1  # one waits already
    store.delivery.started()  # a worker took it
    store.ingest([item("e")])
    assert drain_jobs(store) == 2
    assert store.statuses(refs("a", "s")) == ["queued", "sampled_out"]
    counters = store.counters()
    assert counters["events_received"] == 6 and counters["events_sampled_out"] == 1
    assert store.client.hget(store.keys.event(event_ref("default", "s")), "p") is None


def test_known_ids_answer_their_status_and_wait_once(store: Store) -> None:
    store.ingest([item("a"), item("b")])
    store.client.hset(store.keys.event(event_ref("default", "b")), "s", "done")
    written = store.ingest([item("a"), item("b"), item("x"), item("x")])
    assert written.outcomes == [("queued", False), ("done", False), ("queued", True),
                                ("queued", False)]  # fmt: skip
    assert pending(store) == refs("a", "b", "x")  # b: left for the claim to drop
    assert store.counters()["events_received"] == 3


def test_async_ingest_matches_and_survives_a_script_flush(store: Store) -> None:
    async def run() -> list:
        ingest = store.async_ingest()
        assert ingest is not None
        try:
            first = await ingest.write([item("a"), item("b")])
            store.client.script_flush()  # as after a Redis restart: NOSCRIPT, then reload
            return first.outcomes + (await ingest.write([item("b"), item("c")])).outcomes
        finally:
            await ingest.aclose()

    assert asyncio.run(run()) == [("queued", True), ("queued", True), ("queued", False),
                                  ("queued", True)]  # fmt: skip


def test_the_same_id_in_two_apps_is_two_events(store: Store) -> None:
    """Ids are scoped by app: appB's event is stored and queued although appA used its id."""
    a, b = item("same", app="appA"), item("same", app="appB")
    assert store.ingest([a]).outcomes == [("queued", True)]
    assert store.ingest([b, a]).outcomes == [("queued", True), ("queued", False)]
    assert pending(store, "appA") == ["appA|same"] and pending(store, "appB") == ["appB|same"]
    assert store.counters()["events_received"] == 2


def test_an_app_at_its_limit_refuses_its_requests_whole_and_no_other(settings: Settings) -> None:
    store = Store.connect(replace(settings, queue_limit=2))
    try:
        store.ingest([item("a1", app="a"), item("a2", app="a")])
        written = store.ingest(
            [item("b1", app="b"), item("a3", app="a"), item("b2", app="b"), item("b3", app="b")],
            sizes=[1, 2, 1],
        )
        limit = AppAtLimit("a", 2)
        assert written.outcomes == [("queued", True), limit, limit, ("queued", True)]
        assert written.request(1, 3) == limit and written.request(0, 1) == [("queued", True)]
        assert "'a'" in limit.message and "RAGMON_QUEUE_LIMIT=2" in limit.message
        assert store.statuses(refs("a3", "b2", app="x")) == [None, None]
        assert pending(store, "b") == refs("b1", "b3", app="b")
        # known ids of an app at its limit are answered: nothing new would wait
        assert store.ingest([item("a1", app="a")]).outcomes == [("queued", False)]
        # a claim frees room
        assert len(store.delivery.claim(1).refs) == 1
        assert store.ingest([item("a3", app="a")]).outcomes == [("queued", True)]
    finally:
        store.client.close()


# ---- claims ------------------------------------------------------------------------------


def test_a_claim_takes_apps_in_turn_not_one_apps_backlog_first(store: Store) -> None:
    store.ingest([item(f"e{i}", app="busy") for i in range(50)])
    store.ingest([item("q1", app="quiet"), item("q2", app="quiet")])
    claimed = store.delivery.claim(4)
    assert [r.split("|")[0] for r in claimed.refs] == ["busy", "quiet", "busy", "quiet"]
    assert claimed.left  # the backlog is still there
    # within an app, the oldest first
    assert claimed.refs[0] == "busy|e0" and claimed.refs[1] == "quiet|q1"
    # an app that had nothing joins at the current turn: after at most one of the others
    store.ingest([item("late", app="late")])
    assert "late|late" in store.delivery.claim(2).refs


def test_shares_weigh_the_turns(settings: Settings) -> None:
    store = Store.connect(replace(settings, app_shares={"big": 3.0}))
    try:
        store.ingest([item(f"b{i}", app="big") for i in range(30)])
        store.ingest([item(f"s{i}", app="small") for i in range(30)])
        apps = [r.split("|")[0] for r in store.delivery.claim(20).refs]
        assert apps.count("big") == 15 and apps.count("small") == 5
    finally:
        store.client.close()


def test_a_lease_that_ends_brings_the_event_back_then_fails_it_after_the_last_attempt(
    store: Store,
) -> None:
    store.ingest([item("a")])
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claimed = store.delivery.claim(5, lease_s=0.05)
        assert claimed.refs == refs("a"), attempt  # back at once after the lease ended
        assert pending(store) == []
        time.sleep(0.1)  # the work horse died: its lease ends unrenewed
    assert store.delivery.claim(5).refs == []
    assert store.statuses(refs("a")) == ["failed"]
    assert store.counters()["events_failed|worker_died"] == 1
    assert store.failed_refs() == refs("a")
    assert store.requeue(refs("a")) == 1  # `ragmon requeue-failed`: attempts start over
    assert store.delivery.claim(5).refs == refs("a")


def test_finish_or_fail_ends_the_lease_and_a_renewed_lease_holds(store: Store) -> None:
    store.ingest([item("a"), item("b")])
    claimed = store.delivery.claim(5, lease_s=0.05)
    store.delivery.renew(claimed.refs, lease_s=30)
    time.sleep(0.1)
    assert store.delivery.claim(5).refs == []  # renewed: still held
    assert store.fail(event_ref("default", "a"), "malformed", "no grade")
    assert store.client.zscore(store.keys.leased, "default|a") is None
    assert store.delivery.counts() == (1, 0)  # b, leased


def test_a_passing_failure_puts_the_event_back_after_its_delay(store: Store) -> None:
    store.ingest([item("a")])
    claimed = store.delivery.claim(1)
    ref = claimed.refs[0]
    assert store.delivery.retry(ref, claimed.lease_end + 1, "timeout: x") == 0  # not our lease
    assert store.delivery.retry(ref, claimed.lease_end, "timeout: slow") == 1
    due = store.client.zscore(store.keys.pending("default"), ref)
    assert due is not None and due > time.time() + RETRY_DELAYS_S[0] - 5
    assert store.delivery.claim(1).refs == []  # not due yet
    assert store.delivery.counts() == (1, 1) and not store.delivery.due()
    assert store.client.hget(store.keys.event(ref), "e") == b"timeout: slow"
    store.client.zadd(store.keys.pending("default"), {ref: 0})  # its delay passed
    assert store.delivery.claim(1).refs == [ref]


def test_the_last_passing_failure_fails_the_event(store: Store) -> None:
    store.ingest([item("a")])
    ref = event_ref("default", "a")
    store.client.hset(store.keys.event(ref), "at", MAX_ATTEMPTS - 1)
    claimed = store.delivery.claim(1)
    assert store.delivery.retry(ref, claimed.lease_end, "rate_limited: 429") == 2
    assert store.statuses([ref]) == ["failed"]
    assert store.counters()["events_failed|judge_unavailable"] == 1
