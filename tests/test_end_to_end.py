"""The whole path with real processes: `ragmon serve` + two `ragmon worker`s + Redis."""

from __future__ import annotations

import pytest

from ragmon.core.measures import HISTOGRAM_MEASURES, MeasureParams, compute
from tests.support.events import make_event
from tests.support.stack import sample_value

pytestmark = pytest.mark.slow

RETRIEVERS = ("bm25", "dense", "hybrid")


def _events(n: int) -> list[dict]:
    events = []
    for i in range(n):
        k = 3 + i % 4
        n_passages = 2 * k if i % 3 else k + 1  # a third cannot have F_e
        grades = [(i * 7 + j * 3) % 4 for j in range(n_passages)]
        if i % 5 == 0:
            grades = [None] * n_passages  # judged by the (lexical) judge
        labels = {"app": "e2e", "retriever": RETRIEVERS[i % 3], "segment": f"s{i % 2}"}
        events.append(make_event(n=n_passages, k=k, grades=grades, labels=labels, seed=i))
    return events


def test_every_event_done_once_with_right_measures(stack):
    events = _events(90)
    answers = stack.post(events)
    assert all(a["status"] == "queued" for a in answers)
    results = stack.wait_done([e["event_id"] for e in events], timeout=90, app="e2e")
    assert all(r["status"] == "done" for r in results)

    for event, result in zip(events, results, strict=True):
        known = [p.get("grade") for p in event["passages"]]
        if known[0] is None:
            assert set(result["grade_source"][: 2 * event["k"]]) <= {"judge", "cache"}
            continue
        assert result["grades"] == known
        assert set(result["grade_source"]) == {"known"}
        expected = compute(known, event["k"], MeasureParams())
        for m, v in expected.items():
            if m.endswith("_pooled"):  # against the query's pool of every judge's grades so far
                assert result["measures"][m] is None or result["measures"][m] <= 1.0 + 1e-9
                continue
            assert result["measures"][m] == pytest.approx(v), (m, event["event_id"])

    text = stack.metrics()
    assert sample_value(text, "ragmon_events_received_total") == len(events)
    assert sample_value(text, "ragmon_events_labeled_total") == len(events)
    for m in HISTOGRAM_MEASURES:
        observed = sum(r["measures"][m] is not None for r in results)
        if observed:
            assert sample_value(text, f"ragmon_retrieval_{m}_count") == observed, m
        else:  # e.g. UDCG without RAGMON_UTILITY: no series at all
            assert f"ragmon_retrieval_{m}_count{{" not in text, m
    for ret in RETRIEVERS:
        n = sum(e["labels"]["retriever"] == ret for e in events)
        assert sample_value(text, "ragmon_retrieval_ndcg_count", {"retriever": ret}) == n
        total = sum(r["measures"]["ndcg"] for r in results if r["labels"]["retriever"] == ret)
        assert sample_value(text, "ragmon_retrieval_ndcg_sum", {"retriever": ret}) == pytest.approx(
            total
        )

    # sending everything again changes nothing: idempotent on event_id
    again = stack.post(events)
    assert {a["status"] for a in again} == {"done"}
    assert sample_value(stack.metrics(), "ragmon_retrieval_t_count") == len(events)


def test_series_cap_folds_new_label_values_into_other(redis_url):
    from tests.support.stack import Stack

    stack = Stack(redis_url, workers=1, env={"RAGMON_MAX_SERIES": "2"}).start()
    try:
        events = [
            make_event(grades=[3, 0, 1, 0, 2, 0, 0, 0, 0, 0], labels={"app": f"a{i}"}, seed=i)
            for i in range(5)
        ]
        stack.post(events)
        for e in events:
            stack.wait_done([e["event_id"]], app=e["labels"]["app"])
        text = stack.metrics()
        apps = {
            line.split('app="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("ragmon_retrieval_ndcg_count")
        }
        assert len(apps) == 3 and "other" in apps
        assert sample_value(text, "ragmon_retrieval_ndcg_count", {"app": "other"}) == 3
    finally:
        stack.stop()


def test_promtool_check_metrics_passes(stack):
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; scripts/test installs it)")
    events = _events(12)
    stack.post(events)
    stack.wait_done([e["event_id"] for e in events], app="e2e")
    out = subprocess.run(
        [promtool, "check", "metrics"], input=stack.metrics(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_one_apps_key_cannot_take_another_apps_series(redis_url):
    """Over HTTP with real workers: appA's key sends 300 junk `index` values (per-app budget
    100); appB's key then brings three new retrievers, which keep their own names."""
    from tests.support.stack import Stack

    key_a, key_b = "a" * 24, "b" * 24
    env = {"RAGMON_API_KEYS": f"{key_a}:appA,{key_b}:appB", "RAGMON_MAX_SERIES_PER_APP": "100"}
    stack = Stack(redis_url, workers=2, env=env).start()
    try:
        grades = [3, 0, 1, 0, 2, 0, 0, 0, 0, 0]
        junk = [
            make_event(grades=grades, labels={"app": "appA", "index": f"j{i}"}, seed=i)
            for i in range(300)
        ]
        stack.client.headers["authorization"] = f"Bearer {key_a}"
        stack.post(junk)
        stack.wait_done([e["event_id"] for e in junk], timeout=180, app="appA")
        mine = [
            make_event(grades=grades, labels={"app": "appB", "retriever": r}, seed=900 + j)
            for j, r in enumerate(("bm25", "dense", "hybrid"))
        ]
        stack.client.headers["authorization"] = f"Bearer {key_b}"
        stack.post(mine)
        stack.wait_done([e["event_id"] for e in mine], app="appB")
        text = stack.metrics()
        for r in ("bm25", "dense", "hybrid"):
            assert (
                sample_value(text, "ragmon_retrieval_ndcg_count", {"app": "appB", "retriever": r})
                == 1
            )
        assert (
            sample_value(text, "ragmon_retrieval_ndcg_count", {"app": "appA", "index": "other"})
            == 200
        )
        assert sample_value(text, "ragmon_series_folded_total", {"app": "appA"}) == 200
    finally:
        stack.stop()
