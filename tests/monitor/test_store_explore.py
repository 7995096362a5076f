"""The explorer's index on a real Redis: written once in the finish step, searched by filters,
sorts and cursors (compared with the same filters applied to every event in Python), trimmed
with the result retention, and scoped to one app."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from ragmon.core.index_members import SORTS, member_ref, moments, overview_hours
from ragmon.core.measures import compute
from ragmon.core.search import parse_search
from ragmon.core.wire import event_ref
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store import event_index as explore
from ragmon.workers.worker import make_worker

START = datetime(2026, 11, 20, tzinfo=UTC)
RETRIEVERS = ("bm25", "dense", "hybrid")


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def finish(store: Store, app: str, i: int, retriever: str, grades: list[int], **extra) -> dict:
    """Queue and finish one event the way a worker does; returns what a search should list."""
    labels = {"app": app, "index": "kb", "retriever": retriever, "segment": "all"}
    ts = START + timedelta(minutes=i)
    event = {
        "event_id": f"e{i}",
        "timestamp": ts.isoformat(),
        "query": f"query {i}",
        "k": 4,
        "passages": [{"id": f"p{j}"} for j in range(len(grades))],
        "labels": labels,
        "_received_at": time.time(),
        **extra,
    }
    store.client.hset(store.keys.event(event_ref(app, f"e{i}")), mapping={"s": "queued"})
    sources = ["judge", "cache", "known", "judge"][: len(grades)]
    result = {"measures": compute(grades, 4), "labels": labels, "grade_source": sources}
    assert store.finish(event, result, grades)
    return {"id": f"e{i}", "ts": ts.timestamp(), "m": result["measures"], "labels": labels}


@pytest.fixture
def events(store: Store) -> list[dict]:
    rng = random.Random(7)
    out = []
    for i in range(300):
        grades = [rng.choice((0, 0, 0, 0, 1, 2, 3)) for _ in range(4)]
        out.append(finish(store, "shop", i, RETRIEVERS[i % 3], grades))
    return out


def collect(store: Store, params: dict[str, str]) -> tuple[list[str], int]:
    """Every page of a search, following cursors; returns ids in order and the page count."""
    ids, pages, cursor = [], 0, None
    while True:
        page = store.explore.search(
            parse_search({**params, **({"cursor": cursor} if cursor else {})})
        )
        pages += 1
        ids += [e["event_id"] for e in page.events]
        cursor = page.cursor
        if cursor is None:
            return ids, pages


@pytest.mark.parametrize("cap", [0, explore.CANDIDATE_CAP], ids=["walk-by-time", "list-by-measure"])
def test_time_order_with_measure_filters_matches_a_full_scan(
    store: Store, events: list[dict], cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both plans (walk the time index and check records; list a threshold's range of its
    measure index, then check in time order) give what a scan of every event gives."""
    monkeypatch.setattr(explore, "CANDIDATE_CAP", cap)
    want = [
        e["id"]
        for e in sorted(events, key=lambda e: -e["ts"])
        if e["labels"]["retriever"] == "bm25" and e["m"]["ndcg"] < 0.7
    ]
    assert 10 < len(want) < 100
    ids, pages = collect(store, {"retriever": "bm25", "ndcg_lt": "0.7", "limit": "7"})
    assert ids == want
    assert pages >= len(want) // 7
    both = [
        e["id"]
        for e in sorted(events, key=lambda e: e["ts"])
        if e["m"]["ndcg"] >= 0.8 and e["m"]["precision"] <= 0.5
    ]
    assert 5 < len(both) < len(events) // 2
    params = {"ndcg_ge": "0.8", "precision_le": "0.5", "order": "asc", "limit": "4"}
    assert collect(store, params)[0] == both


def test_measure_order_breaks_ties_by_time_and_pages_through_them(
    store: Store, events: list[dict]
) -> None:
    zero = [e for e in events if e["m"]["ndcg"] == 0.0]
    assert len(zero) > 20  # many ties at the same value: a score cursor would loop or skip
    want = [
        e["id"] for e in sorted(events, key=lambda e: (round(e["m"]["ndcg"], 6), e["ts"], e["id"]))
    ]
    ids, _ = collect(store, {"sort": "ndcg", "limit": "9"})
    assert len(ids) == len(events) and set(ids) == set(want)
    got = {e["id"]: e for e in events}
    values = [round(got[i]["m"]["ndcg"], 6) for i in ids]
    assert values == sorted(values)  # worst first by default for a higher-is-better measure


