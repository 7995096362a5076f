"""An index outage through the real API, in compressed time: the empty-result alert fires within
2 minutes, with RAGMON_SAMPLE_RATE=0.01 and no judged measure.

Each simulated minute, 60 events per series go through `POST /v1/retrievals/batch` and
`/metrics` is scraped once (rendered per scrape); the scrapes become a minute-by-minute series
for promtool, which evaluates the shipped rules on them (deploy/prometheus/rules/). Series shop/
docs: `bm25` answers empty for 2 % of its queries, then from minute `OUTAGE` for 20 % of the
others too; `dense` stays at 2 %, and from minute `OUTAGE` one user retries one empty query 8
times a minute (one empty query: must not fire). No worker runs: nothing is judged (at 1 %
sampling about 1.2 events of bm25 would be in those 2 minutes), so no judged measure can have
moved.
"""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.grafana.queries import promql_test
from tests.support.api_server import ApiServer

pytestmark = pytest.mark.slow

BASELINE_P, OUTAGE_P = 0.02, 0.2  # the share of queries answered empty, and the outage's own
PER_MINUTE = 60
OUTAGE = 20  # the minute the outage starts
MINUTES = OUTAGE + 5
SERIES = {"bm25": True, "dense": False}  # retriever -> has the outage (else: the retries)
RETRIES = 8
LABELS = 'app="shop",index="docs",retriever="{}",segment="default"'


def _event(
    rng: random.Random, retriever: str, minute: int, i: int, empty: bool, query: str = ""
) -> dict:
    passages = [] if empty else [
        {"id": f"p{j}", "text": f"passage {j} about topic {i % 40}", "score": 20.0 - j}
        for j in range(10)
    ]  # fmt: skip
    return {
        "event_id": f"{retriever}-{minute}-{i}",
        "query": query or f"question {rng.randrange(500)} about topic {i % 40}",
        "k": 5,
        "passages": passages,
        "labels": {"app": "shop", "index": "docs", "retriever": retriever},
    }


def _sample(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{name}{{{re.escape(labels)}}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _scrapes(api: ApiServer) -> dict[str, dict[str, list[float]]]:
    """Per retriever, the scraped events and empty results after each simulated minute."""
    rng = random.Random(38)
    out = {r: {"count": [], "empty": [], "queries": []} for r in SERIES}
    with httpx.Client(base_url=api.url, timeout=30) as client:
        for minute in range(MINUTES + 1):
            for retriever, outage in SERIES.items():
                p = (
                    BASELINE_P + (1 - BASELINE_P) * OUTAGE_P
                    if outage and minute > OUTAGE
                    else BASELINE_P
                )
                events = [_event(rng, retriever, minute, i, rng.random() < p)
                          for i in range(PER_MINUTE)] if minute else []  # fmt: skip
                if not outage and minute > OUTAGE:
                    events += [_event(rng, retriever, minute, PER_MINUTE + i, True, "where is it")
                               for i in range(RETRIES)]  # fmt: skip
                if events:
                    r = client.post("/v1/retrievals/batch", json={"events": events})
                    assert r.status_code == 202, r.text
            text = client.get("/metrics").text
            for retriever in SERIES:
                labels = LABELS.format(retriever)
                out[retriever]["count"].append(_sample(text, "ragmon_signal_results_count", labels))
                out[retriever]["empty"].append(
                    _sample(text, "ragmon_signal_results_bucket", labels + ',le="0.0"')
                )
                out[retriever]["queries"].append(
                    _sample(text, "ragmon_signal_empty_queries_total", labels)
                )
            assert "ragmon_retrieval_ndcg_count{" not in text  # nothing judged
    return out


def test_an_index_outage_fires_the_empty_result_alert_within_two_minutes(
    make_api: Callable[..., ApiServer], tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found: install Debian's `prometheus` package")
    api = make_api(RAGMON_SAMPLE_RATE="0.01", RAGMON_METRICS_REFRESH_S="0")
    scraped = _scrapes(api)
    assert scraped["bm25"]["count"][-1] == PER_MINUTE * MINUTES  # every event, sampled out too
    inputs = []
    for retriever, series in scraped.items():
        labels = LABELS.format(retriever) + ',job="ragmon",instance="api:8000"'
        inputs += [
            {"series": f"ragmon_signal_results_count{{{labels}}}",
             "values": " ".join(f"{v:g}" for v in series["count"])},
            {"series": f'ragmon_signal_results_bucket{{{labels},le="0.0"}}',
             "values": " ".join(f"{v:g}" for v in series["empty"])},
            {"series": f"ragmon_signal_empty_queries_total{{{labels}}}",
             "values": " ".join(f"{v:g}" for v in series["queries"])},
        ]  # fmt: skip
    dense = scraped["dense"]
    retried = dense["empty"][-1] - dense["empty"][OUTAGE]
    assert retried >= RETRIES * (MINUTES - OUTAGE)  # the retries are empty results
    assert dense["queries"][-1] - dense["queries"][OUTAGE] < retried - RETRIES  # not queries
    firing = (
        f'ALERTS{{alertname="RagmonEmptyResultsHigh",alertstate="firing",'
        f'{LABELS.format("bm25")},severity="critical"}}'
    )
    query = 'ALERTS{alertname="RagmonEmptyResultsHigh",alertstate="firing"}'
    tests = [{"expr": query, "eval_time": f"{m}m", "exp_samples": []} for m in range(OUTAGE + 1)]
    tests.append({"expr": query, "eval_time": f"{OUTAGE + 2}m",
                  "exp_samples": [{"labels": firing, "value": 1}]})  # fmt: skip
    r = promql_test(promtool, tmp_path / "outage.yml", inputs, tests)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
