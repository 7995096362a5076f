"""The one-round-trip ingest (`scripts.INGEST_JOBS`) against a real Redis: events and their RQ
jobs together, duplicates answered from the store, mixed jobs through the exact path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest
from rq.job import Job

from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.keys import event_ref, split_ref
from tests.support.ingest import write_deferred

PAYLOAD = json.dumps({"k": 1})


def item(event_id: str, sampled_out: bool = False) -> IngestItem:
    return IngestItem(event_id, PAYLOAD, sampled_out)


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, job_batch_size=2))
    yield s
    s.client.close()


def job_refs(store: Store) -> list[list[str]]:
    """The event refs of each queued job, in queue order (fetched through RQ itself)."""
    return [Job.fetch(j, connection=store.client).args[0] for j in store.queue.get_job_ids()]


def jobs(store: Store) -> list[list[str]]:
    """The event ids of each queued job (all of app `default`)."""
    out = []
    for refs in job_refs(store):
        assert {split_ref(r)[0] for r in refs} == {"default"}
        out.append([split_ref(r)[1] for r in refs])
    return out


def refs(*ids: str, app: str = "default") -> list[str]:
    return [event_ref(app, i) for i in ids]


def test_new_events_are_stored_with_one_rq_job_per_chunk(store: Store) -> None:
    answers = store.ingest([item("a"), item("b"), item("c"), item("s", sampled_out=True)])
    assert answers == [("queued", True)] * 3 + [("sampled_out", True)]
    assert job_refs(store) == [["default|a", "default|b"], ["default|c"]]
    job = Job.fetch(store.queue.get_job_ids()[0], connection=store.client)
    assert job.func_name == "ragmon.workers.jobs.process_events"
    assert job.retries_left == 5 and job.timeout == 3600
    assert store.statuses(refs("a", "b", "c", "s")) == ["queued", "queued", "queued", "sampled_out"]
    counters = store.counters()
    assert counters["events_received"] == 4 and counters["events_sampled_out"] == 1
    sampled_out = store.keys.event(event_ref("default", "s"))
    assert store.client.hget(sampled_out, "p") is None  # sampled out: no payload


def test_known_ids_answer_their_status_and_add_no_job(store: Store) -> None:
    store.ingest([item("a"), item("b")])
    store.client.hset(store.keys.event(event_ref("default", "b")), "s", "done")
    assert store.ingest([item("a"), item("b")]) == [("queued", False), ("done", False)]
    assert jobs(store) == [["a", "b"]]
    assert store.counters()["events_received"] == 2


def test_a_job_mixing_known_and_new_ids_enqueues_only_the_new(store: Store) -> None:
    store.ingest([item("a")])
    answers = store.ingest([item("a"), item("x"), item("y"), item("y")])
    assert answers == [("queued", False), ("queued", True), ("queued", True), ("queued", False)]
    assert sorted(sum(jobs(store), [])) == ["a", "x", "y"]  # each id in exactly one job
    assert store.counters()["events_received"] == 3


def test_async_ingest_matches_and_survives_a_script_flush(store: Store) -> None:
    async def run() -> list[tuple[str, bool]]:
        ingest = store.async_ingest()
        assert ingest is not None
        try:
            first = await ingest([item("a"), item("b")])
            store.client.script_flush()  # as after a Redis restart: NOSCRIPT, then reload
            return first + await ingest([item("b"), item("c")])
        finally:
            await ingest.aclose()

    assert asyncio.run(run()) == [
        ("queued", True),
        ("queued", True),
        ("queued", False),
        ("queued", True),
    ]
    assert jobs(store) == [["a", "b"], ["c"]]


def test_the_same_id_in_two_apps_is_two_events(store: Store) -> None:
    """Ids are scoped by app: appB's event is stored and queued although appA used its id."""
    a = IngestItem("same", PAYLOAD, app="appA")
    b = IngestItem("same", PAYLOAD, app="appB")
    assert store.ingest([a]) == [("queued", True)]
    assert store.ingest([b, a]) == [("queued", True), ("queued", False)]
    assert store.statuses(refs("same", app="appA") + refs("same", app="appB")) == ["queued"] * 2
    assert sorted(sum(job_refs(store), [])) == ["appA|same", "appB|same"]
    assert store.counters()["events_received"] == 2
    assert store.ingest_exact([IngestItem("same", PAYLOAD, app="appC"), b]) == [
        ("queued", True),
        ("queued", False),
    ]


