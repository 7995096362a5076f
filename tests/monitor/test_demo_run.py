"""`ragmon demo --once --report DIR`: the demo's traffic judged end to end, then its report."""

from __future__ import annotations

import pytest

from tests.support.cli import run_ragmon
from tests.support.stack import clean_env

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("long_tmpdir", [False, True], ids=["short-tmpdir", "long-tmpdir"])
def test_demo_once_writes_the_report_of_its_traffic(tmp_path, long_tmpdir):
    # A TMPDIR too long for a unix socket's path (107 bytes) gets the embedded Redis on TCP.
    tmp = tmp_path / ("t" * 120 if long_tmpdir else "tmp")
    tmp.mkdir()
    out = tmp_path / "reports"
    args = ["demo", "--once", "--port", "0", "--days", "8", "--per-day", "10", "--workers", "1"]
    r = run_ragmon([*args, "--report", str(out)], clean_env(TMPDIR=str(tmp)), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ragmon demo: 80/80 events judged" in r.stdout
    assert f"report: {(out / 'report.html').resolve()}" in r.stdout
    md = (out / "report.md").read_text()
    assert "bm25" in md and "## Biggest regressions" in md
    assert list(tmp.iterdir()) == []  # the embedded Redis's directory is removed
