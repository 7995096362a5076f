"""Data handling: no query or passage text kept once judged (RAGMON_STORE_TEXT=false), the
judgment cache still hits on hashes, TTLs as configured, every Redis key documented."""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from pathlib import Path

import pytest
import redis
from cryptography.fernet import Fernet

from ragmon.store import text_hash
from tests.reliability.conftest import llm_env
from tests.reliability.support import labeled, metric, wait_status
from tests.support.events import make_event, ref
from tests.support.fake_llm import Reply
from tests.support.stack import Stack

DAY = 86400
DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
QUERY_MARK = "zanzibar-query-secret"
PASSAGE_MARK = "quokka-passage-secret"

TEXT_KEY = Fernet.generate_key().decode()  # shared by the test API and its workers


def secret_event(event_id: str) -> dict:
    ev = make_event(n=6, k=3, seed=42, labels={"app": "privacy", "retriever": "r"})
    ev["event_id"] = event_id
    ev["query"] = f"how do I reset the {QUERY_MARK} password"
    for i, p in enumerate(ev["passages"]):
        p["text"] = f"{PASSAGE_MARK} {i}: reset the password from the account page"
    return ev


def everything_in(redis_url: str) -> dict[str, bytes]:
    """Every key's content as bytes (RQ's zlib-compressed job data decompressed)."""
    client = redis.Redis.from_url(redis_url)
    out: dict[str, bytes] = {}
    try:
        for key in client.scan_iter("*"):
            kind = client.type(key).decode()
            if kind == "string":
                parts = [client.get(key) or b""]
            elif kind == "hash":
                parts = [b for kv in client.hgetall(key).items() for b in kv]
            elif kind == "list":
                parts = client.lrange(key, 0, -1)
            elif kind == "set":
                parts = list(client.smembers(key))
            elif kind == "zset":
                parts = client.zrange(key, 0, -1)
            elif kind == "stream":
                parts = [b for _, f in client.xrange(key) for kv in f.items() for b in kv]
            else:
                parts = []
            blob = b"\n".join(parts)
            for part in parts:
                with contextlib.suppress(zlib.error):
                    blob += b"\n" + zlib.decompress(part)
            out[key.decode()] = blob
    finally:
        client.close()
    return out


def holding(redis_url: str, *marks: str) -> list[str]:
    return [k for k, v in everything_in(redis_url).items() if any(m.encode() in v for m in marks)]


def test_text_is_in_redis_until_judged_only_when_stored(make_api, redis_url):
    """The contrast that shows the scanner works: with text storage on, a queued event keeps
    its text in clear (the worker needs it), with the result TTL already set at ingest."""
    api = make_api(RAGMON_RESULT_TTL_DAYS="2")
    assert api.client.post("/v1/retrievals", json=secret_event("q-1")).status_code == 202
    assert holding(redis_url, QUERY_MARK) == ["ragmon:ev:privacy|q-1"]
    assert holding(redis_url, PASSAGE_MARK) == ["ragmon:ev:privacy|q-1"]
    ttl = redis.Redis.from_url(redis_url).ttl("ragmon:ev:privacy|q-1")
    assert 2 * DAY - 60 <= ttl <= 2 * DAY


def test_text_waiting_for_the_judge_is_sealed_when_not_stored(make_api, redis_url):
    """RAGMON_STORE_TEXT=false: the queued event's text is in Redis only encrypted, and the
    API still reads its labels back."""
    api = make_api(RAGMON_STORE_TEXT="false", RAGMON_TEXT_KEYS=TEXT_KEY)
    assert api.client.post("/v1/retrievals", json=secret_event("q-2")).status_code == 202
    assert holding(redis_url, QUERY_MARK, PASSAGE_MARK) == []
    raw = redis.Redis.from_url(redis_url).hget("ragmon:ev:privacy|q-2", "p")
    assert raw.startswith(b"fernet:")
    got = api.client.get("/v1/retrievals/q-2", params={"app": "privacy"}).json()
    assert got["status"] == "queued" and got["labels"]["app"] == "privacy"


