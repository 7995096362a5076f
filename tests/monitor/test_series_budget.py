"""The series budget on a real Redis: one app's junk label values fill only its own share, the
folded events are counted per app, idle series are freed, and `ragmon series` lists and frees."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragmon.core.measures import compute
from ragmon.core.wire import event_ref
from ragmon.export import metrics_text
from ragmon.settings import Settings
from ragmon.store import Store

FLEET, PER_APP = 50, 10  # the budgets, small: each series is an event through the store
JUNK = 6 * PER_APP  # more than the fleet's budget, six times appA's


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(dataclasses.replace(settings, max_series=FLEET, max_series_per_app=PER_APP))
    yield s
    s.client.close()


def record(store: Store, i: int, labels: dict[str, str]) -> bool:
    ref = event_ref(labels["app"], f"e{i}")
    store.client.hset(store.keys.event(ref), mapping={"s": "queued"})
    event = {
        "event_id": f"e{i}",
        "timestamp": "2026-11-20T10:00:00+00:00",
        "query": "q",
        "k": 2,
        "passages": [{"id": "p0", "text": "a"}, {"id": "p1", "text": "b"}],
        "labels": labels,
        "_received_at": time.time(),
    }
    result = {"measures": compute([3, 0], 2), "labels": labels}
    return store.finish(event, result, [3, 0])


def labels(app: str, index: str, retriever: str = "bm25") -> dict[str, str]:
    return {"app": app, "index": index, "retriever": retriever, "segment": "all"}


def ndcg_apps(store: Store) -> dict[tuple[str, str], float]:
    """(app, index) → ndcg count on /metrics, summed over retrievers and segments."""
    text = metrics_text(store).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "ragmon_retrieval_ndcg":
            for s in fam.samples:
                if s.name.endswith("_count"):
                    key = (s.labels["app"], s.labels["index"])
                    out[key] = out.get(key, 0) + s.value
    return out


def folded(store: Store) -> dict[str, float]:
    text = metrics_text(store).decode()
    for fam in text_string_to_metric_families(text):
        if fam.name == "ragmon_series_folded":
            return {s.labels["app"]: s.value for s in fam.samples if s.name.endswith("_total")}
    raise AssertionError("ragmon_series_folded is not exported")


def test_one_apps_junk_labels_never_take_another_apps_series(store: Store) -> None:
    for i in range(JUNK):
        assert record(store, i, labels("appA", f"junk-{i}"))
    for i, ret in enumerate(("bm25", "dense", "hybrid")):
        assert record(store, JUNK + i, labels("appB", "kb", ret))

    series = ndcg_apps(store)
    assert series[("appB", "kb")] == 3  # appB's three new retrievers under their own names
    text = metrics_text(store).decode()
    for ret in ("bm25", "dense", "hybrid"):
        assert f'app="appB",index="kb",retriever="{ret}"' in text
    assert sum(1 for app, index in series if app == "appA" and index != "other") == PER_APP
    assert series[("appA", "other")] == JUNK - PER_APP  # the rest of appA's, in appA's own other
    assert folded(store) == {"appA": JUNK - PER_APP}
    assert len(store.series.rows()) == PER_APP + 3


def test_the_fleet_budget_folds_an_app_without_series_into_other(settings: Settings) -> None:
    store = Store.connect(dataclasses.replace(settings, max_series=2, max_series_per_app=5))
    for i in range(4):
        record(store, i, labels(f"a{i}", "kb"))
    assert ndcg_apps(store) == {("a0", "kb"): 1, ("a1", "kb"): 1, ("other", "other"): 2}
    assert folded(store) == {"other": 2}


def test_idle_series_are_freed_with_their_histograms(store: Store) -> None:
    for i in range(PER_APP):
        record(store, i, labels("appA", f"old-{i}"))
    record(store, PER_APP, labels("appA", "late"))  # past appA's budget
    assert ("appA", "late") not in ndcg_apps(store)
    later = time.time() + 31 * 86400
    store.client.zadd(store.keys.series, {"appA|old-0|bm25|all": later})  # seen recently
    assert store.series.free_idle(later) == PER_APP - 1
    assert [r.name for r in store.series.rows()] == ["appA|old-0|bm25|all"]
    assert set(ndcg_apps(store)) == {("appA", "old-0"), ("appA", "other")}
    record(store, PER_APP + 1, labels("appA", "late"))  # the freed slots take new series again
    assert ndcg_apps(store)[("appA", "late")] == 1


def test_finish_sweeps_idle_series_once_per_hour(store: Store) -> None:
    record(store, 0, labels("appA", "gone"))
    store.client.zadd(store.keys.series, {"appA|gone|bm25|all": time.time() - 40 * 86400})
    store.client.delete(store.keys.series_sweep)  # the first finish already swept
    record(store, 1, labels("appB", "kb"))
    assert [r.name for r in store.series.rows()] == ["appB|kb|bm25|all"]
    assert store.client.ttl(store.keys.series_sweep) > 3000


@pytest.mark.process
def test_series_command_lists_and_frees(store: Store, settings: Settings) -> None:
    record(store, 0, labels("appA", "kb"))
    record(store, 1, labels("appB", "kb"))
    env = {**os.environ, "REDIS_URL": settings.redis_url or ""}

    def ragmon(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "ragmon.cli", "series", *args],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return proc.stdout

    listed = ragmon()
    assert "appA|kb|bm25|all" in listed and "appB|kb|bm25|all" in listed
    assert "2 series shown" in listed
    assert "freed 1 series" in ragmon("--app", "appA", "--free")
    assert [r.name for r in store.series.rows()] == ["appB|kb|bm25|all"]
    assert "0 series shown" in ragmon("--idle-days", "1")
