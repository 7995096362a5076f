"""Every dashboard panel and alert query, run by a real Prometheus scraping a real ragmon.

The fixture starts the API and two workers (`tests.support.stack.Stack`) with the OpenAI
judge pointed at the fake LLM server (so judge calls, tokens, spend, latency and a few
refusals, i.e. failed events, are real), Debian's `prometheus` scraping it every second with
ragmon's own prometheus.yml and rules, and feeds it demo events plus one invalid request.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from ragmon.demo import traffic
from tests.grafana.prometheus_server import PrometheusServer
from tests.grafana.queries import (
    RULE_FILES,
    alert_queries,
    metric_names,
    panel_queries,
    prometheus_rules,
    recorded_names,
    variable_queries,
)
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.stack import RedisServer, Stack

pytestmark = pytest.mark.slow

# Grafana's variables as the test sets them: all series, windows the short test run fills.
GRAFANA_VARS = {
    "$__rate_interval": "2m",
    "$__interval": "15s",
    "$__range": "5m",
    "$window": "5m",
    "$app": ".*",
    "$index": ".*",
    "$retriever": ".*",
    "$segment": ".*",
    "$job": "ragmon",
}
# The week-over-week queries read a week ago; the test has seconds of data, so their data
# check runs them again with this offset (their own text must still parse and run).
SHORT_OFFSET = "10s"
N_EVENTS = 90


@dataclass
class Fed:
    prom: PrometheusServer
    stack: Stack
    results: list[dict]
    metrics: str


def grafana_expr(expr: str) -> str:
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def demo_events(n: int, seed: int) -> list[dict]:
    texts = {p["id"]: p["text"] for p in traffic.load_kb()}
    queries = traffic.load_queries()
    rng = random.Random(seed)
    return [
        traffic.make_event(
            rng.choice(queries), texts, traffic.RETRIEVERS[i % 3], seed=f"{seed}:{i}",
            with_grades=i % 4 == 0,
        )
        for i in range(n)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def fed(redis_server: RedisServer) -> Iterator[Fed]:
    if shutil.which("prometheus") is None:
        pytest.skip(
            "prometheus not found: install Debian's `prometheus` package (scripts/test does)"
        )
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    # Utility probes of "How ..." questions get no logprobs: events without UDCG, counted.
    fake = FakeLLM(logprobs=lambda body: "\nHow " not in _user(body)).start()
    # retried; refused passages stay unjudged, and events with every passage refused fail
    fake.script(*[Reply.error(500)] * 3)  # retried
    env = {
        "RAGMON_JUDGE": "openai",
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-test",
        "RAGMON_JUDGE_MAX_RETRIES": "1",
        "RAGMON_SAMPLE_RATE": "0.9",
        "RAGMON_UTILITY": "on",  # the UDCG panels and the utility probe's counters
        "RAGMON_APP_DAILY_BUDGET_USD": "1000",  # each app's own budget, on the spend panel
    }
    stack = Stack(redis_server.url, workers=2, env=env).start()
    prom = PrometheusServer(f"127.0.0.1:{stack.port}").start()
    try:
        prom.wait_for('up{job="ragmon"} == 1')
        answers = []
        for wave in range(2):  # two waves a few seconds apart: rates see an increase
            events = demo_events(N_EVENTS // 2, seed=wave)
            # one retrieval found nothing, asked twice (the empty-query counter's panels)
            events += [{**events[0], "event_id": f"empty-{wave}", "passages": []}]
            answers += stack.post(events)
            time.sleep(3)
        assert stack.client.post("/v1/retrievals", json={"query": "no k"}).status_code == 422
        queued = [a["event_id"] for a in answers if a["status"] == "queued"]
        results = stack.wait_done(queued, timeout=120, app=traffic.LABELS["app"])
        results.append(failed_event(stack, fake))
        done = sum(r["status"] == "done" for r in results)
        assert done >= N_EVENTS // 2
        prom.wait_for(
            "sum(ragmon_events_labeled_total)", lambda r: r and float(r[0]["value"][1]) == done
        )
        prom.wait_for("sum(ragmon_events_failed_total) > 0")
        results += grade_like_people(stack)
        anchor = subprocess.run(
            [sys.executable, "-m", "ragmon.cli", "anchor", "--rejudge"],
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert anchor.returncode == 0, anchor.stderr  # the anchor set: people's grades
        prom.wait_for('ragmon_judge_anchor_baseline_kappa{bound="estimate"}')
        prom.wait_for('ragmon_judge_agreement_quadratic_kappa{bound="low"}')
        prom.wait_for('ragmon_judge_agreement_unweighted_kappa{bound="low"}')
        prom.wait_for('ragmon_estimate_corrected{measure="ndcg", bound="low"}')
        prom.wait_for("ragmon:retrieval_ndcg:mean1h")
        time.sleep(12)  # > SHORT_OFFSET of data after the last change
        yield Fed(prom, stack, results, stack.metrics())
    finally:
        prom.stop()
        stack.stop()
        fake.stop()
        client.flushall()
        client.close()


def grade_like_people(stack: Stack) -> list[dict]:
    """People grade every passage of 12 judged events of one series with distinct queries (the
    agreement and corrected-estimate panels need 10 events): the judge's grade, one higher on
    odd ranks. Returns the results of the events it sent."""
    texts = {p["id"]: p["text"] for p in traffic.load_kb()}
    segment = traffic.load_queries()[0]["segment"]
    queries = [q for q in traffic.load_queries() if q["segment"] == segment]
    events = [traffic.make_event(q, texts, traffic.RETRIEVERS[0], seed=f"graded:{i}")
              for i, q in enumerate(queries)]  # fmt: skip
    queued = [a["event_id"] for a in stack.post(events) if a["status"] == "queued"]
    results = stack.wait_done(queued, timeout=120, app=traffic.LABELS["app"])
    whole = [
        r
        for r in results
        if r["status"] == "done" and all(p["grade"] is not None for p in r["passages"])
    ]
    assert len(whole) >= 12, f"{len(whole)} of {len(queries)} events judged whole"
    graded = whole[:12]
    body = [
        {"app": r["labels"]["app"], "event_id": r["event_id"], "passage_id": p["id"],
         "reviewer": "ann", "grade": min(3, p["grade"] + p["rank"] % 2)}
        for r in graded for p in r["passages"]
    ]  # fmt: skip
    answer = stack.client.post("/v1/grades", json={"grades": body})
    assert answer.status_code == 200, answer.text
    return results


def failed_event(stack: Stack, fake: FakeLLM) -> dict:
    """One event of one passage, judged alone once the others are done, its grading refused:
    failed for good whatever the timing (refusals scripted over concurrent calls leave most
    events some grades, so whether any failed was luck: 7 of 11 fixture runs had none)."""
    texts = {p["id"]: p["text"] for p in traffic.load_kb()}
    query = traffic.load_queries()[0]
    fake.script(*[Reply.refusal()] * 4)  # its grading call and its utility probe, in any order
    for seed in range(50):  # the first event id the sampler keeps
        event = traffic.make_event(query, texts, traffic.RETRIEVERS[0], seed=f"lone:{seed}")
        first = event["passages"][0]  # a text no cache holds: the judge is asked
        event = {**event, "k": 1, "passages": [{**first, "text": f"{first['text']} ({seed})"}]}
        (answer,) = stack.post([event])
        if answer["status"] == "queued":
            (result,) = stack.wait_done([answer["event_id"]], app=traffic.LABELS["app"])
            assert result["status"] == "failed", result
            return result
    raise AssertionError("the sampler kept none of 50 events")


def _user(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def run_ok(fed: Fed, expr: str) -> list[dict]:
    body = fed.prom.query(expr)
    assert body["status"] == "success", f"{expr}\n-> {body.get('errorType')}: {body.get('error')}"
    return body["data"]["result"]


@pytest.mark.parametrize("query", panel_queries(), ids=str)
def test_panel_query_parses_and_returns_data(fed: Fed, query) -> None:
    expr = grafana_expr(query.expr)
    result = run_ok(fed, expr)
    if "offset 1w" in expr:
        result = run_ok(fed, expr.replace("offset 1w", f"offset {SHORT_OFFSET}"))
    assert result, f"no data for {query}:\n{expr}"


@pytest.mark.parametrize("query", alert_queries(), ids=str)
def test_alert_and_recording_expression_runs(fed: Fed, query) -> None:
    """Parses and evaluates; an alert that is not firing legitimately returns nothing."""
    run_ok(fed, query.expr)


@pytest.mark.parametrize("name", sorted(recorded_names()))
def test_recording_rule_has_data(fed: Fed, name: str) -> None:
    assert fed.prom.wait_for(name, timeout=20)


def test_prometheus_evaluates_every_rule_without_error(fed: Fed) -> None:
    """Prometheus itself runs the rules: no many-to-many matches or other runtime errors."""
    deadline = time.monotonic() + 20
    while True:
        rules = [r for g in fed.prom.api("rules")["data"]["groups"] for r in g["rules"]]
        if all(r["health"] != "unknown" for r in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(rules) == len(prometheus_rules())  # every recording and alerting rule
    bad = {r["name"]: (r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"}
    assert not bad


def test_variables_offer_the_label_values_sent(fed: Fed) -> None:
    for query in variable_queries():
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.expr)
        assert m, query
        series, label = grafana_expr(m.group(1)), m.group(2)
        body = fed.prom.api(f"label/{label}/values", **{"match[]": series})
        assert body["status"] == "success", body
        expected = {
            "app": {traffic.LABELS["app"]},
            "index": {traffic.LABELS["index"]},
            "retriever": set(traffic.RETRIEVERS),
            "job": {"ragmon"},
        }.get(label)
        values = set(body["data"])
        assert values, f"{query}: no values"
        if expected:
            assert values == expected, query


def test_every_metric_name_used_is_in_ragmon_metrics(fed: Fed) -> None:
    exposed = set(re.findall(r"^([a-zA-Z_:][\w:]*)[{ ]", fed.metrics, re.M))
    used = set()
    for q in panel_queries() + alert_queries() + variable_queries():
        used |= metric_names(q.expr)
    missing = used - exposed - recorded_names() - {"up"}
    assert not missing, f"used by dashboards/rules but not in /metrics: {sorted(missing)}"


def mean_panel_expr() -> str:
    (query,) = [q for q in panel_queries() if q.source.endswith(" nDCG@K (range mean) [A]")]
    expr = grafana_expr(query.expr)
    assert "ragmon_retrieval_ndcg_sum" in expr and "[5m]" in expr
    return expr


def test_the_exported_mean_matches_the_api_results(fed: Fed) -> None:
    """Every judged event is in the scraped nDCG@K histogram exactly once, with the value the
    API answers for it.

    The panel's rate() over a window sees only increases between two scrapes of a series, so
    events recorded before a new series' first scrape are outside it (by timing: under load
    0.655 against 0.681 once); how the panel averages is checked on fixed series below.
    """
    done = [r for r in fed.results if r["status"] == "done"]
    want = sum(r["measures"]["ndcg"] for r in done) / len(done)
    sel = grafana_expr('{app=~"$app", index=~"$index", retriever=~"$retriever"}')
    (count,) = run_ok(fed, f"sum(ragmon_retrieval_ndcg_count{sel})")
    (mean,) = run_ok(
        fed, f"sum(ragmon_retrieval_ndcg_sum{sel}) / sum(ragmon_retrieval_ndcg_count{sel})"
    )
    assert float(count["value"][1]) == len(done)
    assert float(mean["value"][1]) == pytest.approx(want, rel=1e-9)


def promtool_passes(promtool: str, tmp_path: Path, spec: dict) -> None:
    """`promtool test rules` on a unit-test file written from `spec`, which must pass."""
    path = tmp_path / "promtool_test.yml"
    path.write_text(json.dumps(spec))
    r = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_mean_panel_weights_series_by_their_events(promtool: str, tmp_path: Path) -> None:
    """On fixed series (promtool), the overview's mean is total value over total events in its
    window: 1 event/min at 0.5 and 2 events/min at 0.9 give 0.7667, not the 0.7 of a mean of
    series means, and nothing from before the window."""
    labels = 'app="a", index="i", segment="s", retriever="{}"'
    series = [  # before the window: 100 events at 0 in each series
        (f"ragmon_retrieval_ndcg_sum{{{labels.format('r1')}}}", "0x10 0+0.5x20"),
        (f"ragmon_retrieval_ndcg_count{{{labels.format('r1')}}}", "0+10x10 100+1x20"),
        (f"ragmon_retrieval_ndcg_sum{{{labels.format('r2')}}}", "0x10 0+1.8x20"),
        (f"ragmon_retrieval_ndcg_count{{{labels.format('r2')}}}", "0+10x10 100+2x20"),
    ]
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in series],
            "promql_expr_test": [{
                "expr": f"abs(({mean_panel_expr()}) - 2.3 / 3) < bool 1e-9",
                "eval_time": "25m",
                "exp_samples": [{"labels": "{}", "value": 1}],
            }],
        }],
    }  # fmt: skip
    promtool_passes(promtool, tmp_path, spec)


@pytest.mark.parametrize("fixed_rate", [None, 0.5], ids=["planned", "fixed"])
def test_the_coverage_rule_and_panel_say_what_share_the_means_cover(
    promtool: str, tmp_path: Path, fixed_rate: float | None
) -> None:
    """On fixed series (promtool): 10 events a minute, of which the judged ones stand for all
    at first, then for none (the budget ran out at 30m). Planned, each judged event weighs
    1 / its probability (1 here); fixed at 0.5, events weigh 1 and half of them are judged:
    both read 1 while everything chosen is judged, and 0.5 over the hour at 60m."""
    (query,) = [q for q in panel_queries() if q.source.endswith(" Events the means cover [A]")]
    panel = grafana_expr(query.expr).replace("[5m]", "[1h]")
    per_min = 10 * (fixed_rate or 1.0)
    where = '{app="a", index="i", retriever="r", segment="s"}'
    series = [
        (f"ragmon_signal_results_count{where}", "0+10x60"),
        (f"ragmon_retrieval_ndcg_count{where}", f"0+{per_min:g}x30 {30 * per_min:g}x30"),
    ]
    if fixed_rate is not None:
        series.append(('ragmon_sampling_fixed_rate{job="ragmon"}', f"{fixed_rate}x60"))
    rule = f"ragmon:retrieval_coverage:share1d{where}"
    spec = {
        "rule_files": [str(f) for f in RULE_FILES if f.name == "ragmon-recording.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in series],
            "promql_expr_test": [
                {"expr": f"round({rule}, 0.001)", "eval_time": "30m",
                 "exp_samples": [{"labels": rule.replace("ragmon:retrieval_coverage:share1d", ""),
                                  "value": 1}]},
                {"expr": f"round({rule}, 0.001)", "eval_time": "60m",
                 "exp_samples": [{"labels": rule.replace("ragmon:retrieval_coverage:share1d", ""),
                                  "value": 0.5}]},
                {"expr": f"round({panel}, 0.001)", "eval_time": "60m",
                 "exp_samples": [{"labels": "{}", "value": 0.5}]},
            ],
        }],
    }  # fmt: skip
    promtool_passes(promtool, tmp_path, spec)
