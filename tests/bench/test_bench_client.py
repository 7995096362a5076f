"""The SDK benchmarks run in short mode so they cannot rot (no timing assertions: CI is noisy)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.bench import bench_app_latency, bench_record

pytestmark = [pytest.mark.bench, pytest.mark.slow]


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


def test_bench_app_latency_short() -> None:
    figures = bench_app_latency.run(short=True)
    states = {s["state"]: s for s in figures["states"]}
    assert set(states) == {"control", "healthy", "slow", "down"}
    for s in states.values():
        assert s["errors"] == {"off": 0, "on": 0}
        assert s["off"]["n"] > 100 and s["on"]["n"] > 100
        assert math.isfinite(s["p99_ratio"])
    assert states["healthy"]["hook_stats"]["sent"] > 0  # the hook really delivered
    assert "sent" not in states["control"]["hook_stats"]  # the control app has no hook
    assert states["down"]["hook_stats"]["sent"] == 0 and states["down"]["hook_stats"]["retries"] > 0
    assert "p99 on/off" in bench_app_latency.report(figures)


def test_bench_commands_have_help() -> None:
    for module in ("tests.bench.bench_record", "tests.bench.bench_app_latency"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0 and "--short" in out.stdout
