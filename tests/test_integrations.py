"""Zero-code and hook integrations, end to end: real LangChain and LlamaIndex retrievers in an
app process of their own, reporting to a running ragmon (API and workers as processes).

- OpenInference instrumentors + the OpenTelemetry SDK's OTLP/HTTP exporters (protobuf with
  gzip, and JSON), with no ragmon code in the app;
- ragmon's LangChain callback handler and LlamaIndex event handler, through the SDK.

Every retrieval must arrive with its query, its documents in the app's order, the labels the
mapping gives, and be judged into the quality histograms of /metrics.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragmon.settings import Settings
from ragmon.store import Store
from tests.support.stack import Stack, sample_value
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[1]
MODES = ("otlp-protobuf", "otlp-json", "hooks")
APPS = {"otlp-protobuf": "rag-protobuf", "otlp-json": "rag-json", "hooks": "rag-hooks"}
RETRIEVERS = {"langchain": "bm25", "llamaindex": "vector"}

pytestmark = pytest.mark.slow


@pytest.fixture
def ragmon(redis_url: str) -> Iterator[Stack]:
    # the index label comes from a resource attribute the app sets: a non-default mapping
    stack = Stack(redis_url, workers=1, env={"RAGMON_OTLP_INDEX_ATTRIBUTES": "rag.index"})
    yield stack.start()
    stack.stop()


def run_app(mode: str, url: str, *more: str) -> tuple[list[dict], bool]:
    """The app's own record of its retrievals, and whether it imported ragmon."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.rag_app", mode, url, *more],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return lines[:-1], lines[-1]["imported_ragmon"]


def stored_events(redis_url: str) -> dict[str, dict]:
    """Every event in the store, by id, as the API stored it."""
    store = Store.connect(Settings.from_env({"REDIS_URL": redis_url}, dotenv=None))
    prefix = store.keys.event("")
    refs = [key.decode().removeprefix(prefix) for key in store.client.scan_iter(prefix + "*")]
    events = dict(zip(refs, store.load_events(refs), strict=True))
    store.client.close()
    return {ref.split("|", 1)[1]: ev for ref, ev in events.items() if ev is not None}


@pytest.mark.parametrize("mode", MODES)
def test_every_retrieval_arrives_in_order_labelled_and_measured(
    ragmon: Stack, redis_url: str, mode: str
) -> None:
    retrievals, imported_ragmon = run_app(mode, ragmon.url)
    assert imported_ragmon == (mode == "hooks"), "OTLP apps must run with no ragmon code"
    assert {r["framework"] for r in retrievals} == {"langchain", "llamaindex"}

    app = APPS[mode]
    events = stored_events(redis_url)
    by_query = {ev["query"]: (eid, ev) for eid, ev in events.items()}
    assert len(by_query) == len(events) == len(retrievals), sorted(by_query)
    series: Counter[tuple[str, str]] = Counter()
    for r in retrievals:
        eid, ev = by_query[r["query"]]
        assert [p["text"] for p in ev["passages"]] == r["texts"], r["query"]
        assert ev["k"] == len(r["texts"])
        retriever = RETRIEVERS[r["framework"]]
        assert ev["labels"]["app"] == app and ev["labels"]["index"] == "kb-v1"
        assert ev["labels"]["retriever"] == retriever
        series[(retriever, ev["labels"]["segment"])] += 1
        if mode != "hooks":  # derived from the trace and span ids: a re-export is idempotent
            assert re.fullmatch(r"[0-9a-f]{32}-[0-9a-f]{16}", eid), eid

    results = ragmon.wait_done(list(events), timeout=120, app=app)
    assert all(r["status"] == "done" and r["measures"]["ndcg"] is not None for r in results)
    metrics = ragmon.metrics()
    for (retriever, segment), n in series.items():
        labels = {"app": app, "index": "kb-v1", "retriever": retriever, "segment": segment}
        assert sample_value(metrics, "ragmon_retrieval_ndcg_count", labels) == n
        assert sample_value(metrics, "ragmon_retrieval_t_count", labels) == n
    if mode != "hooks":
        spans = sample_value(metrics, "ragmon_otlp_spans_total", {"outcome": "event"})
        assert spans == len(retrievals)
        # LlamaIndex's nested `_retrieve` and embedding spans, never events
        assert sample_value(metrics, "ragmon_otlp_spans_total", {"outcome": "ignored"}) > 0


