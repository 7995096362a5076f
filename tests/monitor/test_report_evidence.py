"""One verdict per retriever: a collapse (relevance down, Harm@K down with it because the near
misses became off-topic passages) is a regression, never an improvement (issue 36, item 5)."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from ragmon.core.window import windows
from ragmon.report.analyze import analyze
from ragmon.report.compare import Row
from ragmon.report.document import to_markdown
from ragmon.report.gather import Dataset
from ragmon.report.publish import run_report
from ragmon.report.render import build
from ragmon.report.verdict import verdicts
from ragmon.settings import Settings
from tests.monitor.test_report import (
    APP,
    GOOD,
    INDEX,
    K,
    Live,
    ranked_grades,
    start_live,
    window_data,
    yesterday,
)


def collapsed(rng: random.Random) -> list[int]:
    """A stale store: the right ids, the wrong text: almost every passage is off-topic."""
    return [1 if rng.random() < 0.03 else 0 for _ in range(10)]


def test_a_collapse_is_a_regression_and_never_an_improvement() -> None:
    rng = random.Random(5)
    cur, base = windows(end="2026-11-22", days=7)
    week = [(r, ranked_grades(rng, GOOD)) for r in ("stale", "bm25") for _ in range(150)]
    week2 = [("stale", collapsed(rng)) for _ in range(150)]
    week2 += [("bm25", ranked_grades(rng, GOOD)) for _ in range(150)]
    report = analyze(Dataset(window_data(cur, week2), window_data(base, week), [], True, 35.0))
    harm = next(r for r in report.rows if r.group[2] == "stale" and r.measure == "harm")
    assert harm.status == "improvement"  # alone, Harm@K's fall reads as one ...
    assert not report.improvements  # ... read with the others, it is not
    by = {v.group[2]: v for v in report.verdicts}
    assert by["stale"].verdict == "regression" and by["bm25"].verdict == "unchanged"
    (reg,) = report.regressions
    assert any("off-topic" in why and "Harm@K" in why for why in reg.opposite)
    md = to_markdown(build(report, {}))
    assert "## Improvements" not in md
    verdict_table = md[md.index("## Verdict per retriever") :].split("\n\n")[2]
    assert "| shop/kb-1/stale | regression |" in verdict_table
    stale = md[md.index("### shop/kb-1/stale") :]
    harm_line = next(line for line in stale.splitlines() if line.startswith("| Harm@K"))
    assert "not an improvement" in harm_line


def test_harm_falling_with_relevance_rising_is_an_improvement() -> None:
    """Near misses that became answers: Harm@K down and P@K up is a real improvement."""
    rng = random.Random(8)
    cur, base = windows(end="2026-11-22", days=7)

    def grades(near_miss: float) -> list[int]:  # 40% off-topic; the rest near misses or answers
        return [0 if (x := rng.random()) < 0.4 else 1 if x < 0.4 + near_miss else 2
                for _ in range(10)]  # fmt: skip

    week = [("a", grades(0.4)) for _ in range(200)]
    week2 = [("a", grades(0.1)) for _ in range(200)]
    report = analyze(Dataset(window_data(cur, week2), window_data(base, week), [], True, 35.0))
    (v,) = report.verdicts
    assert v.verdict == "improvement"
    assert report.improvements and not report.regressions


def _row(measure: str, estimate: float, status: str) -> Row:
    from ragmon.core.drift import Change

    change = Change(estimate, estimate, estimate - 0.01, estimate + 0.01, 0.001, 50.0, 0.1, 1)
    return Row(("a", "b", "c"), measure, change=change, p_adj=0.001, status=status)


def test_harm_falling_alone_with_relevance_drifting_down_is_mixed() -> None:
    rows = [
        _row("harm", -0.2, "improvement"),
        _row("precision", -0.01, "unchanged"),
        _row("ndcg", 0.0, "unchanged"),
    ]
    (v,) = verdicts(rows, {})
    assert v.verdict == "mixed" and not v.improved
    assert "P@K fell with it" in v.why


# ---- end to end: a stale store's collapse, its worst events with their text, and links -------


def stale_events(end: date, per_day: int = 6) -> list[dict]:
    """14 days of `good` and `stale`; in the last 7, `stale` returns the right ids with the text
    of a stale store: every passage off-topic (grade 0, sent by the app as known grades)."""
    rng = random.Random(21)
    out = []
    for d in range(14):
        day = end - timedelta(days=13 - d)
        for retriever in ("good", "stale"):
            for i in range(per_day):
                grades = ranked_grades(rng, GOOD)
                if retriever == "stale" and d >= 7:
                    grades = collapsed(rng)
                qid = f"q{d}-{i}-{retriever}"
                ts = datetime(day.year, day.month, day.day, 1 + i, tzinfo=UTC)
                out.append(
                    {
                        "event_id": str(uuid.uuid4()),
                        "query": f"how do I reset {qid}",
                        "k": K,
                        "passages": [
                            {
                                "id": f"{qid}-p{j}",
                                "text": f"text of passage {j} for {qid}",
                                "grade": g,
                            }
                            for j, g in enumerate(grades)
                        ],  # fmt: skip
                        "labels": {"app": APP, "index": INDEX, "retriever": retriever},
                        "timestamp": ts.isoformat().replace("+00:00", "Z"),
                    }
                )
    return out


@pytest.fixture
def live(settings: Settings) -> Iterator[Live]:
    yield from start_live(settings)


@pytest.mark.slow
def test_stale_store_report_end_to_end(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = yesterday()
    live.send(stale_events(end))
    live.process()
    monkeypatch.delenv("RAGMON_URL", raising=False)
    assert run_report(live.settings, tmp_path / "a", end=end.isoformat()) == 0
    md = (tmp_path / "a" / "report.md").read_text()
    # one verdict: the collapse is a regression, its Harm@K fall is read with it
    assert "| shop/kb-1/stale | regression |" in md
    assert "## Improvements" not in md
    assert re.search(r"grade 0: \d+% → 9\d%", md), "the reason names the off-topic share"
    # the worst events show each passage's text in the table itself
    worst = md[md.index("### Lowest nDCG@K") : md.index("### Highest Harm@K")]
    rows = [line for line in worst.splitlines() if line.startswith("| ") and "stale" in line]
    assert len(rows) >= 5
    for row in rows:
        assert "how do I reset" in row and "“text of passage 0 for q" in row
    # no address known: the ids are plain and the report says how to make them links
    assert "/ui/events/" not in md and "Event ids are not links" in md
    # RAGMON_URL (the API as the apps reach it) serves the explorer: the ids link there
    monkeypatch.setenv("RAGMON_URL", live.base)
    assert run_report(live.settings, tmp_path / "b", end=end.isoformat()) == 0
    md = (tmp_path / "b" / "report.md").read_text()
    link = re.search(r"\[[0-9a-f-]{36}\]\(<(http://127\.0\.0\.1:\d+/ui/events/shop/[^>]+)>\)", md)
    assert link, "an event id links to its explorer page"
    page = httpx.get(link.group(1), timeout=30)
    assert page.status_code == 200 and "how do I reset" in page.text
    # --explorer-url wins over both
    assert (
        run_report(
            live.settings,
            tmp_path / "c",
            end=end.isoformat(),
            explorer_url="https://mon.example.com",
        )
        == 0
    )
    md = (tmp_path / "c" / "report.md").read_text()
    assert "](<https://mon.example.com/ui/events/shop/" in md


# ---- the 8-week plot: every line of a plot has its own colour ----------------------------------


@pytest.mark.slow  # sixteen plots
def test_sixteen_retrievers_get_small_multiples_with_distinct_colours() -> None:
    from matplotlib.colors import to_hex

    from ragmon.report import plots

    rng = random.Random(3)
    cur, base = windows(end="2026-11-22", days=7)
    names = [f"r{i:02d}" for i in range(16)]
    week = [(r, ranked_grades(rng, GOOD)) for r in names for _ in range(40)]
    blocks = [window_data(cur, week)]
    report = analyze(Dataset(window_data(cur, week), window_data(base, week), blocks, True, 35.0))
    chunks = plots.trend_chunks(report)
    assert sorted(g[2] for c in chunks for g in c) == names  # every retriever, once
    assert len(chunks) == 2 and all(len(c) <= plots.MAX_LINES for c in chunks)
    for chunk in chunks:
        fig = plots.trend_figure(report, chunk)
        ax = fig.axes[0]
        colours = [to_hex(line.get_color()) for line in ax.get_lines()]
        assert len(colours) == len(chunk) == len(set(colours)), colours
        legend = fig.legends[0]
        assert sorted(t.get_text() for t in legend.get_texts()) == sorted(
            "/".join(g) for g in chunk
        )
    captions = list(plots.trend_pngs(report))
    assert captions[0].endswith("(retrievers 1-8 of 16)") and captions[1].endswith("9-16 of 16)")


def test_the_primary_measure_holds_its_share_of_the_level_whatever_the_family() -> None:
    from types import SimpleNamespace

    from ragmon.report.family import PRIMARY, PRIMARY_SHARE, family_weights

    rows = [SimpleNamespace(measure=m) for m in [PRIMARY, "t", "hit"] * 3 + ["t"]]
    w = family_weights(rows)  # type: ignore[arg-type]
    assert sum(w) == pytest.approx(1.0)
    held = sum(x for x, r in zip(w, rows, strict=True) if r.measure == PRIMARY)
    assert held == pytest.approx(PRIMARY_SHARE)
    alone = [SimpleNamespace(measure="t")] * 4
    assert family_weights(alone) == [1.0] * 4  # type: ignore[arg-type]


def test_a_regression_holds_more_of_its_rows_level_than_an_improvement() -> None:
    """Each row's level is split between its directions: a change the bad way is tested
    one-sided at `WORSE_SHARE` of it, the good way at the rest; the split p-values are valid
    (under no change, each is at most t with chance at most t)."""
    from types import SimpleNamespace

    import numpy as np
    from scipy import stats

    from ragmon.report.family import WORSE_SHARE, directed

    def row(p: float, worse: bool) -> SimpleNamespace:
        return SimpleNamespace(tested=SimpleNamespace(pvalue=p), worse=worse)

    assert directed(row(0.01, True)) == pytest.approx(0.005 / WORSE_SHARE)  # type: ignore[arg-type]
    assert directed(row(0.01, False)) == pytest.approx(0.005 / (1 - WORSE_SHARE))  # type: ignore[arg-type]
    assert directed(row(1.0, False)) == 1.0  # type: ignore[arg-type]
    # a symmetric test statistic under no change: P(directed <= t) = t, whatever the share
    rng = np.random.default_rng(0)
    z = rng.standard_normal(200_000)
    p = 2 * stats.norm.sf(np.abs(z))
    share = np.where(z < 0, WORSE_SHARE, 1 - WORSE_SHARE)  # z < 0: the bad way
    split = np.minimum(1.0, p / 2 / share)
    for t in (0.001, 0.01, 0.05):
        assert np.mean(split <= t) == pytest.approx(t, rel=0.15)
