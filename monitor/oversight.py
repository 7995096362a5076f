"""What people's grades say about the judge, read from the store: agreement per app and judge
identity, and the corrected (PPI++) estimates of a series' measures over a window of days.

The statistics are `ragmon.core.agreement` and `ragmon.core.corrected`; this module only
gathers their inputs (people's grades, the per-day records of judged events) and keeps the
results while nothing changed: `/metrics` renders every few seconds, people's grades change
rarely, and a week of per-day records is up to 350k events to read.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ragmon.core.agreement import Agreement, paired_agreement
from ragmon.core.corrected import Corrected
from ragmon.core.drift import Interval
from ragmon.core.reviews import (
    ESTIMATED,
    agreement_pairs,
    estimates,
    graded_event,
    people_by_event,
    second_judge_pairs,
)
from ragmon.core.window import Window
from ragmon.core.wire import LABEL_KEYS

if TYPE_CHECKING:
    from ragmon.core.measures import MeasureParams
    from ragmon.store import Store

HUMAN = "human"  # the `reference` of agreement with people's grades
# The gauges' estimates are at most ESTIMATE_REFRESH_S old, and REGRADE_S once people's grades
# changed: a week of per-day records is read at most once a minute while people grade.
ESTIMATE_REFRESH_S = 600.0
REGRADE_S = 60.0
GAUGE_DAYS = 7  # the gauges' window: the last 7 UTC days, today included
UNITS = {
    "passage": "every top-K passage people graded",
    "event": "events whose passages the measure reads were all graded by people",
}


@dataclass(frozen=True)
class SeriesEstimates:
    """One series' corrected estimates over a window: per measure, `ragmon.core.corrected`'s
    answer; `events` judged events in the window, `graded` of them graded by people."""

    labels: dict[str, str]
    events: int
    graded: int
    measures: dict[str, Corrected]


def last_days(days: int = GAUGE_DAYS, today: datetime | None = None) -> Window:
    end = (today or datetime.now(UTC)).date()
    return Window(end - timedelta(days=days - 1), end)


@dataclass
class Oversight:
    """Agreement and corrected estimates of one deployment: agreement cached by the people's
    grades' generation, the gauges' estimates as `ESTIMATE_REFRESH_S` says."""

    store: Store
    params: MeasureParams
    refresh_s: float = ESTIMATE_REFRESH_S
    regrade_s: float = REGRADE_S
    _agreement: dict[str | None, tuple[tuple[int, int], dict]] = field(default_factory=dict)
    _estimates: dict[tuple, tuple[int, float, list[SeriesEstimates]]] = field(default_factory=dict)

    @classmethod
    def for_metrics(cls, store: Store) -> Oversight:
        """The one `/metrics` keeps between renderings: with RAGMON_METRICS_REFRESH_S=0
        (every scrape rendered afresh) its estimates are never older than the scrape either."""
        settings = store.settings
        fresh = settings.metrics_refresh_s <= 0
        return cls(store, settings.measure_params(), 0.0 if fresh else ESTIMATE_REFRESH_S,
                   0.0 if fresh else REGRADE_S)  # fmt: skip

    def records(self, apps: Iterable[str] | None = None) -> list[dict]:
        """People's grades of the apps (all when None)."""
        human = self.store.human
        return [r for app in (apps if apps is not None else human.apps()) for r in
                human.of_app(app)]  # fmt: skip

    def agreement(self, app: str | None = None) -> dict[tuple[str, str, str], Agreement]:
        """`(app, judge identity, reference)` → agreement on the passages both graded: the
        reference is people (`HUMAN`), or the first judge's identity for the second judge.
        With `app`, only that app's grades are read (and kept apart)."""
        generation = (self.store.human.generation(), self.store.second_opinions.generation())
        kept = self._agreement.get(app)
        if kept is None or kept[0] != generation:
            records = self.records(None if app is None else [app])
            pairs = {(a, judge, HUMAN): p for (a, judge), p in
                     agreement_pairs(records).items()}  # fmt: skip
            pairs |= second_judge_pairs(self.store.second_opinions.records(app))
            out = {key: paired_agreement(*p) for key, p in sorted(pairs.items())}
            kept = self._agreement[app] = (generation, out)
        return kept[1]

    def estimates(
        self, window: Window, labels: Mapping[str, str] | None = None, cached: bool = False
    ) -> list[SeriesEstimates]:
        """Per series matching `labels` (any of `LABEL_KEYS`), the corrected estimates of its
        judged events in `window`. `cached`: answer a result at most `refresh_s` old when
        people's grades did not change since (the gauges)."""
        wanted = dict(labels or {})
        key = (window.start, window.end, tuple(sorted(wanted.items())))
        generation = self.store.human.generation()
        kept = self._estimates.get(key)
        if cached and kept is not None:
            age = time.monotonic() - kept[1]
            if age < (self.refresh_s if kept[0] == generation else self.regrade_s):
                return kept[2]
        by_series: dict[tuple[str, ...], list[dict]] = defaultdict(list)
        app = wanted.get("app")
        for day in window.days:
            held = (
                self.store.day_events(day) if app is None else self.store.app_day_events(day, app)
            )
            for rec in held:
                lab = rec["labels"]
                if all(lab.get(k) == v for k, v in wanted.items()):
                    by_series[tuple(lab[k] for k in LABEL_KEYS)].append(rec)
        apps = {s[0] for s in by_series}
        people = people_by_event(self.records(sorted(apps)))
        out = []
        for series, recs in sorted(by_series.items()):
            events = [graded_event(r, people.get((series[0], r["id"]))) for r in recs]
            out.append(
                SeriesEstimates(
                    labels=dict(zip(LABEL_KEYS, series, strict=True)),
                    events=len(events),
                    graded=sum(any(h is not None for h in e.human) for e in events),
                    measures=estimates(events, self.params),
                )
            )
        if cached:
            self._estimates[key] = (generation, time.monotonic(), out)
        return out


def interval_json(interval: Interval | None) -> dict[str, float] | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "low": interval.low, "high": interval.high}


def estimates_json(window: Window, found: list[SeriesEstimates]) -> dict[str, Any]:
    """What `GET /v1/estimates` answers."""
    return {
        "window": {"from": window.start.isoformat(), "to": window.end.isoformat(),
                   "label": window.label},
        "series": [
            {
                "labels": s.labels,
                "events": s.events,
                "graded_events": s.graded,
                "measures": {
                    m: {
                        "judge_only": c.judge_only,
                        "corrected": interval_json(c.estimate),
                        "human_only": interval_json(c.human_only),
                        "labels": c.labels,
                        "effective_labels": c.effective_labels,
                        "judge_weight": c.lam,
                        "units": UNITS[ESTIMATED[m]],
                        "reason": c.reason,
                        "random_draw": c.random_draw,
                    }
                    for m, c in s.measures.items()
                },
            }
            for s in found
        ],
    }  # fmt: skip