@pytest.mark.parametrize("nested", ["skip", "own"])
def test_nested_retrievers_count_once_and_alike_over_otlp_and_the_hooks(
    redis_url: str, nested: str
) -> None:
    """An ensemble, a wrapper and a LlamaIndex retriever: OTLP (the real instrumentors and
    exporter) and the hooks give the same events per retriever, and the same means."""
    stack = Stack(
        redis_url,
        workers=1,
        env={"RAGMON_OTLP_INDEX_ATTRIBUTES": "rag.index", "RAGMON_OTLP_NESTED": nested},
    ).start()
    try:
        apps = {"otlp-protobuf": "rag-protobuf", "hooks": "rag-hooks"}
        asked = {mode: run_app(mode, stack.url, "nested", nested)[0] for mode in apps}
        assert asked["hooks"] == asked["otlp-protobuf"]  # the app ranked alike both times
        events = stored_events(redis_url)
        for app in apps.values():
            ids = [eid for eid, ev in events.items() if ev["labels"]["app"] == app]
            stack.wait_done(ids, timeout=120, app=app)
        metrics = stack.metrics()
    finally:
        stack.stop()

    def per_retriever(app: str) -> dict[str, tuple[float, float]]:
        out = {}
        for ev in events.values():
            if ev["labels"]["app"] == app:
                name = ev["labels"]["retriever"]
                labels = {"app": app, "retriever": name}
                n = sample_value(metrics, "ragmon_retrieval_ndcg_count", labels)
                total = sample_value(metrics, "ragmon_retrieval_ndcg_sum", labels)
                out[name] = (n, round(total / n, 9))
        return out

    otlp, hooks = per_retriever("rag-protobuf"), per_retriever("rag-hooks")
    assert otlp == hooks
    counts = Counter(r["retriever"] for r in asked["hooks"])  # what the app put in its prompts
    if nested == "skip":  # each retrieval once, under the name the app gave it
        assert {name: n for name, (n, _) in otlp.items()} == counts
    else:  # and each inner retriever under its own name (the ensemble's two BM25s share one)
        assert {name: n for name, (n, _) in otlp.items()} == {
            **counts,
            "BM25": 2 * counts["ensemble"] + counts["reranked"],
        }


@pytest.mark.parametrize("mode", ["otlp-simple", "otlp-split"])
def test_nested_retrievers_count_once_when_spans_come_alone_or_in_cut_batches(
    make_api, redis_url: str, mode: str
) -> None:
    """The nested app through the real exporter with `SimpleSpanProcessor` (each span alone,
    inner ones first) and with batches of 2 spans (cut between inner and outer): one event per
    outermost retrieval, as the hook gives (`test_nested_retrievers_count_once_and_alike...`),
    each with the app's ranking and the name the app gave it; the inner spans held, then nested
    (with RAGMON_OTLP_HOLD_S=0 each inner span is an event too)."""
    api = make_api(RAGMON_OTLP_INDEX_ATTRIBUTES="rag.index")
    asked, _ = run_app(mode, api.url, "nested", "skip")
    hold = api.store.keys.hold(f"rag-{mode.removeprefix('otlp-')}", "due")
    deadline = time.monotonic() + scaled(30)
    while api.store.client.zcard(hold):  # every held span decided: no event can follow
        assert time.monotonic() < deadline, "spans still held"
        time.sleep(0.1)
    events = stored_events(redis_url)
    assert sorted((ev["labels"]["retriever"], ev["query"]) for ev in events.values()) == sorted(
        (r["retriever"], r["query"]) for r in asked
    )
    by_call = {(ev["labels"]["retriever"], ev["query"]): ev for ev in events.values()}
    for r in asked:
        ev = by_call[(r["retriever"], r["query"])]
        assert [p["text"] for p in ev["passages"]] == r["texts"], r
    metrics = api.client.get("/metrics").text
    inner = 2 * sum(r["retriever"] == "ensemble" for r in asked) + sum(
        r["retriever"] == "reranked" for r in asked
    )
    nested = sample_value(metrics, "ragmon_otlp_holds_total", {"outcome": "nested"})
    if mode == "otlp-simple":  # every inner span came before its outer one
        assert nested == inner
    else:  # some came with it, some were cut from it
        assert 0 < nested <= inner
