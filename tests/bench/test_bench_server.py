"""The server benchmarks run in short mode and print their figures (no timing assertions).

Each one starts real processes (Redis, `ragmon serve`, workers, the fake LLM) and must finish
with every event accepted and judged; the figures must be positive numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUM = r"([\d,]+(?:\.\d+)?)"

pytestmark = pytest.mark.bench


def run(name: str, timeout: float = 120, *extra: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", f"tests.bench.{name}", "--short", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^machine: \d+ CPUs .*", result.stdout, re.M), result.stdout
    return result.stdout


def number(pattern: str, out: str) -> float:
    m = re.search(pattern, out, re.M)
    assert m, f"no match for {pattern!r} in:\n{out}"
    return float(m.group(1).replace(",", ""))


def test_ingest_benchmark_prints_both_servers_and_the_ratio() -> None:
    out = run("bench_ingest")
    row = re.search(rf"^requests/s\s+{NUM}\s+{NUM}\s+{NUM}x$", out, re.M)
    assert row, out
    noop, ragmon, ratio = (float(g.replace(",", "")) for g in row.groups())
    assert noop > 0 and ragmon > 0
    assert ratio == pytest.approx(ragmon / noop, abs=0.01)
    assert number(rf"^p99 ms\s+{NUM}\s+{NUM}$", out) > 0
    assert re.search(rf"^half load: open loop at {NUM} requests/s", out, re.M), out
    assert number(rf"^events/s\s+{NUM}\s+[\d,]+$", out) > 0
    assert re.search(r"^target batch events/s .*\((met|MISSED)\)$", out, re.M), out
    assert number(r"^errors \(non-2xx, socket\): (\d+)$", out) == 0


def test_worker_benchmark_prints_llm_lexical_and_bound() -> None:
    out = run("bench_worker")
    row = re.search(rf"^passages/s \(10%-90% of events\)\s+{NUM}\s+{NUM}\s+{NUM}$", out, re.M)
    assert row, out
    llm, lexical, bound = (float(g.replace(",", "")) for g in row.groups())
    assert llm > 0 and lexical > 0 and bound > 0
    assert number(rf"^CPU ms per passage\s+{NUM}\s+[\d.]+$", out) > 0
    done = re.search(r"^events done\s+(\d+)\s+(\d+)$", out, re.M)
    assert done and done.group(1) == done.group(2), out
    assert re.search(r"^target >= 200 passages/s per process: .*\((met|MISSED)\)$", out, re.M)


def test_freshness_benchmark_prints_percentiles() -> None:
    out = run("bench_freshness")
    assert number(rf"capacity {NUM} events/s", out) > 0
    for label in (r"/metrics \(_count\)", r"GET /v1/retrievals/\{id\}"):
        row = re.search(rf"^{label}\s+{NUM}\s+{NUM}\s+{NUM}\s+(\d+)$", out, re.M)
        assert row, out
        p50, p95, p99, n = (float(g.replace(",", "")) for g in row.groups())
        assert 0 <= p50 <= p95 <= p99 and n > 0


def test_otlp_benchmark_prints_traces_against_the_batch_route() -> None:
    out = run("bench_otlp")
    rows = {}
    for name in (r"/v1/retrievals/batch \(JSON\)", r"/v1/traces \(protobuf\)",
                 r"/v1/traces \(OTLP/JSON\)", r"/v1/traces \(protobuf, \+3 spans\)"):  # fmt: skip
        row = re.search(rf"^{name}\s+{NUM}\s+{NUM}x\s+{NUM}\s+{NUM}x\s+{NUM}\s", out, re.M)
        assert row, out
        rows[name] = [float(g.replace(",", "")) for g in row.groups()]
    base = rows[r"/v1/retrievals/batch \(JSON\)"]
    assert base[1] == 1.0 and base[3] == 1.0
    for events, ratio, cpu, cpu_ratio, _ in rows.values():
        assert events > 0 and cpu > 0
        assert ratio == pytest.approx(events / base[0], rel=0.02, abs=0.01)
        assert cpu_ratio == pytest.approx(cpu / base[2], rel=0.03, abs=0.01)  # printed rounded
    assert number(rf"^server CPU per span, .*: {NUM} us$", out) > 0
    assert number(r"^errors \(non-2xx, socket\): (\d+)$", out) == 0


def test_trickle_benchmark_prints_single_events_against_batched() -> None:
    out = run("bench_trickle", 300, "--latencies", "0.3", "--rates", "10", "--seconds", "3",
              "--batched-events", "16")  # fmt: skip
    rows = {}
    for name in ("batched", "10/s"):
        row = re.search(rf"^{name}\s+(\d+)\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}", out, re.M)
        assert row, out
        rows[name] = [float(g.replace(",", "")) for g in row.groups()]
    events, rate, ratio, cpu, _ = rows["10/s"]
    assert events > 0 and rate > 0 and cpu > 0
    assert ratio == pytest.approx(rate / rows["batched"][1], abs=0.01)
    assert re.search(r"^targets (met|MISSED)", out, re.M), out


def test_metrics_benchmark_prints_the_default_option_and_the_ratio() -> None:
    """The default rendering only: each option is a full quiet/scraped cycle of its own."""
    out = run(
        "bench_metrics", 300, "--seconds", "2", "--interval", "1", "--only", "child-cached"
    )  # --short has 4 s, 2 s
    assert re.search(rf"^max {NUM} events/s single; half load {NUM} events/s$", out, re.M), out
    for option in ("child-cached",):
        phases = re.findall(
            rf"^  {option} round 1 (quiet|scraped) +p99 {NUM} ms .*errors \d+", out, re.M
        )
        assert sorted(p[0] for p in phases) == ["quiet", "scraped"], out
        scrape = re.search(
            rf"^  {option} round 1 scraped .*; scrape {NUM} MB / (\d+) lines", out, re.M
        )
        assert scrape, out
        assert float(scrape.group(1)) > 1 and int(scrape.group(2)) > 50_000  # 500 series
        row = re.search(
            rf"^{option}\s+ingest p99 \(median of 1\) {NUM} ms quiet -> {NUM} ms scraped = {NUM}x;",
            out,
            re.M,
        )
        assert row, out
        quiet, scraped, ratio = (float(g) for g in row.groups())
        # printed rounded: the ratio to 2 decimals, the p99s to 0.1 ms (a 1.0 ms p99 is ±5 %)
        assert ratio == pytest.approx(scraped / quiet, rel=0.05, abs=0.01)
    assert re.search(r"^targets \(child-cached\): .*: (met|NOT met)$", out, re.M), out


def test_explorer_benchmark_prints_each_search_against_the_baseline() -> None:
    out = run("bench_explorer", 300)
    assert number(rf"^Redis memory: {NUM} bytes per event held", out) > 0
    base = number(rf"baseline GET one event: p50 {NUM} ms", out)
    rows = re.findall(rf"^(.+?)\s+{NUM}\s+{NUM}\s+{NUM}\s+(\d+)\s+(ok|MISSED)$", out, re.M)
    assert len(rows) == 8, out
    for name, p50, p95, ratio, _, _ in rows:
        assert 0 < float(p50) <= float(p95), name
        assert float(ratio) > 0
    assert base > 0


def test_tenants_benchmark_prints_the_ingest_ratio_while_another_app_explores() -> None:
    out = run("bench_tenants", 300, "--seconds", "2")  # --short has 5 s phases
    phases = re.findall(rf"^  round 1 (quiet|loaded) +p99 {NUM} ms", out, re.M)
    assert sorted(p[0] for p in phases) == ["loaded", "quiet"], out
    row = re.search(rf"ingest p99 \(median of 1\) {NUM} ms quiet -> {NUM} ms .* = {NUM}x;", out)
    assert row, out
    quiet, loaded, ratio = (float(g) for g in row.groups())
    assert ratio == pytest.approx(loaded / quiet, rel=0.05, abs=0.01)
    assert re.search(r"^target: ratio <= 1.5: (met|NOT met)$", out, re.M), out


def test_neighbours_benchmark_prints_each_latency_and_every_answer_held() -> None:
    out = run("bench_neighbours", 300)
    for name in ("health", "ingest", "export"):
        row = re.search(rf"^appB {name} +n=(\d+)/(\d+) .* p99 {NUM} -> {NUM} ms", out, re.M)
        assert row and int(row.group(1)) > 0 and int(row.group(2)) > 0, out
        control = re.search(rf"^appB {name} .* CPU hogs of the same CPU instead: p99 {NUM} ms "
                            rf"\({NUM}x\)$", out, re.M)  # fmt: skip
        assert control, out
    assert re.search(rf"^server CPU: quiet {NUM} CPUs, appA beside it {NUM}; appA's client {NUM}$",
                     out, re.M), out  # fmt: skip
    assert re.search(r"^appB routes: \d+ rounds .* answers changed: none$", out, re.M), out
    assert re.search(r"^(targets met|TARGETS MISSED)$", out, re.M), out
    assert re.search(r"^longest Lua scripts beside appA \(Redis runs one at a time\): \S", out,
                     re.M), out  # fmt: skip


def test_script_wait_benchmark_prints_each_phase() -> None:
    out = run("bench_script_wait", 120)
    for phase in ("quiet", "one INGEST call", "staged"):
        row = re.search(rf"^{phase} +appB's event p50 {NUM} p99 {NUM} max {NUM} ms \(n=(\d+)\); "
                        rf"longest script {NUM} ms$", out, re.M)  # fmt: skip
        assert row and int(row.group(4)) > 0, out


def test_capacity_benchmark_prints_cpu_per_event_and_the_fleet_for_each_rate(tmp_path) -> None:
    """The model's processes follow from the CPU per event it measured (issue 49)."""
    import json
    import math

    out = run("bench_capacity", 300, "--json", str(tmp_path / "c.json"))
    for phase in ("nothing judged", "every event judged"):
        assert re.search(rf"^CPU per accepted event, {phase}: API {NUM} us, Redis {NUM} us, "
                         rf"workers {NUM} us$", out, re.M), out  # fmt: skip
    figures = json.loads((tmp_path / "c.json").read_text())
    ingest, judged, headroom = figures["ingest"], figures["judged"], figures["headroom"]
    assert ingest["api_s"] > 0 and ingest["redis_s"] > 0
    assert judged["workers_s"] > ingest["workers_s"]  # judging costs the workers
    rows = figures["model"]
    assert len(rows) == 6 and len(re.findall(r"^ +[\d,]+ +\d+% ", out, re.M)) == 6
    for r in rows:
        extra = max(0.0, judged["api_s"] - ingest["api_s"])
        api = r["events_per_s"] * (ingest["api_s"] + r["judged_share"] * extra)
        assert r["api_processes"] == max(1, math.ceil(api / headroom))
    big = [r for r in rows if r["events_per_s"] == 10_000]
    assert big[1]["worker_processes"] >= big[0]["worker_processes"]  # more judged, more workers