@pytest.mark.slow
def test_store_text_false_keeps_only_hashes_and_the_cache_hits(redis_url, fake_llm):
    env = llm_env(
        fake_llm,
        RAGMON_STORE_TEXT="false",
        RAGMON_TEXT_KEYS=TEXT_KEY,
        RAGMON_RESULT_TTL_DAYS="2",
        RAGMON_CACHE_TTL_DAYS="1",
    )
    stack = Stack(redis_url, workers=1, env=env).start()
    try:
        first = secret_event("first")
        stack.post([first])
        assert wait_status(stack, ["first"], timeout=30, app="privacy") == {"first": "done"}
        calls = len(fake_llm.chat_requests())
        assert calls >= 6  # the top 2k = 6 passages, one pointwise call each
        # nothing in Redis holds the text any more: event hash, caches, RQ jobs, day lists
        assert holding(redis_url, QUERY_MARK, PASSAGE_MARK) == []

        client = redis.Redis.from_url(redis_url)
        stored = json.loads(client.hget("ragmon:ev:privacy|first", "p"))
        assert stored["query"] == {"sha": text_hash(first["query"])}
        assert [p["text_sha"] for p in stored["passages"]] == [
            text_hash(p["text"]) for p in first["passages"]
        ]
        assert all("text" not in p for p in stored["passages"])
        assert stored["labels"]["app"] == "privacy" and stored["k"] == 3

        # the same query and passages again: graded from the cache, no new LLM call
        hits_before = metric(stack, "ragmon_judge_cache_hits_total")
        second = secret_event("second")
        stack.post([second])
        assert wait_status(stack, ["second"], timeout=30, app="privacy") == {"second": "done"}
        result = stack.client.get("/v1/retrievals/second?app=privacy").json()
        assert result["grade_source"] == ["cache"] * 6
        assert len(fake_llm.chat_requests()) == calls
        assert metric(stack, "ragmon_judge_cache_hits_total") - hits_before == 6
        first_result = stack.client.get("/v1/retrievals/first?app=privacy").json()
        assert result["grades"] == first_result["grades"]
        assert holding(redis_url, QUERY_MARK, PASSAGE_MARK) == []
        assert labeled(stack) == 2

        # retention: results for RAGMON_RESULT_TTL_DAYS, grades for RAGMON_CACHE_TTL_DAYS
        for key in ("ragmon:ev:privacy|first", "ragmon:ev:privacy|second"):
            assert 2 * DAY - 120 <= client.ttl(key) <= 2 * DAY, key
        cache_keys = list(client.scan_iter("ragmon:jca:privacy|*"))
        assert len(cache_keys) == 6
        assert all(DAY - 120 <= client.ttl(k) <= DAY for k in cache_keys)
        client.close()
    finally:
        stack.stop()


# ---- the documented key inventory ----------------------------------------------------------


