"""The weekly report under planned sampling (issue 35): each judged event weighs 1 / its
inclusion probability in the week-over-week comparison (Hajek's means), and the weighted
histograms are read as the events they stand for."""

from __future__ import annotations

import numpy as np
import pytest

from ragmon.core.weighted import hajek
from ragmon.core.window import windows
from ragmon.report.analyze import analyze
from ragmon.report.gather import Dataset
from tests.stats.traffic import APP, INDEX, Stream, window_data

CUR, BASE = windows(end="2026-11-22", days=7)


def test_the_report_compares_hajeks_means() -> None:
    rng = np.random.default_rng(5)
    streams = [Stream("bm25", 2000, 4.0, judged=(0.25, 1.0))]
    base = window_data(rng, BASE, streams, salt=0)
    cur = window_data(rng, CUR, [Stream("bm25", 2000, 4.0, judged=(1.0, 0.25))], salt=1)
    report = analyze(Dataset(cur, base, [], True, 35.0))
    (row,) = [r for r in report.rows if r.measure == "ndcg"]
    ev = cur.events[(APP, INDEX, "bm25")]
    values, probs = np.array(ev.values["ndcg"]), np.array(ev.probs)
    assert len(set(ev.probs)) == 2
    assert row.cur is not None
    assert row.cur.estimate == pytest.approx(hajek(values, probs).estimate, rel=1e-12)
    assert abs(row.cur.estimate - values.mean()) > 0.05  # the plain mean is far off
    assert row.source == "per-event records"  # the weighted counts are the events stood for
    assert not report.regressions  # the rates moved, the quality did not
