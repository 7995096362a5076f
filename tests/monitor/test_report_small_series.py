"""Small series (issue 34 item 5, issue 46 item 3): a retriever with a few events a week is
compared over the weeks its records are kept, since its mean last changed against the weeks
before, and gets a verdict instead of "too few events to tell"; a drop keeps showing while it
lasts, and not after."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from ragmon.core.window import Window, windows
from ragmon.report.analyze import analyze
from ragmon.report.document import to_markdown
from ragmon.report.gather import SMALL_HISTORY_WEEKS, TREND_WEEKS, Dataset, WindowData, gather
from ragmon.report.render import build
from tests.monitor.test_report import APP, GOOD, INDEX, ranked_grades, store_records, window_data

CUR, BASE = windows(end="2026-11-22", days=7)


def trend(
    per_week: dict[str, int],
    noise_after: dict[str, float] | None = None,
    since: int = 4,
    weeks: int = 8,
    until: int | None = None,
) -> list[WindowData]:
    """Weekly blocks, oldest first, the last CUR: retriever -> events a week (each its own
    question); `noise_after`: the ranking noise of a retriever from week `since` on (a drop),
    up to week `until` (it recovered) or the last."""
    rng = random.Random(7)
    blocks = []
    for i, w in enumerate(CUR.shifted(back - weeks + 1) for back in range(weeks)):
        events = []
        for r, n in per_week.items():
            dropped = since <= i < (weeks if until is None else until)
            noise = (noise_after or {}).get(r, GOOD) if dropped else GOOD
            events += [(r, ranked_grades(rng, noise)) for _ in range(n)]
        data = window_data(w, events)
        for ev in data.events.values():  # distinct questions in every week
            ev.queries = [f"w{i}-{q}" for q in ev.queries]
        blocks.append(data)
    return blocks


def report_of(blocks: list[WindowData]):  # noqa: ANN201 - the report
    return analyze(Dataset(blocks[-1], blocks[-2], blocks, True, 35.0))


def test_a_few_events_a_week_get_a_verdict_over_the_trend() -> None:
    report = report_of(trend({"tiny": 3, "big": 40}))
    g = (APP, INDEX, "tiny")
    span = report.spans[g]
    assert span.permutation and span.weeks + span.base_weeks == 8
    assert 3 <= span.weeks <= 5  # each side holds at least 8 events (3 a week: 3 weeks)
    assert (span.base.events, span.cur.events) == (3 * span.base_weeks, 3 * span.weeks)
    assert report.too_few == []
    (v,) = [v for v in report.verdicts if v.group == g]
    assert v.verdict == "unchanged"
    rows = [r for r in report.rows if r.group == g]
    assert rows and all(r.permutation and 3 <= r.weeks <= 5 for r in rows if r.change)
    assert (APP, INDEX, "big") not in report.spans
    md = to_markdown(build(report, {}))
    assert f"the last {span.weeks} weeks against the {span.base_weeks} before" in md
    assert any("the weeks since the mean last changed" in n for n in report.notes)


@pytest.mark.parametrize("since", [3, 5, 6])
def test_a_big_drop_of_a_small_series_shows_in_every_week_after_it(since: int) -> None:
    """Weeks 3, 5 and 2 after the drop (a baseline of the weeks just before the current ones
    would hold dropped weeks): the split is at the drop and the drop is a regression."""
    report = report_of(trend({"tiny": 5}, noise_after={"tiny": 8.0}, since=since))
    assert [r.group[2] for r in report.regressions] == ["tiny"]
    assert report.regressions[0].headline.permutation
    assert report.spans[(APP, INDEX, "tiny")].base_weeks == since


def test_a_drop_that_recovered_is_no_longer_a_regression() -> None:
    """Weeks 3 to 5 of 8 dropped, the last 2 recovered: the weeks since the drop ended are
    compared with the drop's (they improved), not the drop and its end with the weeks before
    it (the scan of lasting changes alone called that a regression)."""
    report = report_of(trend({"tiny": 8}, noise_after={"tiny": 8.0}, since=3, until=6))
    assert report.regressions == []
    (row,) = [r for r in report.rows if r.group[2] == "tiny" and r.measure == "ndcg"]
    assert (row.weeks, row.base.n if row.base else 0) == (2, 3 * 8)
    assert row.status == "improvement"


def test_too_few_even_over_four_weeks_and_without_a_trend() -> None:
    report = report_of(trend({"one": 1}))  # 8 events in 8 weeks: under 8 on either side
    assert report.too_few == [(APP, INDEX, "one")] and not report.spans
    blocks = trend({"tiny": 3})
    report = analyze(Dataset(blocks[-1], blocks[-2], [], True, 35.0))  # no trend: one week
    assert report.too_few == [(APP, INDEX, "tiny")]


class _Store:
    """The store's read side, from weekly blocks (one day per block holds its records)."""

    def __init__(self, blocks: list[WindowData]) -> None:
        self.days = {b.window.end.isoformat(): b for b in blocks}
        self.settings = SimpleNamespace(store_text=True, result_ttl_days=35.0, explorer_url=None)

    def histograms(self, bounds: object, day: str) -> dict:
        b = self.days.get(day)
        return b.hists if b is not None else {}

    def counters(self, day: str) -> dict:
        return {}

    def day_events(self, day: str, only: set[str] | None = None) -> list[dict]:
        b = self.days.get(day)
        records = store_records(b) if b is not None else []
        records = [r for r in records if only is None or r["labels"]["app"] in only]
        return [r | {"id": f"{day}-{r['id']}"} for r in records]  # ids (questions) differ by week


def test_gather_reads_older_weeks_for_small_series_only() -> None:
    blocks = trend({"tiny": 3, "big": 40})
    data = gather(_Store(blocks), CUR, BASE, progress=lambda _: None)
    assert data.trend[-1] is data.current and data.trend[-2] is data.baseline
    older = data.trend[0]
    assert set(older.events) == {(APP, INDEX, "tiny")}
    assert len(older.events[(APP, INDEX, "tiny")]) == 3
    report = analyze(data)
    assert (
        report.spans[(APP, INDEX, "tiny")].weeks + report.spans[(APP, INDEX, "tiny")].base_weeks
        == 8
    )
    # a report over other windows never widens
    two = Window(CUR.start.fromordinal(CUR.start.toordinal() - 7), CUR.end)
    data = gather(_Store(blocks), two, Window(two.start.fromordinal(two.start.toordinal() - 14),
                                              two.start.fromordinal(two.start.toordinal() - 1)),
                  progress=lambda _: None)  # fmt: skip
    assert all(not b.events for b in data.trend)


def test_a_small_series_is_scanned_over_every_week_its_records_are_kept() -> None:
    """RAGMON_RESULT_TTL_DAYS of 112: 16 weeks of the small series' records, scanned whole (a
    drop 12 weeks ago still has 4 weeks before it); the plots keep their 8 weeks."""
    store = _Store(trend({"tiny": 5, "big": 40}, {"tiny": 8.0}, since=4, weeks=16))
    store.settings.result_ttl_days = 112.0
    data = gather(store, CUR, BASE, progress=lambda _: None)
    assert len(data.trend) == SMALL_HISTORY_WEEKS == 16
    assert set(data.trend[0].events) == {(APP, INDEX, "tiny")}
    report = analyze(data)
    assert [r.group[2] for r in report.regressions] == ["tiny"]
    span = report.spans[(APP, INDEX, "tiny")]
    assert span.weeks + span.base_weeks == 16 and 3 <= span.base_weeks <= 5  # near the drop
    assert {len(means) for by in report.trend.values() for means in by.values()} == {TREND_WEEKS}
