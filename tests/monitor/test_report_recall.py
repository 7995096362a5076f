"""The report reads a recall loss from the pooled measures (issue 34 item 4): a retriever that
stops finding the relevant passages of some questions keeps its per-event nDCG@K (its top K is
as good as its own candidates allow) while nDCG@K against the pooled ideal falls."""

from __future__ import annotations

import random

from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, MeasureParams, compute
from ragmon.core.window import Window, windows
from ragmon.report.analyze import analyze
from ragmon.report.gather import Dataset, WindowData
from ragmon.store import Histogram, bucket_index

POOL = (3, 2, 2, 1, 1, 1) + (0,) * 14  # a question's candidates; the pool has seen them all
K = 5
APP, INDEX = "shop", "kb"


def week(window: Window, rng: random.Random, lost: float) -> WindowData:
    """300 events of 100 questions; a share `lost` of the questions retrieve no relevant
    passage (the retriever ranks what is left of the candidates)."""
    acc: dict[str, dict[tuple[str, ...], list]] = {}
    records = []
    for i in range(300):
        q = rng.randrange(100)
        cands = [g for g in POOL if g < 2] if q < lost * 100 else list(POOL)
        grades = sorted(cands, key=lambda g: -(g + rng.gauss(0, 0.3)))[: 2 * K]
        m = compute(grades, K, MeasureParams(), pool=list(POOL))
        labels = (APP, INDEX, "bm25", "default")
        for name in HISTOGRAM_MEASURES:
            if m[name] is None:
                continue
            h = acc.setdefault(f"retrieval_{name}", {}).setdefault(
                labels, [[0] * (len(BUCKETS[name]) + 1), 0.0, 0, 0.0]
            )
            h[0][bucket_index(BUCKETS[name], m[name])] += 1
            h[1] += m[name]
            h[2] += 1
            h[3] += m[name] ** 2
        records.append(
            {"id": f"e{i}", "q": f"q{q}", "ts": window.start.isoformat(), "k": K,
             "labels": dict(zip(("app", "index", "retriever", "segment"), labels, strict=True)),
             "m": {n: m[n] for n in HISTOGRAM_MEASURES}, "pids": [], "grades": grades[:K]}
        )  # fmt: skip
    hists = {n: {lb: Histogram(*v) for lb, v in s.items()} for n, s in acc.items()}
    data = WindowData(window, hists, {}, days_with_data=7)
    data.add_records(records)
    return data


def test_pooled_fell_while_per_event_held_is_read_as_recall_loss() -> None:
    cur, base = windows(end="2026-11-22", days=7)
    rng = random.Random(3)
    report = analyze(Dataset(week(cur, rng, 0.4), week(base, rng, 0.0), [], True, 35.0))
    (reg,) = report.regressions
    regressed = {reg.headline.measure, *(r.measure for r in reg.others)}
    assert "ndcg_pooled" in regressed  # nDCG@K, if it regressed too, by a small share of it
    (hint,) = [h for h in reg.look_first if "recall loss" in h]
    assert hint.startswith("nDCG@K (pooled) fell while nDCG@K held")


def test_no_recall_hint_when_nothing_was_lost() -> None:
    cur, base = windows(end="2026-11-22", days=7)
    rng = random.Random(4)
    report = analyze(Dataset(week(cur, rng, 0.0), week(base, rng, 0.0), [], True, 35.0))
    assert not report.regressions
