"""What people's grades say about the judge, read from the store: agreement per app and judge
identity, and the corrected (PPI++) estimates of a series' measures over a window of days.

The statistics are `ragmon.core.agreement` and `ragmon.core.corrected`; this module only
gathers their inputs (people's grades, the per-day records of judged events). A week of per-day
records is up to 350k events to read, so the API never does: a worker summarizes each app's
estimates (`summarize`: the last 7 days and every ISO week still kept) when people grade it and
every `ESTIMATE_REFRESH_S`, and the API, the review page and `/metrics` read those summaries
(`summarized`). The report and the CLI compute theirs (`estimates`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
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
from ragmon.core.window import Window, iso_week
from ragmon.core.wire import LABEL_KEYS

if TYPE_CHECKING:
    from ragmon.core.measures import MeasureParams
    from ragmon.store import Store

HUMAN = "human"  # the `reference` of agreement with people's grades
# A worker summarizes an app's estimates at least this often, and within seconds of a grade.
ESTIMATE_REFRESH_S = 600.0
GAUGE_DAYS = 7  # the gauges' window: the last 7 UTC days, today included
LAST = "last"  # the summaries' name of that window (the others: their ISO week)
AGREEMENT = "agreement"  # the summaries' name of an app's agreement
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
    """Agreement and corrected estimates of one deployment, computed from people's grades and
    the per-day records (a worker's summary, the report, the CLI)."""

    store: Store
    params: MeasureParams

    def records(self, apps: Iterable[str] | None = None) -> list[dict]:
        """People's grades of the apps (all when None)."""
        human = self.store.human
        return [r for app in (apps if apps is not None else human.apps()) for r in
                human.of_app(app)]  # fmt: skip

    def agreement(
        self, app: str | None = None, records: list[dict] | None = None
    ) -> dict[tuple[str, str, str], Agreement]:
        """`(app, judge identity, reference)` → agreement on the passages both graded: the
        reference is people (`HUMAN`), or the first judge's identity for the second judge.
        With `app`, only that app's grades are read (and kept apart); `records`: its grades
        already read."""
        if records is None:
            records = self.records(None if app is None else [app])
        pairs = {(a, judge, HUMAN): p for (a, judge), p in agreement_pairs(records).items()}
        pairs |= second_judge_pairs(self.store.second_opinions.records(app))
        return {key: paired_agreement(*p) for key, p in sorted(pairs.items())}

    def estimates(
        self,
        window: Window,
        labels: Mapping[str, str] | None = None,
        read: AppRead | None = None,
    ) -> list[SeriesEstimates]:
        """Per series matching `labels` (any of `LABEL_KEYS`), the corrected estimates of its
        judged events in `window`, computed from the per-day records (a worker's summary, the
        report, the CLI). `read`: the app's days and grades as already read (a summary's
        windows overlap: each day is read once)."""
        wanted = dict(labels or {})
        by_series: dict[tuple[str, ...], list[dict]] = defaultdict(list)
        app = wanted.get("app")
        for day in window.days:
            if read is not None:
                held = read.day(day)
            elif app is None:
                held = self.store.day_events(day)
            else:
                held = self.store.app_day_events(day, app)
            for rec in held:
                lab = rec["labels"]
                if all(lab.get(k) == v for k, v in wanted.items()):
                    by_series[tuple(lab[k] for k in LABEL_KEYS)].append(rec)
        apps = sorted({s[0] for s in by_series})
        people = read.people if read is not None else people_by_event(self.records(apps))
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
        return out


class AppRead:
    """One app's per-day records and people's grades, each read once however many windows
    ask (`summarize`)."""

    def __init__(self, store: Store, app: str) -> None:
        self.store = store
        self.app = app
        self.days: dict[str, list[dict]] = {}
        self.grades = store.human.of_app(app)
        self.people = people_by_event(self.grades)

    def day(self, day: str) -> list[dict]:
        if day not in self.days:
            self.days[day] = self.store.app_day_events(day, self.app)
        return self.days[day]


def summary_text(window: Window, found: list[SeriesEstimates], at: float) -> str:
    """One window's estimates as a worker stores them."""
    return json.dumps({"from": window.start.isoformat(), "to": window.end.isoformat(), "at": at,
                       "series": [asdict(s) for s in found]})  # fmt: skip


def summary_of(text: str) -> tuple[Window, float, list[SeriesEstimates]]:
    """`summary_text` read back: the window, when it was summarized, its series."""
    raw = json.loads(text)
    series = [
        SeriesEstimates(s["labels"], s["events"], s["graded"], {
            m: Corrected(**{**c, "estimate": _interval(c["estimate"]),
                            "human_only": _interval(c["human_only"])})
            for m, c in s["measures"].items()
        })
        for s in raw["series"]
    ]  # fmt: skip
    window = Window(date.fromisoformat(raw["from"]), date.fromisoformat(raw["to"]))
    return window, float(raw["at"]), series


def summary_windows(today: date, kept_days: int) -> dict[str, Window]:
    """The windows a worker summarizes: the last 7 days, and each ISO week with a day kept."""
    out = {LAST: last_days(today=datetime.combine(today, datetime.min.time(), UTC))}
    for back in range(kept_days + 1):
        y, w, _ = (today - timedelta(days=back)).isocalendar()
        out.setdefault(f"{y}-W{w:02d}", iso_week(f"{y}-W{w:02d}"))
    return out


def summarize(
    oversight: Oversight, app: str, now: float, kept_days: int, recent: bool = False
) -> dict[str, str]:
    """An app's estimates for every window a worker keeps (`summary_windows`), and its
    agreement, as stored; `recent`: only the windows that end today or later (where new
    events fall). Each day's records and the app's grades are read once."""
    today = datetime.fromtimestamp(now, UTC).date()
    read = AppRead(oversight.store, app)
    out = {
        key: summary_text(window, oversight.estimates(window, {"app": app}, read), now)
        for key, window in summary_windows(today, kept_days).items()
        if not recent or window.end >= today
    }
    if not recent:
        found = oversight.agreement(app, list(read.grades))
        out[AGREEMENT] = json.dumps([[*key, asdict(a)] for key, a in found.items()])
    return out


def _interval(raw: dict | None) -> Interval | None:
    return None if raw is None else Interval(**raw)


def _agreement_of(raw: dict[str, Any]) -> Agreement:
    return Agreement(**{
        **raw, "confusion": tuple(tuple(row) for row in raw["confusion"]),
        "exact": _interval(raw["exact"]), "kappa": _interval(raw["kappa"]),
        "difference": _interval(raw["difference"]),
        "kappa_unweighted": _interval(raw["kappa_unweighted"]),
        "shares": tuple(tuple(_interval(x) for x in row) for row in raw["shares"]),
    })  # fmt: skip


def summarized_agreement(
    store: Store, app: str | None = None
) -> dict[tuple[str, str, str], Agreement]:
    """Agreement as a worker last summarized it (`Oversight.agreement`'s keys): of `app` alone
    when given, else of every app summarized."""
    apps = [app] if app is not None else sorted(store.estimates.summarized_at())
    out = {}
    for name in apps:
        text = store.estimates.load(name, AGREEMENT)
        for a, judge, reference, raw in json.loads(text) if text else []:
            out[a, judge, reference] = _agreement_of(raw)
    return dict(sorted(out.items()))


def summarized(
    store: Store, key: str, labels: Mapping[str, str] | None = None
) -> tuple[Window | None, float | None, list[SeriesEstimates]]:
    """The estimates a worker summarized for window `key` (`LAST` or an ISO week) of the series
    matching `labels`: of `labels["app"]` alone when given (no other app's key is read), else
    of every app summarized. The window and the oldest summary's time (None: none found)."""
    wanted = dict(labels or {})
    apps = [wanted["app"]] if "app" in wanted else sorted(store.estimates.summarized_at())
    window, at, out = None, None, []
    for app in apps:
        text = store.estimates.load(app, key)
        if text is None:
            continue
        window, when, found = summary_of(text)
        at = when if at is None else min(at, when)
        out += [s for s in found if all(s.labels.get(k) == v for k, v in wanted.items())]
    return window, at, sorted(out, key=lambda s: tuple(s.labels.values()))


def interval_json(interval: Interval | None) -> dict[str, float] | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "low": interval.low, "high": interval.high}


def estimates_json(
    window: Window, found: list[SeriesEstimates], at: float | None = None
) -> dict[str, Any]:
    """What `GET /v1/estimates` answers (`at`: when a worker summarized them; None: never)."""
    return {
        "window": {"from": window.start.isoformat(), "to": window.end.isoformat(),
                   "label": window.label},
        "summarized_at": None if at is None else datetime.fromtimestamp(at, UTC).isoformat(),
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
