"""The measure table: well formed, and the one place every consumer learns a measure from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragmon.core import catalog
from ragmon.core.measure_table import BY_KEY, MEASURES
from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, MEASURE_KEYS, compute

ROOT = Path(__file__).resolve().parents[2]


def test_rows_are_well_formed() -> None:
    assert len(BY_KEY) == len(MEASURES)  # keys are unique
    for m in MEASURES:
        assert m.better in ("higher", "lower", ""), m.key
        assert m.lo < m.hi, m.key
        assert m.name and m.help.strip() == m.help and "\n" not in m.help, m.key
        assert list(m.buckets) == sorted(set(m.buckets)), m.key
        assert all(m.lo <= b <= m.hi for b in m.buckets), m.key
        assert m.unit in ("none", "percentunit"), m.key
        if m.unit == "percentunit":
            assert (m.lo, m.hi) == (0.0, 1.0), m.key
        if m.panel or m.report:
            assert m.histogram, f"{m.key}: charts and reports read the histograms"


def test_measures_and_catalog_derive_from_the_table() -> None:
    assert tuple(compute([0, 1, 2, 3], 2)) == MEASURE_KEYS == tuple(m.key for m in MEASURES)
    assert tuple(m.key for m in MEASURES if m.buckets) == HISTOGRAM_MEASURES
    assert {m.key: m.buckets for m in MEASURES if m.buckets} == BUCKETS
    quality = {q.name: q for q in catalog.QUALITY}
    for key in HISTOGRAM_MEASURES:
        metric = quality[f"ragmon_retrieval_{key}"]
        assert (metric.help, metric.buckets) == (BY_KEY[key].help, BY_KEY[key].buckets)


# Adds a row to the table before anything reads it, then asks each consumer what it knows.
PROBE = """
import json, sys
from dataclasses import replace
sys.path.insert(0, "scripts")
import ragmon.core.measure_table as table
row = replace(table.BY_KEY["ndcg"], key="zeta", name="Zeta@K", help="Zeta@K: a new measure.",
              panel="Zeta, explained.", better="lower", needs="RAGMON_ZETA=on",
              report=True, calibrate=True, summary=True)
table.MEASURES = (*table.MEASURES, row)
table.BY_KEY = {m.key: m for m in table.MEASURES}
from ragmon.core import catalog, measures; from ragmon.api import schemas
from ragmon.demo import summary
from ragmon.report import compare
from ragmon.calibrate import analysis as calibrate
import grafana_quality
dash = json.dumps(grafana_quality.retrieval_quality())
print(json.dumps({
    "measure_keys": "zeta" in measures.MEASURE_KEYS,
    "buckets": measures.BUCKETS["zeta"] == row.buckets,
    "metric": catalog.BY_NAME["ragmon_retrieval_zeta"].help,
    "sum_squares": "ragmon_retrieval_zeta_sum_squares" in catalog.BY_NAME,
    "readme_table": "ragmon_retrieval_zeta" in catalog.markdown_table(),
    "schema": schemas.RetrievalResult.model_json_schema()["$defs"]["Measures"]["properties"]
    ["zeta"]["description"],
    "report": [compare.NAMES["zeta"], "zeta" in compare.MEASURES, "zeta" in compare.OPTIONAL,
               "zeta" in compare.LOWER_IS_BETTER],
    "calibrate": ("zeta", "Zeta@K") in calibrate.MEASURES,
    "demo": "zeta" in summary.SUMMARY_MEASURES,
    "dashboard": ["Zeta@K (mean)" in dash, "Zeta, explained." in dash],
}))
"""


@pytest.mark.process
def test_a_new_row_reaches_every_consumer() -> None:
    """CONTRIBUTING.md's promise: a measure is one table row (plus its function in measures.py)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert got == {
        "measure_keys": True,
        "buckets": True,
        "metric": "Zeta@K: a new measure.",
        "sum_squares": True,
        "readme_table": True,
        "schema": "Zeta@K: a new measure.",
        "report": ["Zeta@K", True, True, True],
        "calibrate": True,
        "demo": True,
        "dashboard": [True, True],
    }
