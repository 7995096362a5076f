"""`Store.finish` on a real Redis: the sum of squares the alerts need is recorded once per event
with the histogram, exported by the collector, and the per-day record carries what the drift
report clusters and compares on (query key and length, grade sources, judge model)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, compute
from ragmon.core.wire import event_ref
from ragmon.export import metrics_text
from ragmon.settings import Settings
from ragmon.store import QUERY_KEY_CHARS, Store, query_hash

LABELS = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "faq"}
GRADES = [([3, 0, 1, 0], "what does   the plan cost"), ([0, 0, 1, 0], "reset my password")]


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def _queue(store: Store, i: int) -> None:
    store.client.hset(store.keys.event(event_ref("shop", f"e{i}")), mapping={"s": "queued"})


def _finish(store: Store, i: int, grades: list[int], query: str) -> tuple[bool, dict]:
    event = {
        "event_id": f"e{i}",
        "timestamp": "2026-11-20T10:00:00+00:00",
        "query": query,
        "k": 2,
        "passages": [{"id": f"p{j}", "text": f"text {j}"} for j in range(len(grades))],
        "labels": LABELS,
        "_received_at": time.time(),
    }
    measures = compute(grades, 2)
    result = {
        "measures": measures,
        "labels": LABELS,
        "grade_source": ["judge", "cache", "known", "judge"],
    }
    return store.finish(event, result, grades, judge="gpt-test"), measures


def test_sum_of_squares_is_recorded_once_and_exported(store: Store) -> None:
    observed = []
    for i, (grades, query) in enumerate(GRADES):
        _queue(store, i)
        done, measures = _finish(store, i, grades, query)
        assert done
        observed.append(measures)
        assert not _finish(store, i, grades, query)[0]  # a retried job records nothing again
    bounds = {f"retrieval_{m}": BUCKETS[m] for m in HISTOGRAM_MEASURES}
    for day in (None, "2026-11-20"):
        hists = store.histograms(bounds, day=day)
        for m in ("t", "ndcg", "hit"):
            h = hists[f"retrieval_{m}"][tuple(LABELS.values())]
            values = [o[m] for o in observed]
            assert h.count == 2 and h.sum == pytest.approx(sum(values))
            assert h.sum_squares == pytest.approx(sum(v * v for v in values), rel=1e-15)

    text = metrics_text(store).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    t_values = [o["t"] for o in observed]
    assert any(v < 0 for v in t_values)  # T's sum can fall; its square sum cannot
    (sample,) = families["ragmon_retrieval_t_sum_squares"].samples
    assert sample.name == "ragmon_retrieval_t_sum_squares_total"
    assert sample.labels == LABELS
    assert sample.value == pytest.approx(sum(v * v for v in t_values))
    # with _sum and _count, the variance of T (what the alert rules compute in PromQL)
    t = {s.name: s.value for s in families["ragmon_retrieval_t"].samples if "le" not in s.labels}
    n, total = t["ragmon_retrieval_t_count"], t["ragmon_retrieval_t_sum"]
    var = (sample.value - total * total / n) / (n - 1)
    assert var == pytest.approx(sum((v - total / n) ** 2 for v in t_values) / (n - 1), rel=1e-9)


def test_day_record_carries_query_key_length_sources_and_judge(store: Store) -> None:
    _queue(store, 0)
    _finish(store, 0, *GRADES[0])
    (record,) = store.day_events("2026-11-20")
    assert record["q"] == query_hash("What does the plan cost")[:QUERY_KEY_CHARS]  # normalized
    assert record["ql"] == 5
    assert record["src"] == {"judge": 2, "cache": 1, "known": 1}
    assert record["jm"] == "gpt-test"
    assert record["grades"] == [3, 0] and record["more"] == [1, 0]  # past K: for nDCG's ideal
    assert record["ip"] == 1.0  # every event judged (RAGMON_SAMPLE_RATE=1)
    assert math.isclose(record["m"]["ndcg"], compute(GRADES[0][0], 2)["ndcg"])
