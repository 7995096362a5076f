"""A retriever poor from its first day: the report's verdict on level names it, with a baseline
or without, at the top of the report and in its summary line (issue 48)."""

from __future__ import annotations

import random
from dataclasses import replace

from ragmon.core.window import windows
from ragmon.report.analyze import analyze, summary_line
from ragmon.report.document import to_markdown
from ragmon.report.gather import Dataset, WindowData
from ragmon.report.render import build
from tests.monitor.test_report import GOOD, ranked_grades, window_data

CUR, BASE = windows(end="2026-11-22", days=7)


def weak(rng: random.Random) -> list[int]:
    """A ranking that holds a relevant passage in its top 5 for about 3 questions in 10."""
    return [2 if rng.random() < 0.3 else 1] + [0] * 9


def events(rng: random.Random) -> list[tuple]:
    return [("good", ranked_grades(rng, GOOD)) for _ in range(150)] + [
        ("weak", weak(rng)) for _ in range(150)
    ]


def test_a_retriever_poor_from_its_first_day_gets_a_level_verdict() -> None:
    rng = random.Random(3)
    report = analyze(Dataset(window_data(CUR, events(rng)), WindowData(BASE), [], True, 35.0))
    assert report.first_week
    level = {v.group[2]: v.level for v in report.verdicts}
    assert level["weak"].startswith("poor level: Hit@K 0.") and "below 0.6" in level["weak"]
    assert level["good"] == ""
    line = summary_line(report)
    assert "no baseline yet" in line and "poor level: shop/kb-1/weak (Hit@K" in line
    md = to_markdown(build(replace(report, explorer_url="https://mon.example"), {}))
    assert md.index("## Verdict per retriever") < md.index("No baseline yet")
    row = next(r for r in md.splitlines() if "/ui/events?" in r and "retriever=weak" in r)
    assert "https://mon.example/ui/events?app=shop&index=kb-1&retriever=weak&sort=ndcg" in row
    assert "poor level: Hit@K" in row


def test_the_level_verdict_stands_beside_an_unchanged_one() -> None:
    rng = random.Random(4)
    base = window_data(BASE, events(rng))
    report = analyze(Dataset(window_data(CUR, events(rng)), base, [], True, 35.0))
    verdict = {v.group[2]: v for v in report.verdicts}
    assert verdict["weak"].verdict == "unchanged" and verdict["weak"].level.startswith("poor")
    assert verdict["good"].level == ""
    md = to_markdown(build(report, {}))
    assert md.index("## Verdict per retriever") < md.index("## All measures")
    assert "| shop/kb-1/weak | unchanged | poor level: Hit@K" in md
