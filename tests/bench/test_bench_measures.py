"""The measures benchmark runs in short mode and prints its figures (no timing assertions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"


def test_benchmark_short_mode_prints_numbers() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_measures", "--short"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for k in (10, 100):  # headline rows: K, M, compute, sum, sorted, two ratios
        row = rf"^\s*{k}\s+{2 * k}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER}x$"
        assert re.search(row, out, re.MULTILINE), out
    for k in (10, 25, 50, 100):  # the cost-against-K table
        assert re.search(rf"^\s*{k}\s+{NUMBER}\s+{NUMBER}$", out, re.MULTILINE), out
    assert re.search(rf"fit: {NUMBER} us \+ {NUMBER} ns x K", out), out
    rate = re.search(rf"at K=10: ({NUMBER}) \((met|MISSED)\)", out)
    assert rate, out
    assert float(rate.group(1).replace(",", "")) > 0
