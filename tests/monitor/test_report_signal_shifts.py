"""The weekly report's signals (`ragmon.report.signal_shifts`): per retriever, what the app
sent moved against the baseline, next to the judged measures, or "none moved"."""

from __future__ import annotations

import random

from ragmon.core.signals import SIGNALS, extract
from ragmon.core.window import windows
from ragmon.report.analyze import analyze
from ragmon.report.document import to_markdown
from ragmon.report.gather import Dataset, WindowData
from ragmon.report.render import build
from ragmon.report.signal_shifts import DISTINCT, SHORT
from ragmon.store import Histogram, bucket_index
from tests.monitor.test_report import APP, BAD, GOOD, INDEX, ranked_grades, window_data


def signal_hists(retriever: str, n: int, empty: float, top: float, seed: int) -> dict:
    """The per-day histograms INGEST would hold for `n` events of one series."""
    rng = random.Random(seed)
    acc: dict[str, list] = {}
    for i in range(n):
        m = 0 if rng.random() < empty else 10
        scores = sorted((top - j * 0.5 + rng.gauss(0, 0.3) for j in range(m)), reverse=True)
        sig = extract(f"question {i} about {rng.randrange(50)}", 5, [f"p{j}" for j in range(m)],
                      scores)  # fmt: skip
        for s in SIGNALS:
            v = sig.values[s.key]
            if v is not None:
                h = acc.setdefault(s.key, [[0] * (len(s.buckets) + 1), 0.0, 0])
                h[0][bucket_index(s.buckets, v)] += 1
                h[1] += v
                h[2] += 1
    labels = (APP, INDEX, retriever, "default")
    return {f"signal_{k}": {labels: Histogram(b, t, c)} for k, (b, t, c) in acc.items()}


def with_signals(data: WindowData, *parts: dict) -> WindowData:
    for part in parts:
        for name, series in part.items():
            data.hists.setdefault(name, {}).update(series)
    return data


def test_a_regression_comes_with_the_signals_that_moved_or_none() -> None:
    rng = random.Random(3)
    cur, base = windows(end="2026-11-22", days=7)
    b = window_data(base, [(r, ranked_grades(rng, GOOD)) for r in ("bm25", "dense") * 300])
    c = window_data(cur, [(r, ranked_grades(rng, BAD)) for r in ("bm25", "dense") * 300])
    with_signals(
        b, signal_hists("bm25", 3000, 0.02, 12.0, 1), signal_hists("dense", 3000, 0.02, 0.9, 2)
    )
    with_signals(
        c, signal_hists("bm25", 3000, 0.2, 12.0, 3), signal_hists("dense", 3000, 0.02, 0.9, 4)
    )
    report = analyze(Dataset(c, b, [], True, 35.0))
    bm25, dense = (report.signals[(APP, INDEX, r)] for r in ("bm25", "dense"))
    assert [s.name for s in bm25.moved] == ["Passages sent (M)"]
    assert bm25.empty[1] > 0.15 > 0.05 > bm25.empty[0]
    assert dense.reading() == "none moved"
    assert {r.group[2] for r in report.regressions} == {"bm25", "dense"}
    md = to_markdown(build(report, {}))
    assert "What the app sent, every event (signals): Passages sent (M)" in md
    assert "What the app sent, every event (signals): none moved." in md
    assert "What the app sent: signals of every event" in md


def test_a_retriever_without_signals_in_a_window_is_left_out() -> None:
    cur, base = windows(end="2026-11-22", days=7)
    b = with_signals(WindowData(base), signal_hists("bm25", 100, 0.0, 5.0, 1))
    report = analyze(Dataset(WindowData(cur), b, [], True, 35.0))
    assert report.signals == {}


def test_short_results_and_distinct_queries_are_read_beside_the_other_signals() -> None:
    """bm25 answers short (M < K) for 30 % of its events this week against 5 %, and its
    queries turn from repeats to new ones (1,000 distinct of 3,000 events, then 2,400): both
    move, shares as two bins; dense keeps both (none moved); a window whose HyperLogLogs are
    gone shows no distinct queries and no verdict on them."""
    cur, base = windows(end="2026-11-22", days=7)
    b = with_signals(WindowData(base), signal_hists("bm25", 3000, 0.0, 12.0, 1),
                     signal_hists("dense", 3000, 0.0, 0.9, 2))  # fmt: skip
    c = with_signals(WindowData(cur), signal_hists("bm25", 3000, 0.0, 12.0, 3),
                     signal_hists("dense", 3000, 0.0, 0.9, 4))  # fmt: skip
    for w, bm25_short, bm25_queries in ((b, 150, 1000), (c, 900, 2400)):
        w.counters = {f"signal_short|{APP}|{INDEX}|bm25|default": bm25_short,
                      f"signal_short|{APP}|{INDEX}|dense|default": 150,
                      "judge_cache_hits": 5}  # fmt: skip
        w.distinct_queries = {(APP, INDEX, "bm25"): bm25_queries, (APP, INDEX, "dense"): 1000}
    report = analyze(Dataset(c, b, [], True, 35.0))
    bm25, dense = (report.signals[(APP, INDEX, r)] for r in ("bm25", "dense"))
    assert [s.name for s in bm25.moved] == [SHORT, DISTINCT]
    assert bm25.short == (0.05, 0.3) and bm25.queries == (1000, 2400)
    assert dense.reading() == "none moved" and dense.short == (0.05, 0.05)
    md = to_markdown(build(report, {}))
    row = next(line for line in md.splitlines() if line.startswith(f"| {APP}/{INDEX}/bm25 |"))
    assert "| 5.0% → 30.0% | 1000 → 2400 |" in row  # short results, distinct queries
    assert "Short results (M &lt; K) 5.0% → 30.0% (PSI" in row  # markdown escapes <
    assert f"{DISTINCT} 33.3% → 80.0% (PSI" in row

    c.distinct_queries = {}  # this week's HyperLogLogs no longer kept
    bm25 = analyze(Dataset(c, b, [], True, 35.0)).signals[(APP, INDEX, "bm25")]
    assert bm25.queries is None and DISTINCT not in [s.name for s in bm25.shifts]
