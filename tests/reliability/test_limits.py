"""Limits hold on every way in: the batch route (size, body, items) and the SDK.

The single-event route's rules are tested one by one in tests/monitor/test_api.py; here the
same limits are checked where they are easiest to forget.
"""

from __future__ import annotations

import time

import pytest
import redis

from ragmon.client import RetrievalMonitor
from tests.support.events import make_event

pytestmark = pytest.mark.server  # the real API over HTTP

KEY = "limits-key-0123456789abcdef"


def event_keys(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return len(list(client.scan_iter("ragmon:ev:*")))
    finally:
        client.close()


@pytest.mark.process  # a batch over INLINE_MAX_BYTES: the decoding process
def test_batch_of_1001_events_is_refused_whole(api, redis_url):
    events = [make_event(n=2, k=1, seed=s) for s in range(1001)]
    r = api.client.post("/v1/retrievals/batch", json={"events": events})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:2] == ["body", "events"]
    assert event_keys(redis_url) == 0
    r = api.client.post("/v1/retrievals/batch", json={"events": events[:1000]})
    assert r.status_code == 202 and event_keys(redis_url) == 1000


def test_batch_body_over_the_limit_is_413_before_parsing(make_api, redis_url):
    api = make_api(RAGMON_MAX_BODY_BYTES="65536")
    big = make_event(n=3, k=1)
    big["passages"][0]["text"] = "x" * 30000
    events = [dict(big, event_id=f"big-{i}") for i in range(3)]  # ~90 kB, each item valid
    r = api.client.post("/v1/retrievals/batch", json={"events": events})
    assert r.status_code == 413
    # a chunked body without Content-Length is cut off as it streams in
    body = b'{"events": [' + b" " * 70000 + b"]}"
    r = api.client.post(
        "/v1/retrievals/batch",
        content=iter([body[i : i + 8192] for i in range(0, len(body), 8192)]),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert event_keys(redis_url) == 0


def test_label_rules_hold_inside_a_batch(api, redis_url):
    good = [make_event(seed=s) for s in range(3)]
    bad = make_event(seed=9, labels={"app": "x" * 65})
    r = api.client.post("/v1/retrievals/batch", json={"events": [*good, bad]})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "events", 3, "labels", "app"]
    assert event_keys(redis_url) == 0


@pytest.mark.process  # the SDK's batch (5 KB texts) is over INLINE_MAX_BYTES
def test_sdk_counts_invalid_events_and_never_sends_them(make_api, redis_url):
    """What the SDK can fix it fixes and sends (counted); what it cannot it counts per reason
    and never sends, so the server refuses nothing."""
    api = make_api(RAGMON_API_KEYS=KEY)
    good = [make_event(seed=s) for s in range(5)]
    fixed = [
        ("x" * 8193, good[0]["passages"], 5, None),  # query too long: truncated
        ("q", good[0]["passages"][:3], 5, None),  # fewer passages than k: measured as it is
        ("q", good[0]["passages"] * 21, 5, None),  # 210 passages > 200: cut to 200
        ("q", [{"id": "p", "text": "t" * 32769}] * 5, 5, None),  # text too long: truncated
        ("q", good[0]["passages"], 5, {"user": "bob"}),  # unknown label key: to metadata
        ("q", good[0]["passages"], 5, {"segment": "my segment"}),  # label value: my_segment
    ]
    invalid = [
        ("q", good[0]["passages"], 0, None),  # k = 0
        ("q", [object()], 5, None),  # a passage of no known shape
    ]
    mon = RetrievalMonitor(api.url, api_key=KEY, flush_interval=0.1, max_retries=2)
    try:
        for ev in good:
            mon.record(ev["query"], ev["passages"], ev["k"], ev["labels"], ev["event_id"])
        for query, passages, k, labels in fixed + invalid:
            mon.record(query, passages, k, labels)
        assert mon.flush(timeout=10)
        stats = mon.stats()
    finally:
        mon.close()
    assert stats["invalid"] == len(invalid), stats
    by_reason = {k: v for k, v in stats.items() if k.startswith("invalid_") and v}
    assert sum(by_reason.values()) == len(invalid) and len(by_reason) == 2, stats
    assert stats["sent"] == len(good) + len(fixed), stats
    assert event_keys(redis_url) == len(good) + len(fixed)
    time.sleep(0.3)  # the API writes rejection counters with its next batch
    rejected = {k: v for k, v in api.store.counters().items() if k.startswith("events_rejected")}
    assert rejected == {}, "the SDK sent something the server refused"