def test_exact_filters_time_range_and_hit(store: Store, events: list[dict]) -> None:
    since, until = events[50]["ts"], events[120]["ts"]
    want = {e["id"] for e in events[50:120] if e["m"]["hit"] == 0}
    params = {"from": str(int(since * 1000)), "to": str(int(until * 1000)), "hit": "0"}
    ids, _ = collect(store, params)
    assert set(ids) == want and len(ids) == len(want)


def test_a_finish_retried_is_indexed_once(store: Store) -> None:
    finish(store, "shop", 1, "bm25", [3, 0, 0, 0])
    store.client.hset(store.keys.event(event_ref("shop", "e1")), "s", "done")
    labels = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "all"}
    event = {"event_id": "e1", "timestamp": START.isoformat(), "query": "q", "k": 4,
             "passages": [], "labels": labels, "_received_at": time.time()}  # fmt: skip
    # a redelivered job with other grades: FINISH refuses, and the index keeps the first result
    result = {"measures": compute([0, 0, 0, 0], 4), "labels": labels, "grade_source": []}
    assert not store.finish(event, result, [0, 0, 0, 0])
    page = store.explore.search(parse_search({}))
    assert [e["measures"]["ndcg"] for e in page.events] == [1.0]
    assert store.client.zcard(store.keys.explore_time("shop|kb|bm25|all")) == 1


