"""Judge drift end to end: the anchor set (the demo's golden file as RAGMON_ANCHOR_FILE) is
re-judged by the OpenAI judge against the fake LLM; a real Prometheus scrapes ragmon with its
own rules. The first run is the baseline; when the fake judge starts over-grading, the next run
fires RagmonJudgeDrift, and `ragmon anchor` says why."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ragmon.demo.build_data import DATA_DIR
from tests.grafana.prometheus_server import PrometheusServer
from tests.support.fake_llm import FakeLLM
from tests.support.stack import Stack

pytestmark = pytest.mark.slow
JUDGE = "gpt-4o-mini/umbrela-1/pointwise"
FIRING = 'ALERTS{alertname="RagmonJudgeDrift", alertstate="firing"}'


@pytest.fixture
def watched(redis_url: str) -> Iterator[tuple[Stack, FakeLLM, PrometheusServer]]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not found: install Debian's `prometheus` package")
    fake = FakeLLM().start()
    env = {
        "RAGMON_JUDGE": "openai",
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-test",
        "RAGMON_JUDGE_MODEL": "gpt-4o-mini",
        "RAGMON_ANCHOR_FILE": str(DATA_DIR / "golden.jsonl"),
        "RAGMON_ANCHOR_SIZE": "120",
    }
    stack = Stack(redis_url, workers=0, env=env).start()
    prom = PrometheusServer(f"127.0.0.1:{stack.port}").start()
    try:
        prom.wait_for('up{job="ragmon"} == 1')
        yield stack, fake, prom
    finally:
        prom.stop()
        stack.stop()
        fake.stop()


def anchor(stack: Stack, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", "anchor", *args],
        env=stack.env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_drift_alert_fires_when_the_judge_starts_over_grading(watched) -> None:
    stack, fake, prom = watched
    first = anchor(stack, "--rejudge")
    assert "No fall beyond the interval" in first
    assert len(fake.chat_requests()) == 120  # every anchor passage, none from the cache
    (kappa,) = prom.wait_for(f'ragmon_judge_anchor_kappa{{judge="{JUDGE}", bound="estimate"}}')
    baseline = float(kappa["value"][1])
    assert baseline > 0.6  # the judge agrees with the golden grades at first
    # a few rule evaluations after the first run: the alert's expression is empty, not firing
    prom.wait_for('count(ragmon_judge_anchor_baseline_kappa{bound="estimate"})')
    assert prom.query(FIRING)["data"]["result"] == []

    fake.over_grade = 1  # the same identity starts grading every passage one higher
    second = anchor(stack, "--rejudge")
    assert len(fake.chat_requests()) == 240  # graded again, not from the cache
    (alert,) = prom.wait_for(FIRING)
    assert alert["metric"]["judge"] == JUDGE
    (now,) = prom.query('ragmon_judge_anchor_kappa{bound="high"}')["data"]["result"]
    assert float(now["value"][1]) < baseline
    (diff,) = prom.query('ragmon_judge_anchor_difference{bound="low"}')["data"]["result"]
    assert float(diff["value"][1]) > 0  # it over-grades, and the interval says so
    assert "It agrees less than it did" in second.replace("\n", " ")
