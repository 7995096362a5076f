"""Faults against real processes: nothing accepted is lost, nothing is counted twice.

Each test reports events sent / accepted / done / counted in /metrics and asserts
accepted == done == counted. Run with `-s` (or see the summary) for the figures.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis
from rq import Queue, Worker

from tests.reliability.conftest import llm_env
from tests.reliability.support import (
    Sender,
    Tally,
    events,
    labeled,
    metric,
    observed_once,
    statuses,
    wait_status,
    worker_name,
)
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.stack import Stack, free_port
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow
SUFFIX = {False: "", True: ", single-event POSTs"}


# Each fault on batched traffic (the SDK) and on single events posted one by one (an HTTP hook
# under steady traffic: a running drain job takes them as they arrive).
TRAFFIC = pytest.mark.parametrize("single", [False, True], ids=["batches", "single-events"])


@TRAFFIC
def test_sigkill_worker_mid_job(redis_url, single):
    """A worker and its work horse die by SIGKILL while judging; the events its drain job held
    come back when their leases end (30 s) and another worker's drain job judges them."""
    fake = FakeLLM(latency=3.0).start()
    stack = Stack(redis_url, workers=0, env=llm_env(fake)).start()
    try:
        victim = stack.add_worker(["--job-monitoring-interval", "2"])
        stack.add_worker(["--job-monitoring-interval", "2"])
        evs = events(16, seed0=1000)
        tally = Tally(f"SIGKILL a worker mid-job{SUFFIX[single]}", sent=len(evs))
        tally.accepted = sum(r["status"] == "queued" for r in stack.post(evs, single))
        # wait until the victim is inside a drain job that holds events
        conn = redis.Redis.from_url(redis_url)
        name = worker_name(victim.pid)
        deadline = time.monotonic() + scaled(30)
        job_id = None
        while job_id is None or not conn.zcard("ragmon:leased"):
            w = next((w for w in Worker.all(connection=conn) if w.name == name), None)
            job_id = w.get_current_job_id() if w is not None else None
            assert time.monotonic() < deadline, "the victim never started a drain job"
            time.sleep(0.1)
        time.sleep(1.0)  # mid-request: the fake LLM answers after 3 s
        # the work horse calls setpgrp(): kill the worker's whole process tree, as a node
        # or container death would
        held = conn.zcard("ragmon:leased")
        killed_at = time.monotonic()
        assert len(victim.kill_tree()) >= 2, "no work horse under the victim"
        calls_before = len(fake.chat_requests())

        st = wait_status(stack, [e["event_id"] for e in evs], timeout=150)
        recovered_s = time.monotonic() - killed_at
        tally.done = sum(s == "done" for s in st.values())
        tally.failed = sum(s == "failed" for s in st.values())
        tally.counted = labeled(stack)
        tally.notes += [
            f"the killed drain job held {held} events under lease",
            f"all done {recovered_s:.0f} s after the kill",
        ]
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted, tally.line()
        assert held > 0 and conn.zcard("ragmon:leased") == 0
        assert len(fake.chat_requests()) > calls_before  # the killed job's events judged again
        observed_once(redis_url, len(evs))
        conn.close()
    finally:
        stack.stop()
        fake.stop()


@TRAFFIC
def test_redis_restart_while_events_flow(aof_redis, single):
    """Redis dies (SIGKILL) and comes back from its AOF while a sender posts events; the sender
    retries 503s; every accepted event is judged and counted once."""
    stack = Stack(aof_redis.url, workers=2).start()
    try:
        evs = events(600, seed0=5000)
        # ~6 s of traffic either way
        sender = (
            Sender(stack.url, evs, batch=1, pause=0.005)
            if single
            else Sender(stack.url, evs, batch=10, pause=0.05)
        )
        sender.start()
        time.sleep(1.5)
        aof_redis.stop(kill=True)
        time.sleep(2.0)
        aof_redis.start()
        assert sender.is_alive(), "the traffic ended before the outage"
        sender.join(180)
        assert not sender.is_alive() and not sender.errors, sender.errors
        tally = Tally(f"Redis SIGKILL + restart (AOF){SUFFIX[single]}", sent=len(sender.sent))
        tally.accepted = len(sender.accepted)
        st = wait_status(stack, sender.accepted, timeout=150)
        tally.done = sum(s == "done" for s in st.values())
        tally.failed = sum(s == "failed" for s in st.values())
        tally.counted = labeled(stack)
        tally.notes.append(f"sender retried {sender.retries} times")
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted, tally.line()
        assert sender.retries > 0, "the outage was not seen by the sender: it tested nothing"
        observed_once(aof_redis.url, len(evs))
    finally:
        stack.stop()