def documented_families() -> list[tuple[re.Pattern, str]]:
    """(pattern, TTL column) of each row of the key table in docs/reliability.md."""
    rows = []
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `((?:ragmon|rq):[^`]+)` \|[^|]*\|[^|]*\| ([^|]+) \|", line)
        if m:
            regex = re.escape(m.group(1).replace("\\|", "|"))  # `\|`: a | inside a table
            regex = re.sub(r"\\\{[^}]*\\\}", ".+", regex)  # {placeholders}
            rows.append((re.compile(f"^{regex}$"), m.group(2).strip()))
    return rows


@pytest.mark.slow
def test_every_redis_key_is_documented_with_its_ttl(redis_url, fake_llm):
    """After a full life cycle (done, cached, sampled out, failed, refused), every key in
    Redis matches a documented family, and a key the doc says expires has a TTL."""
    families = documented_families()
    assert len(families) >= 20, "the key table in docs/reliability.md was not found"
    env = llm_env(fake_llm, RAGMON_JUDGE_RPM="1000", RAGMON_SAMPLE_RATE="0.6")
    stack = Stack(redis_url, workers=1, env=env).start()
    try:
        evs = [make_event(n=4, k=2, seed=s) for s in range(10)]
        stack.post(evs)
        ids = [e["event_id"] for e in evs]
        st = wait_status(stack, ids, {"done", "sampled_out"}, 30, app="test")
        assert set(st.values()) == {"done", "sampled_out"}, st
        fake_llm.script(*[Reply.text("nonsense")] * 40)
        bad = make_event(n=4, k=2, seed=99, event_id="bad-one")
        for passage in bad["passages"]:  # texts of its own: no grade cached from the others
            passage["text"] += " (the failing event's own text)"
        stack.post([bad])
        st = wait_status(stack, ["bad-one"], timeout=30, want="failed", app="test")
        assert st == {"bad-one": "failed"}, st
        stack.client.post("/v1/retrievals", json={"query": ""})  # a rejection counter
        stack.metrics()
        client = redis.Redis.from_url(redis_url)
        undocumented, no_ttl = [], []
        for key in (k.decode() for k in client.scan_iter("*")):
            match = next((ttl for rx, ttl in families if rx.match(key)), None)
            if match is None:
                undocumented.append(key)
            elif not match.lower().startswith("none") and client.ttl(key) == -1:
                no_ttl.append(key)
        client.close()
        assert undocumented == []
        assert no_ttl == []
    finally:
        stack.stop()


def test_requeue_forgets_failed_ids_whose_event_expired(api, redis_url):
    """`ragmon:failed` has no TTL: ids of expired events must not pile up in it forever."""
    for eid in ("kept", "expired"):
        ev = make_event(seed=1, event_id=eid)
        assert api.client.post("/v1/retrievals", json=ev).status_code == 202
        assert api.store.fail(ref(ev), "malformed", "nonsense")
    client = redis.Redis.from_url(redis_url)
    client.delete("ragmon:ev:test|expired")  # what the result TTL does
    assert api.store.requeue(api.store.failed_refs()) == 1
    assert client.zcard("ragmon:failed") == 0
    assert client.hget("ragmon:ev:test|kept", "s") == b"queued"
    assert not client.exists("ragmon:ev:test|expired")
    client.close()


@pytest.mark.slow  # real processes for seconds: out of scripts/test --quick
def test_no_text_reaches_the_aof_or_an_rdb_dump(aof_redis):
    """RAGMON_STORE_TEXT=false, 300 events judged on a Redis with AOF: neither the AOF (every
    write since start, before any rewrite) nor an uncompressed RDB dump holds any query or
    passage text; the labels, which are not secret, are there (the grep sees clear text)."""
    n = 300
    env = {"RAGMON_STORE_TEXT": "false", "RAGMON_TEXT_KEYS": TEXT_KEY}
    stack = Stack(aof_redis.url, workers=2, env=env).start()
    texts = []
    try:
        evs = []
        for i in range(n):
            ev = make_event(n=4, k=2, seed=i, labels={"app": "atrest", "retriever": "r"})
            ev["event_id"] = f"r{i}"
            ev["query"] = f"secretq{i:04d} how to reset"
            for j, p in enumerate(ev["passages"]):
                p["text"] = f"secretp{i:04d}x{j} reset it from the account page"
            texts += [ev["query"], *(p["text"] for p in ev["passages"])]
            evs.append(ev)
        for i in range(0, n, 100):
            stack.post(evs[i : i + 100])
        ids = [e["event_id"] for e in evs]
        assert set(wait_status(stack, ids, timeout=300, app="atrest").values()) == {"done"}
    finally:
        stack.stop()
    client = redis.Redis.from_url(aof_redis.url)
    client.config_set("rdbcompression", "no")
    client.save()
    client.close()
    files = [p for p in aof_redis.dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".rdb" for p in files) and any(".aof" in p.name for p in files)
    blob = b"".join(p.read_bytes() for p in files)
    assert b"atrest" in blob
    found = [t for t in texts if t.encode() in blob]
    print(
        f"\n{n} events, {len(texts)} texts; {len(blob)} bytes of AOF + RDB; in clear: {len(found)}"
    )
    assert found == []
    assert b"secretq" not in blob and b"secretp" not in blob
