"""The SDK benchmarks run in short mode so they cannot rot (no timing assertions: CI is noisy);
their statistics and CPU placement are unit tests."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from tests.bench import bench_app_latency, bench_gil, bench_record
from tests.bench.hook_apps import Shape
from tests.bench.stats import median_interval, overlaps, quantile


@pytest.mark.bench
@pytest.mark.slow
@pytest.mark.parametrize("sidecar", ["healthy", "down"])
def test_bench_record_short(sidecar: str) -> None:
    figures = bench_record.run(short=True, sidecar=sidecar)
    for name in ("put", "put_built", "record"):
        assert (
            figures[name]["median_ns"] > 0 and figures[name]["p99_ns"] >= figures[name]["median_ns"]
        )
    stats = figures["monitor_stats"]
    assert stats["errors"] == 0 and stats["recorded"] > 0
    if sidecar == "healthy":
        assert stats["sent"] == stats["recorded"]
    else:
        assert stats["sent"] == 0 and stats["dropped_at_close"] > 0
    assert "record / bare put" in bench_record.report(figures)


def test_bench_app_latency_places_the_sidecar_on_a_cpu_of_its_own_where_there_is_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert bench_app_latency.placement("auto") == {
        "apps": {3},
        "sidecar": {2},
        "generator": {0, 1},
    }
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert bench_app_latency.placement("auto")["sidecar"] == {1}
    assert bench_app_latency.placement("auto", "generator")["sidecar"] == {0}
    assert bench_app_latency.placement("none") == dict.fromkeys(("apps", "sidecar", "generator"))


@pytest.mark.bench
@pytest.mark.slow
def test_bench_app_latency_short() -> None:
    cpus = os.sched_getaffinity(0)
    figures = bench_app_latency.run(
        short=True, rate=100, rounds=2, seconds=0.5, shape=Shape(300, 1.0)
    )
    assert os.sched_getaffinity(0) == cpus  # the generator's pinning is undone
    assert figures["app"] == {"scan": 300, "wait_ms": 1.0}
    assert figures["sidecar_priority"] == "normal"  # an idle-class sidecar starves beside busy CPUs
    assert "scores 300 passages per request after awaiting 1 ms" in bench_app_latency.report(
        figures
    )
    states = {s["state"]: s for s in figures["states"]}
    assert set(states) == set(bench_app_latency.STATES)
    for s in states.values():
        assert s["errors"] == {"off": 0, "off2": 0, "on": 0}
        assert len(s["rounds"]["on"]) == 2 and all(r["n"] == 50 for r in s["rounds"]["on"])
        assert math.isfinite(s["p99_ratio"]["median"]) and s["p99_ratio"]["n"] == 2
        assert s["sdk_threads_us_per_event"]["low"] > 0  # the hook worked, seen in its turns
        assert set(s["gc"]) == set(bench_app_latency.VARIANTS)  # each app's collections, read
    for name in ("healthy", "stub"):  # the hook really delivered, and lost nothing
        h = states[name]["hook_stats"]
        assert h["sent"] > 0 and h["recorded"] == h["sent"] + h["buffered"] + h["in_flight"], h
    assert states["down"]["hook_stats"]["sent"] == 0 and states["down"]["hook_stats"]["retries"] > 0
    report = bench_app_latency.report(figures)
    assert "p99 on/off" in report and report.count("GC off/off'/on") == len(states)
    assert report.count("of the app's CPU per request") == len(states)


@pytest.mark.bench
@pytest.mark.slow
def test_bench_gil_short() -> None:
    figures = bench_gil.run(short=True)
    stats = figures["monitor_stats"]
    assert stats["sent"] == stats["recorded"] > 0 and stats["errors"] == 0
    assert figures["on"]["gaps"] > 0 and figures["sdk_cpu_us_per_event"]["median"] > 0
    assert "longest hold" in bench_gil.report(figures)
    assert {t.split()[0] for t in figures["on"]["round_max_hold_thread"]} <= {"encoder", "sender"}
    on = figures["on"]
    assert on["felt_hold_max_us"] <= on["work_hold_max_us"] <= on["hold_max_us"]
    assert len(on["round_blocked_max_us"]) == figures["rounds"]  # the app's side, per round


@pytest.mark.parametrize(
    ("values", "low", "high"),
    [(list(range(10)), 1, 8), (list(range(12)), 2, 9), (list(range(20)), 5, 14), ([3.0], 3, 3)],
)
def test_median_interval_uses_binomial_order_statistics(values, low, high) -> None:
    got = median_interval(values)
    assert (got["low"], got["high"]) == (low, high)
    assert got["confidence"] >= 0.95 or len(values) < 6


def test_quantile_is_an_order_statistic() -> None:
    values = [float(v) for v in range(200, 0, -1)]  # 1..200, unsorted
    assert quantile(values, 0.99) == 199.0 and quantile(values, 0.5) == 101.0
    assert quantile(values, 1.0) == 200.0 and math.isnan(quantile([], 0.99))


def test_overlaps() -> None:
    a, b, c = median_interval([1, 2, 3]), median_interval([3, 4, 5]), median_interval([4, 5])
    assert overlaps(a, b) and not overlaps(a, c)


@pytest.mark.process
def test_bench_commands_have_help() -> None:
    for module in ("bench_record", "bench_app_latency", "bench_gil", "bench_instructions"):
        out = subprocess.run(
            [sys.executable, "-m", f"tests.bench.{module}", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0 and "--short" in out.stdout


@pytest.mark.bench
@pytest.mark.slow
def test_bench_instructions_short() -> None:
    import shutil

    from tests.bench import bench_instructions

    if not shutil.which("valgrind"):
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    figures = bench_instructions.run(short=True)
    assert figures["dumps"] > 0 and figures["sdk"] > 0 and figures["sdk_stdlib"] > figures["sdk"]
    assert "instructions per event" in bench_instructions.report(figures).lower()