def test_expired_events_leave_the_index(
    store: Store, events: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(explore, "TRIM_PER_CALL", 7)  # the sweep takes many short calls
    series = "shop|kb|bm25|all"
    assert store.explore.counts([series]) == [100]
    later = time.time() + store.result_ttl_s + 1
    assert store.explore.search(parse_search({}), now=later).events == []
    assert store.explore.trim(later) == 300
    assert store.explore.counts([series]) == [0]
    assert store.explore.series() == []
    leftover = store.client.keys(f"{store.keys.prefix}:x:*")
    hourly = store.client.keys(f"{store.keys.prefix}:x:hr:*")
    summaries = store.client.keys(f"{store.keys.prefix}:x:ov:*")
    assert len(summaries) == 3  # only the overview's hourly sums and summaries, which expire
    assert set(leftover) == set(hourly) | set(summaries)
    assert all(store.client.ttl(k) > 0 for k in leftover)


def test_a_finish_trims_its_series_and_a_trace_keeps_pointing_to_its_newest_event(
    store: Store,
) -> None:
    """The members of expired events are read from their records in Python (Lua parses none);
    a trace's pointer leaves only while it points to the expired event."""
    series = "shop|kb|bm25|all"
    finish(store, "shop", 1, "bm25", [3, 0, 0, 0], trace_id="abc")
    finish(store, "shop", 2, "bm25", [0, 0, 0, 0], trace_id="abc")  # abc now points here
    finish(store, "shop", 3, "bm25", [1, 0, 0, 0], trace_id="old")
    traces = store.keys.explore_traces
    # e3's pointer as another release may have spelled it: any JSON encoding decodes
    store.client.hset(traces, "shop|old", json.dumps([series, "shop|e3"]))
    store.client.zadd(store.keys.explore_expiry(series), {"shop|e1": 1, "shop|e3": 1})
    finish(store, "shop", 4, "bm25", [2, 0, 0, 0])  # its finish trims e1 and e3
    kept = {"shop|e2", "shop|e4"}
    assert {r.decode() for r in store.client.hkeys(store.keys.explore_records(series))} == kept
    members = [m.decode() for m in store.client.zrange(store.keys.explore_time(series), 0, -1)]
    assert {member_ref(m, "time") for m in members} == kept
    for m in SORTS[1:]:
        held = store.client.zrange(store.keys.explore_measure(m, series), 0, -1)
        assert {member_ref(x.decode(), m) for x in held} <= kept
    assert store.client.hgetall(traces) == {b"shop|abc": json.dumps([series, "shop|e2"],
                                            separators=(",", ":")).encode()}  # fmt: skip


def test_trace_lookup_and_app_scope(store: Store) -> None:
    finish(store, "shop", 1, "bm25", [3, 0, 0, 0], trace_id="abc")
    finish(store, "blog", 2, "bm25", [0, 0, 0, 0], trace_id="abc")
    shop = parse_search({"trace_id": "abc"}).with_app("shop")
    assert [e["event_id"] for e in store.explore.search(shop).events] == ["e1"]
    both = store.explore.search(parse_search({"trace_id": "abc"})).events
    assert sorted(e["labels"]["app"] for e in both) == ["blog", "shop"]
    blog = store.explore.search(parse_search({}).with_app("blog")).events
    assert [e["labels"]["app"] for e in blog] == ["blog"]


def test_a_rare_match_stops_at_the_scan_budget_with_a_cursor(store: Store) -> None:
    for i in range(300):
        grades = [3, 0, 0, 0] if i != 3 else [0, 0, 0, 0]
        finish(store, "shop", i, "bm25", grades)
    page = store.explore.search(parse_search({"rr": "0"}), budget=200)
    assert page.partial and page.events == [] and page.scanned == 200
    rest = store.explore.search(parse_search({"rr": "0", "cursor": page.cursor}), budget=200)
    assert [e["event_id"] for e in rest.events] == ["e3"] and rest.cursor is None


def test_the_overview_compares_the_last_24_hours_with_the_7_days_before(store: Store) -> None:
    """Hourly sums kept by the index give the exact means of both windows (events placed by
    their own time), and the same variance as the values themselves."""
    now = time.time()
    ages_h = [0.1, 5, 23.5, 24.5, 30, 100, 190, 200]  # the last two: older than 8 days of hours
    values: dict[str, list[float]] = {"recent": [], "before": []}
    for i, age in enumerate(ages_h):
        grades = [3, 0, 0, 0] if i % 2 else [0, 0, 3, 2]
        ts = datetime.fromtimestamp(now - age * 3600, UTC)
        labels = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "all"}
        event = {"event_id": f"o{i}", "timestamp": ts.isoformat(), "query": "q", "k": 4,
                 "passages": [], "labels": labels, "_received_at": now}  # fmt: skip
        store.client.hset(store.keys.event(event_ref("shop", f"o{i}")), "s", "queued")
        measures = compute(grades, 4)
        assert store.finish(event, {"measures": measures, "labels": labels}, grades)
        hour, this_hour = int((now - age * 3600) // 3600), int(now // 3600)
        if hour > this_hour - 24:
            values["recent"].append(measures["ndcg"])
        elif hour > this_hour - 24 - 168:
            values["before"].append(measures["ndcg"])
    (row,) = store.explore.overview(parse_search({}), now=now)
    assert row["events"] == len(ages_h)
    for window, got in values.items():
        n, mean, var = row[window]["ndcg"]
        assert n == len(got) and mean == pytest.approx(sum(got) / len(got))
        m = sum(got) / len(got)
        assert var == pytest.approx(sum((x - m) ** 2 for x in got) / (len(got) - 1))
    hours = store.client.keys(f"{store.keys.prefix}:x:hr:*")
    assert hours and all(0 < store.client.ttl(k) <= 194 * 3600 for k in hours)


def _reference(store: Store, series: str, now: float) -> dict[str, tuple[float, float, float]]:
    """The overview's ndcg sums read from every hourly hash of both windows (the old way)."""
    recent, before = overview_hours(now)
    out = {}
    for window, hours in (("recent", recent), ("before", before)):
        sums = [0.0, 0.0, 0.0]
        for h in hours:
            raw = store.client.hmget(
                store.keys.explore_hour(series, str(h)), ["ndcg|n", "ndcg|s", "ndcg|q"]
            )
            sums = [a + float(b or 0) for a, b in zip(sums, raw, strict=True)]
        out[window] = moments(*sums)
    return out


def test_the_overview_summary_follows_the_hours_and_late_events(store: Store) -> None:
    """The workers keep a summary per series (brought to the hour by each finish step and by
    the hourly `summarize`: moved an hour at a time, made again when older, added to by events
    finished late into hours it holds); the overview reads it, moved in memory by up to two
    hours either way: at every hour it gives what all 192 hourly sums give, while events keep
    arriving, some backdated."""
    rng = random.Random(3)
    labels = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "all"}
    series = "shop|kb|bm25|all"
    start = int(time.time() // 3600) * 3600 - 40 * 3600
    n = 0

    def same(now: float) -> None:
        (row,) = store.explore.overview(parse_search({}), now=now)
        want = _reference(store, series, now)
        assert row["made"]
        for window in ("recent", "before"):
            got, exp = row[window]["ndcg"], want[window]
            assert (got is None) == (exp is None), (now, window)
            if got is not None and exp is not None:
                assert got[0] == exp[0], (now, window)
                assert got[1] == pytest.approx(exp[1]) and got[2] == pytest.approx(exp[2], abs=1e-9)

    for step in range(40):
        now = start + step * 3600 + 1800
        if step % 9 not in (5, 6):  # else hours without events: the summary falls behind
            for _ in range(3):  # events of now, and late ones from up to 9 days back
                age_h = rng.choice([0, 0.2, 3, 20, 23.9, 24.1, 50, 150, 191, 193, 215])
                grades = [rng.choice((0, 1, 2, 3)) for _ in range(4)]
                ts = datetime.fromtimestamp(now - age_h * 3600, UTC)
                event = {"event_id": f"s{n}", "timestamp": ts.isoformat(), "query": "q", "k": 4,
                         "passages": [], "labels": labels, "_received_at": now}  # fmt: skip
                store.client.hset(store.keys.event(event_ref("shop", f"s{n}")), "s", "queued")
                result = {"measures": compute(grades, 4), "labels": labels}
                assert store.finish(event, result, grades, now=now)
                n += 1
        if step % 4 == 0:  # the workers' hourly pass, some hours
            store.explore.summarize(now)
        if step % 13 == 7:  # a gap of days: no windows shown until the workers make it again
            store.client.hset(store.keys.explore_summary(series), "h", str(int(now // 3600) - 30))
            (row,) = store.explore.overview(parse_search({}), now=now)
            assert not row["made"] and row["recent"]["ndcg"] is None and row["events"] == n
            assert store.explore.summarize(now) == 1
        same(now)
        if step % 5 == 2:  # a reader whose clock is an hour behind the writers'
            same(now - 3600)


def _commands(store: Store) -> dict[str, int]:
    stats = store.client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


WRITES = ("hset", "hincrby", "hincrbyfloat", "expire", "del", "set", "zadd")


def _forty_series(store: Store, now: float) -> None:
    """20 series of shop and 20 of blog, two events each of the last hour."""
    ts = datetime.fromtimestamp(now - 60, UTC).isoformat()
    for i in range(40):
        finish(store, "shop", i, f"r{i % 20}", [3, 0, 1, 0], timestamp=ts)
        finish(store, "blog", i, f"r{i % 20}", [3, 0, 1, 0], timestamp=ts)


def test_the_overview_reads_two_keys_a_series_and_one_apps_series_only(store: Store) -> None:
    """Per request, Redis reads a summary and this hour's sums per series of the searched app,
    not 192 hourly hashes, nor another app's series (issue 33: one app's explorer stalled
    every app's ingest), and writes nothing."""
    now = time.time()
    _forty_series(store, now)
    shop = parse_search({}).with_app("shop")
    store.client.config_resetstat()
    rows = store.explore.overview(shop, now=now)
    assert len(rows) == 20 and {r["series"].split("|")[0] for r in rows} == {"shop"}
    assert all(r["made"] and r["recent"]["ndcg"][0] == 2 for r in rows)
    used = _commands(store)
    assert used.get("hmget", 0) <= 40  # per series its summary and this hour's sums
    assert used.get("zrevrange", 0) + used.get("zrange", 0) <= 2  # shop's series only
    assert not any(used.get(c) for c in WRITES)


def test_the_workers_make_the_summaries_and_a_page_never_does(
    store: Store, settings: Settings
) -> None:
    """Each finish step leaves its series' summary made for this hour, with no page loaded; a
    page that finds summaries too old to move (the workers away for hours) shows the series
    without their windows and reads no hourly sums; the workers' hourly pass makes them, once
    an hour for the fleet (issue 33: the first page of each series in an hour made its
    summary from 191 hourly hashes, on the request path)."""
    now = time.time()
    _forty_series(store, now)
    hour = str(int(now // 3600))
    names = store.explore.series()
    assert len(names) == 40
    for name in names:  # no page has been loaded
        assert store.client.hget(store.keys.explore_summary(name), "h") == hour.encode()
        store.client.hset(store.keys.explore_summary(name), "h", str(int(hour) - 30))
    shop = parse_search({}).with_app("shop")
    store.client.config_resetstat()
    rows = store.explore.overview(shop, now=now)
    assert [r["events"] for r in rows] == [2] * 20
    assert not any(r["made"] or r["recent"]["ndcg"] or r["before"]["ndcg"] for r in rows)
    used = _commands(store)
    assert used.get("hmget", 0) == 20 and not any(used.get(c) for c in WRITES), used  # summaries
    make_worker(settings, store).run_maintenance_tasks()  # the first worker this hour
    assert all(
        store.client.hget(store.keys.explore_summary(name), "h") == hour.encode() for name in names
    )
    assert store.explore.keep_summaries(now) is None  # the others: done this hour
    rows = store.explore.overview(shop, now=now)
    ndcg = compute([3, 0, 1, 0], 4)["ndcg"]
    assert all(r["made"] and r["recent"]["ndcg"] == (2, pytest.approx(ndcg), 0.0) for r in rows)


def _failed_event(store: Store, app: str, i: int, text_bytes: int) -> None:
    labels = {"app": app, "index": "kb", "retriever": "bm25", "segment": "all"}
    payload = {"event_id": f"f{i}", "timestamp": START.isoformat(), "query": "q", "k": 1,
               "passages": [{"id": "p", "text": "x" * text_bytes}], "labels": labels}  # fmt: skip
    ref = event_ref(app, f"f{i}")
    store.client.hset(store.keys.event(ref), mapping={"p": json.dumps(payload), "s": "queued",
                                                      "rt": time.time()})  # fmt: skip
    assert store.fail(ref, "refused", "no grade")


def test_a_failed_search_reads_its_apps_failures_only_and_parses_a_bounded_page(
    store: Store,
) -> None:
    for i in range(30):
        _failed_event(store, "noisy", i, 50_000)  # another app's large failures
    for i in range(12):
        _failed_event(store, "shop", i, 1_000_000)  # 1 MB each: 4 a page at most
    store.client.config_resetstat()
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"status": "failed", **({"cursor": cursor} if cursor else {})}
        page = store.explore.search(parse_search(params).with_app("shop"))
        assert len(page.events) <= 4
        assert {e["labels"]["app"] for e in page.events} <= {"shop"}
        seen += [e["event_id"] for e in page.events]
        pages += 1
        cursor = page.cursor
        if not cursor:
            break
    assert sorted(seen) == sorted(f"f{i}" for i in range(12)) and pages >= 3
    stats = _commands(store)
    assert stats.get("hstrlen", 0) <= 12 + 4 * pages  # shop's refs, each read once or twice
    assert stats.get("hmget", 0) <= 12 + 4 * pages  # never another app's failed events


def test_an_app_folded_past_the_fleets_series_cap_stays_in_the_explorer(
    settings: Settings,
) -> None:
    """Past RAGMON_MAX_SERIES an app without series is counted in the all-`other` series on
    /metrics; the explorer lists its events under its own `app|other|other|other`, so its
    searches, overview and links find them (they vanished before: issue 33)."""
    store = Store.connect(replace(settings, max_series=1))
    finish(store, "shop", 1, "bm25", [3, 0, 0, 0])
    for i in range(2, 5):
        finish(store, "late", i, "dense", [0, 3, 0, 0])
    assert store.client.hget(store.keys.event(event_ref("late", "e2")), "sr") == (
        b"other|other|other|other"
    )
    late = parse_search({}).with_app("late")
    found = store.explore.search(late).events
    assert sorted(e["event_id"] for e in found) == ["e2", "e3", "e4"]
    (row,) = store.explore.overview(late)
    assert row["series"] == "late|other|other|other" and row["events"] == 3
    assert [
        e["event_id"] for e in store.explore.search(parse_search({}).with_app("shop")).events
    ] == ["e1"]


def test_the_overview_weighs_events_by_their_inclusion_probability(settings: Settings) -> None:
    """With planned sampling each judged event counts 1 / its probability in the overview's
    means (Hajek's, as the exported histograms), and its precision is Kish's effective n."""
    store = Store.connect(replace(settings, sampling="planned"))
    now = time.time()
    labels = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "all"}
    rng = random.Random(5)
    got = []
    for i in range(30):
        grades = [rng.choice([0, 1, 2, 3]) for _ in range(4)]
        p = 0.2 if i % 3 else 1.0
        event = {"event_id": f"w{i}", "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
                 "query": "q", "k": 4, "passages": [], "labels": labels, "_received_at": now,
                 "inclusion_probability": p}  # fmt: skip
        store.client.hset(store.keys.event(event_ref("shop", f"w{i}")), "s", "queued")
        measures = compute(grades, 4)
        assert store.finish(event, {"measures": measures, "labels": labels}, grades)
        got.append((measures["ndcg"], p))
    (row,) = store.explore.overview(parse_search({}), now=now)
    n, mean, var = row["recent"]["ndcg"]
    w = [1 / p for _, p in got]
    want = sum(wi * y for wi, (y, _) in zip(w, got, strict=True)) / sum(w)
    assert n == 30 and mean == pytest.approx(want, rel=1e-9)
    var_w = sum(wi * (y - want) ** 2 for wi, (y, _) in zip(w, got, strict=True)) / sum(w)
    kish = sum(w) ** 2 / sum(x * x for x in w)
    assert var / n == pytest.approx(var_w * 30 / 29 / kish, rel=1e-9)
    store.client.close()