@TRAFFIC
def test_llm_down_then_back(redis_url, single):
    """The LLM server is down ~30 s: judging fails with a retryable JudgeError, the events go
    back to pending with a delay (10 s, then 30 s); nothing fails; all drain after."""
    port = free_port()
    fake = FakeLLM(port=port).start()
    env = llm_env(fake, RAGMON_JUDGE_MAX_RETRIES="1", RAGMON_JUDGE_TIMEOUT="2")
    stack = Stack(redis_url, workers=2, env=env).start()
    try:
        warm = events(4, seed0=9000)
        stack.post(warm)
        assert set(wait_status(stack, [e["event_id"] for e in warm]).values()) == {"done"}
        fake.stop()
        down_at = time.monotonic()
        backlog = events(12, seed0=9100)
        tally = Tally(f"LLM down ~30 s{SUFFIX[single]}", sent=len(warm) + len(backlog))
        answers = stack.post(backlog, single)
        assert all(a["status"] == "queued" for a in answers)  # the API does not need the LLM
        scheduled_seen = 0
        while time.monotonic() - down_at < 30:
            scheduled_seen = max(scheduled_seen, metric(stack, "ragmon_jobs_waiting_retry"))
            st = statuses(stack, [e["event_id"] for e in backlog])
            assert set(st.values()) == {"queued"}, st  # waiting, not failed, not done
            time.sleep(1)
        fake = FakeLLM(port=port).start()
        up_at = time.monotonic()
        ids = [e["event_id"] for e in warm + backlog]
        st = wait_status(stack, ids, timeout=90)
        drained_s = time.monotonic() - up_at
        tally.accepted = len(warm) + sum(a["status"] == "queued" for a in answers)
        tally.done = sum(s == "done" for s in st.values())
        tally.failed = sum(s == "failed" for s in st.values())
        tally.counted = labeled(stack)
        conn_err = metric(stack, "ragmon_judge_requests_total", {"outcome": "connection_error"})
        tally.notes += [
            f"{int(scheduled_seen)} events waited out a retry delay",
            f"{int(conn_err)} judge calls refused while down",
            f"drained {drained_s:.0f} s after recovery",
        ]
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted, tally.line()
        assert scheduled_seen > 0, "no event waited for a retry: the retry path was not exercised"
        assert conn_err > 0
    finally:
        stack.stop()
        fake.stop()


def test_api_killed_before_it_enqueued_a_drain_job(redis_url):
    """The API answers 202, then dies before its drain job reached RQ's queue (emptied here to
    make that moment): the events wait in their app's pending set, and a worker's maintenance
    tick, finding events due and no job queued, enqueues one."""
    stack = Stack(redis_url, workers=0).start()
    try:
        evs = events(6, seed0=8000)
        tally = Tally("API SIGKILL before it enqueued a drain job", sent=len(evs))
        tally.accepted = sum(r["status"] == "queued" for r in stack.post(evs, single=True))
        assert stack.api is not None
        stack.api.kill_tree()
        conn = redis.Redis.from_url(redis_url)
        Queue("ragmon", connection=conn).empty()
        assert conn.zcard("ragmon:q:ev:rel") == len(evs)  # stored and pending, no job
        stack.add_worker()  # its maintenance runs at start, then every 5 s
        st = wait_status(stack, [e["event_id"] for e in evs], timeout=90)
        tally.done = sum(s == "done" for s in st.values())
        tally.failed = sum(s == "failed" for s in st.values())
        assert conn.zcard("ragmon:q:ev:rel") == 0
        stack.start()  # an API again, for /metrics
        tally.counted = labeled(stack)
        tally.notes.append("a worker's maintenance tick enqueued the drain job")
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted, tally.line()
        observed_once(redis_url, len(evs))
        conn.close()
    finally:
        stack.stop()