# ---- the grouping window ------------------------------------------------------------------


def ungrouped(store: Store) -> list[str]:
    return sorted(r.decode() for r in store.client.zrange(store.keys.ungrouped, 0, -1))


def test_deferred_writes_keep_full_jobs_and_leave_the_rest_to_the_window(store: Store) -> None:
    answers, deferred = write_deferred(store, [item("a"), item("b"), item("c")])
    assert answers == [("queued", True)] * 3
    assert jobs(store) == [["a", "b"]]  # a full job is enqueued at once
    assert deferred == refs("c") and ungrouped(store) == refs("c")
    assert write_deferred(store, [item("c")]) == ([("queued", False)], [])  # a retried POST
    assert write_deferred(store, [item("d")]) == ([("queued", True)], refs("d"))
    assert ungrouped(store) == refs("c", "d") and jobs(store) == [["a", "b"]]
    assert store.statuses(refs("c", "d")) == ["queued", "queued"]


def test_grouping_enqueues_each_waiting_event_once(store: Store) -> None:
    write_deferred(store, [item("a")])
    write_deferred(store, [item("b")])
    write_deferred(store, [item("c")])
    assert jobs(store) == [] and ungrouped(store) == refs("a", "b", "c")
    assert store.grouping.group(refs("a", "b", "c")) == 3
    assert jobs(store) == [["a", "b"], ["c"]] and ungrouped(store) == []
    assert store.grouping.group(refs("a", "b", "c")) == 0  # a retried group call, or a late sweep
    assert jobs(store) == [["a", "b"], ["c"]]


def test_a_group_partly_taken_by_another_process_enqueues_only_the_rest(store: Store) -> None:
    write_deferred(store, [item("a")])
    write_deferred(store, [item("b")])
    assert store.grouping.group(refs("a")) == 1  # e.g. a sweep got there first
    assert store.grouping.group(refs("a", "b")) == 1
    assert jobs(store) == [["a"], ["b"]] and ungrouped(store) == []


def test_sweep_groups_only_events_older_than_the_age(store: Store) -> None:
    write_deferred(store, [item("old")])
    store.client.zadd(store.keys.ungrouped, {"default|old": 1.0})  # its writer died long ago
    write_deferred(store, [item("new")])
    assert store.grouping.sweep(age_s=60) == 1
    assert jobs(store) == [["old"]] and ungrouped(store) == refs("new")
    assert store.grouping.sweep(age_s=60) == 0


def claimed(store: Store) -> dict[str, float]:
    return {
        r.decode(): s for r, s in store.client.zrange(store.keys.claimed, 0, -1, withscores=True)
    }


def test_a_running_job_claims_waiting_events_which_no_group_then_takes(store: Store) -> None:
    for i in "abc":
        write_deferred(store, [item(i)])
    assert store.grouping.claim(2, lease_s=30) == refs("a", "b")
    assert ungrouped(store) == refs("c") and sorted(claimed(store)) == refs("a", "b")
    assert store.grouping.group(refs("a", "b", "c")) == 1  # the API's window closes: only c is left
    assert jobs(store) == [["c"]]
    store.grouping.release(refs("a"))
    assert list(claimed(store)) == refs("b")


def test_claims_of_a_dead_horse_and_given_back_ones_are_swept_into_jobs(store: Store) -> None:
    for i in "abc":
        write_deferred(store, [item(i)])
    store.grouping.claim(3, lease_s=30)
    store.client.zadd(store.keys.claimed, {"default|a": 1.0})  # its lease ended long ago
    store.grouping.release(refs("b"), retry=True)  # a passing judge failure: RQ retries it
    store.grouping.renew(refs("c"), lease_s=30)
    assert store.grouping.sweep(age_s=60) == 2
    assert sorted(sum(jobs(store), [])) == ["a", "b"] and list(claimed(store)) == refs("c")
    store.grouping.renew(refs("a"), lease_s=30)  # a late renewal does not bring a claim back
    assert list(claimed(store)) == refs("c")
