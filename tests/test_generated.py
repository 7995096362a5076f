"""No generated file is stale: `scripts/regenerate.py --check` (dashboards, Grafana alerting and
data source, the Kubernetes PrometheusRule, the demo data, the tables of docs/metrics.md and
docs/measures.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "regenerate.py"


def regenerate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regenerate", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.process
def test_no_generated_file_is_stale() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_generated_file_is_covered() -> None:
    names = {str(p.relative_to(ROOT)) for p in regenerate().rendered()}
    assert {
        "grafana/dashboards/ragmon-quality.json",
        "grafana/dashboards/ragmon-operations.json",
        "grafana/provisioning/alerting/ragmon-alerts.yml",
        "grafana/provisioning/datasources/ragmon.yml",
        "deploy/kubernetes/prometheusrule.yaml",
        "monitor/demo/data/events.jsonl",
        "monitor/demo/data/golden.jsonl",
        "monitor/demo/data/kb.jsonl",
        "monitor/demo/data/queries.jsonl",
        "docs/metrics.md",
        "docs/measures.md",
    } == names


def test_the_check_sees_a_stale_file(tmp_path: Path) -> None:
    module = regenerate()
    page = module.METRICS_DOC.read_text(encoding="utf-8")
    row = next(line for line in page.split("\n") if line.startswith("| `ragmon_grades_total`"))
    old = page.replace(row + "\n", "")
    assert module.with_metrics_table(old) == page  # the dropped row comes back
    copy = tmp_path / "metrics.md"
    copy.write_text(old, encoding="utf-8")
    assert module.stale({copy: page, tmp_path / "missing.json": "{}"}) == [
        copy,
        tmp_path / "missing.json",
    ]
