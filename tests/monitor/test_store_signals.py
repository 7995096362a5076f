"""The retrieval signals INGEST writes for every new event, against a real Redis: the per-series
histograms (lifetime and per day) equal those of `extract` done in Python, short results and
repeated passages are counted, distinct queries land in the day's HyperLogLog, known ids and
refused requests add nothing, and the series budget folds as FINISH does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ragmon.core.catalog import BY_NAME
from ragmon.core.signals import SIGNALS, extract
from ragmon.export import metrics_text
from ragmon.settings import Settings
from ragmon.store import DAY_TTL_S, Histogram, IngestItem, Store, bucket_index
from ragmon.store.keys import utc_today
from ragmon.store.records import signal_record

DAY = "2026-11-20"
EVENTS = [  # query, k, ids, scores
    ("what is a flea", 3, ["a", "b", "c", "d"], [9.0, 7.5, 7.0, 2.0]),
    ("What  is a FLEA", 3, ["a", "a"], [4.0, 4.0]),  # the same query, normalized; short
    ("empty", 5, [], []),
    ("no scores here at all", 2, ["x", "y", "z"], [None, None, None]),
    ("negative", 2, ["p", "q"], [-0.5, -3.0]),
]


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(replace(settings, queue_limit=1000))
    yield s
    s.client.close()


def item(i: int, series: str = "shop|docs|bm25|default", sampled_out: bool = False) -> IngestItem:
    query, k, ids, scores = EVENTS[i % len(EVENTS)]
    app = series.partition("|")[0]
    return IngestItem(f"e{i}", json.dumps({"k": k}), sampled_out, app, series, 1.0, DAY,
                      signal_record(query, k, ids, scores))  # fmt: skip


def expected(indexes: list[int]) -> dict[str, Histogram]:
    """The histograms of `extract` over the events, computed in Python."""
    out = {}
    for s in SIGNALS:
        buckets, total, squares, n = [0] * (len(s.buckets) + 1), 0.0, 0.0, 0
        for i in indexes:
            v = extract(*EVENTS[i % len(EVENTS)]).values[s.key]
            if v is not None:
                buckets[bucket_index(s.buckets, v)] += 1
                total, squares, n = total + v, squares + v * v, n + 1
        if n:
            sumsq = squares if s.sum_squares else None
            out[f"signal_{s.key}"] = Histogram(buckets, total, n, sumsq)
    return out


def bounds() -> dict[str, tuple[float, ...]]:
    return {f"signal_{s.key}": s.buckets for s in SIGNALS}


def test_every_new_event_adds_its_signals_once(store: Store) -> None:
    written = store.ingest([item(0), item(1), item(2, sampled_out=True), item(3), item(4)])
    assert all(created for _, created in written.outcomes)
    store.ingest([item(0), item(1)])  # known ids: nothing more
    want = expected([0, 1, 2, 3, 4])
    series = ("shop", "docs", "bm25", "default")
    for hists in (store.histograms(bounds()), store.histograms(bounds(), day=DAY)):
        got = {name: per[series] for name, per in hists.items()}
        assert got.keys() == want.keys()
        for name, h in want.items():
            assert got[name].buckets == h.buckets and got[name].count == h.count
            # values travel to 6 significant digits (`signal_record`)
            assert got[name].sum == pytest.approx(h.sum, rel=1e-5)
            if h.sum_squares is not None:
                assert got[name].sum_squares == pytest.approx(h.sum_squares, rel=1e-5)
    counters = store.counters()
    assert counters["signal_short|shop|docs|bm25|default"] == 2  # M < K: events 1 and 2
    assert store.counters(day=DAY)["signal_short|shop|docs|bm25|default"] == 2  # the report's
    assert 0 < store.client.ttl(store.keys.day_counters(DAY)) <= DAY_TTL_S
    assert counters["passages_duplicate|shop|docs|bm25|default"] == 1
    assert store.distinct_queries(DAY, ["shop|docs|bm25|default"]) == [4]
    assert counters["signal_empty_queries|shop|docs|bm25|default"] == 1  # event 2


def test_retries_of_one_empty_query_count_once_a_day(store: Store) -> None:
    """A user retrying an empty query (new event ids, same query) adds one empty query; another
    empty query adds one more; a non-empty query adds none."""
    store.ingest([item(i) for i in (2, 7, 12, 17, 0)])  # "empty" four times, then a flea
    store.ingest([IngestItem("x", json.dumps({"k": 5}), False, "shop", "shop|docs|bm25|default",
                             1.0, DAY, signal_record("Other  EMPTY", 5, [], []))])  # fmt: skip
    store.ingest([IngestItem("y", json.dumps({"k": 5}), False, "shop", "shop|docs|bm25|default",
                             1.0, DAY, signal_record("other empty", 5, [], []))])  # fmt: skip
    assert store.counters()["signal_empty_queries|shop|docs|bm25|default"] == 2
    h = store.histograms(bounds())["signal_results"][("shop", "docs", "bm25", "default")]
    assert h.buckets[0] == 6  # every empty event still counts in the histogram


def test_many_empty_queries_cost_one_key_per_series_and_day(store: Store) -> None:
    """A flood of distinct empty queries grows the count by about as many (a HyperLogLog's
    estimate, standard error 0.81 %), and Redis by one key, not one per query."""
    series = "shop|docs|bm25|default"
    empties = [IngestItem(f"q{i}", json.dumps({"k": 5}), True, "shop", series, 1.0, DAY,
                          signal_record(f"nothing for {i}", 5, [], []))
               for i in range(2000)]  # fmt: skip  # sampled out: past the queue limit too
    for start in range(0, len(empties), 500):
        store.ingest(empties[start : start + 500])
    counted = store.counters()[f"signal_empty_queries|{series}"]
    assert abs(counted - 2000) <= 60, counted
    assert list(store.client.scan_iter("*:eq:*")) == [
        store.keys.day_empty_queries(DAY, series).encode()
    ]


def test_distinct_queries_over_days_and_segments_count_each_query_once(store: Store) -> None:
    """The report's distinct queries of a window: the union of its days' and segments'
    HyperLogLogs, so a query asked on two days or in two segments counts once."""
    later = "2026-11-21"
    store.ingest([item(0), item(4), item(5, series="shop|docs|bm25|mobile")])  # 5: as 0
    store.ingest([replace(item(6), day=later), replace(item(7), day=later)])  # as 1 and 2
    web, mobile = "shop|docs|bm25|default", "shop|docs|bm25|mobile"
    assert store.distinct_queries_over([DAY], [web]) == 2
    assert store.distinct_queries_over([DAY, later], [web, mobile]) == 3  # flea, negative, empty
    assert store.distinct_queries_over(["2026-10-01"], [web]) == 0  # none kept


def test_a_refused_request_adds_nothing(settings: Settings) -> None:
    store = Store.connect(replace(settings, queue_limit=1))
    try:
        store.ingest([item(0)])
        written = store.ingest([item(1), item(2)], sizes=[2])
        assert all(not isinstance(o, tuple) for o in written.outcomes)
        h = store.histograms(bounds())["signal_results"][("shop", "docs", "bm25", "default")]
        assert h.count == 1
    finally:
        store.client.close()


def test_past_the_series_budget_signals_fold_like_measures(settings: Settings) -> None:
    store = Store.connect(replace(settings, max_series_per_app=1, max_series=2))
    try:
        store.ingest([item(0, "a|i1|r|default"), item(1, "a|i2|r|default"),
                      item(2, "b|i1|r|default"), item(3, "c|i1|r|default")])  # fmt: skip
        h = store.histograms(bounds())["signal_results"]
        assert sorted(h) == [("a", "i1", "r", "default"), ("a", "other", "other", "other"),
                             ("b", "i1", "r", "default"), ("other",) * 4]  # fmt: skip
        assert store.counters().get("series_folded|a") is None  # FINISH counts the judged ones
    finally:
        store.client.close()


def test_metrics_show_the_signals(store: Store) -> None:
    store.ingest([replace(item(i), day=utc_today()) for i in range(5)])
    text = metrics_text(store).decode()
    labels = 'app="shop",index="docs",retriever="bm25",segment="default"'
    assert f'ragmon_signal_results_bucket{{{labels},le="0.0"}} 1' in text
    assert f"ragmon_signal_results_count{{{labels}}} 5" in text
    assert f"ragmon_signal_queries_distinct{{{labels}}} 4.0" in text
    assert f"ragmon_signal_short_total{{{labels}}} 2.0" in text
    assert f"ragmon_signal_empty_queries_total{{{labels}}} 1.0" in text
    assert BY_NAME["ragmon_signal_top_score_sum_squares"].name + "_total{" + labels in text
