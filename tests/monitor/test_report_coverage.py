"""The report's judged share per retriever: "bm25: 12 % judged, weekly nDCG +/- 0.021"."""

from __future__ import annotations

import numpy as np
import pytest

from ragmon.core.weighted import hajek
from ragmon.report.coverage import judged_line, judged_shares
from ragmon.report.gather import Events


def record(i: int, ndcg: float, ip: float) -> dict:
    return {"id": f"e{i}", "labels": {"segment": "s"}, "q": f"q{i}", "ql": 3,
            "m": {"ndcg": ndcg}, "ip": ip}  # fmt: skip


def test_share_and_half_width_are_weighted() -> None:
    ev = Events()
    rng = np.random.default_rng(1)
    values = rng.random(60)
    probs = np.where(np.arange(60) < 30, 0.1, 0.5)
    for i, (v, p) in enumerate(zip(values, probs, strict=True)):
        ev.add(record(i, float(v), float(p)))
    (row,) = judged_shares({("app", "kb", "bm25"): ev})
    assert row.judged == 60
    assert row.share == pytest.approx(60 / (30 / 0.1 + 30 / 0.5))  # 60 of about 360 events
    iv = hajek(values, probs)
    assert row.half == pytest.approx((iv.high - iv.low) / 2)
    assert judged_line(row) == f"app/kb/bm25: 17 % judged, weekly nDCG +/- {row.half:.3f}"


def test_older_records_without_a_probability_count_as_all_judged() -> None:
    ev = Events()
    for i in range(5):
        r = record(i, 0.5 + 0.1 * i, 1.0)
        del r["ip"]
        ev.add(r)
    (row,) = judged_shares({("a", "b", "c"): ev})
    assert row.share == 1.0
    assert "100 % judged" in judged_line(row)


def test_the_share_the_judged_events_stand_for_shows_unjudged_events() -> None:
    """Half a retriever's 200 events were never judged (the budget ran out): its 50 judged
    ones, chosen at 0.5, stand for 100 of them, and the line says so."""
    ev = Events()
    for i in range(50):
        ev.add(record(i, 0.5, 0.5))
    group = ("app", "kb", "bm25")
    (row,) = judged_shares({group: ev}, {group: 200})
    assert row.stands_for == pytest.approx(100.0)
    assert judged_line(row).startswith(
        "app/kb/bm25: 50 % judged, standing for 50 % of its 200 events, weekly nDCG"
    )
    (whole,) = judged_shares({group: ev}, {group: 100})
    assert "standing for 100 % of its 100 events" in judged_line(whole)