def test_llm_answers_garbage_then_requeue(redis_url, fake_llm):
    """Unparseable answers (even after the repair prompt) fail the events with a reason,
    counted in ragmon_events_failed_total{reason}; `ragmon requeue-failed` brings them back."""
    fake_llm.script(*[Reply.text("Relevant-ish, I would say. Grade: high!")] * 400)
    stack = Stack(redis_url, workers=2, env=llm_env(fake_llm)).start()
    try:
        evs = events(8, seed0=7000)
        ids = [e["event_id"] for e in evs]
        tally = Tally("LLM answers garbage, then requeue-failed", sent=len(evs))
        tally.accepted = sum(r["status"] == "queued" for r in stack.post(evs))
        st = wait_status(stack, ids, want="failed", timeout=60)
        assert set(st.values()) == {"failed"}, st
        results = [stack.client.get(f"/v1/retrievals/{i}?app=rel").json() for i in ids]
        assert all(r["error"].startswith("malformed") for r in results), results[0]
        failed_metric = metric(stack, "ragmon_events_failed_total", {"reason": "malformed"})
        assert failed_metric == len(evs)
        assert labeled(stack) == 0

        fake_llm.reset()  # the default rule again: sane answers
        r = subprocess.run(
            [sys.executable, "-m", "ragmon.cli", "requeue-failed"],
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0 and f"requeued {len(evs)} failed events" in r.stdout, r
        st = wait_status(stack, ids, timeout=60)
        tally.done = sum(s == "done" for s in st.values())
        tally.counted = labeled(stack)
        tally.failed = int(failed_metric)
        tally.notes.append("failed{reason=malformed} then all requeued and done")
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted, tally.line()
        conn = redis.Redis.from_url(redis_url)
        assert conn.zcard("ragmon:failed") == 0
        conn.close()
        observed_once(redis_url, len(evs))
    finally:
        stack.stop()


def test_workers_run_rq_scheduler(stack):
    """Retries with an interval need RQ's scheduler: a ragmon worker holds the scheduler lock."""
    conn = redis.Redis.from_url(stack.env["REDIS_URL"])
    deadline = time.monotonic() + scaled(20)
    while not conn.exists("rq:scheduler-lock:ragmon"):
        assert time.monotonic() < deadline, "no worker took the RQ scheduler lock"
        time.sleep(0.2)
    assert conn.ttl("rq:scheduler-lock:ragmon") > 0  # refreshed by a live scheduler
    conn.close()


def test_backpressure_sdk_backs_off_and_nothing_is_lost(redis_url, fake_llm):
    """A tiny RAGMON_QUEUE_LIMIT: the API answers the app's writes 503 + Retry-After, the SDK
    waits and sends again, and every recorded event is accepted, judged and counted once."""
    from ragmon.client import RetrievalMonitor

    fake_llm.latency = 0.5
    env = llm_env(fake_llm, RAGMON_QUEUE_LIMIT="3", RAGMON_JOB_BATCH_SIZE="2")
    stack = Stack(redis_url, workers=2, env=env).start()
    mon = RetrievalMonitor(stack.url, batch_size=20, flush_interval=0.1, max_retries=30)
    try:
        evs = events(40, seed0=3000)
        for i, e in enumerate(evs):
            if i and i % 20 == 0:
                time.sleep(1.0)  # waves: the second finds the first still waiting
            mon.record(e["query"], e["passages"], e["k"], e["labels"], e["event_id"])
        assert mon.flush(timeout=120)
        stats = mon.stats()
        tally = Tally("queue over RAGMON_QUEUE_LIMIT (503), SDK backs off", sent=stats["recorded"])
        tally.accepted = stats["sent"]
        st = wait_status(stack, [e["event_id"] for e in evs], timeout=60)
        tally.done = sum(s == "done" for s in st.values())
        tally.counted = labeled(stack)
        refused = metric(stack, "ragmon_events_rejected_total", {"reason": "backpressure"})
        tally.notes.append(
            f"{int(refused)} batches refused with 503, SDK retries {stats['retries']}"
        )
        tally.record()
        assert tally.sent == tally.accepted == tally.done == tally.counted == len(evs), stats
        assert refused > 0 and stats["retries"] > 0, "the queue limit was never reached"
        assert not any(v for k, v in stats.items() if k.startswith("dropped")), stats
    finally:
        mon.close()
        stack.stop()
