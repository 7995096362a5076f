"""The API's side of sampling: the rate each new event is judged with, and the plan behind it.

Each API process counts the events it accepts per series (flushed to Redis every second, with
the events it chose this planning interval: the pacing counts every process' choices, so a fleet
of API processes paces a new series as one process would), reads the current plan every few
seconds, and once a minute one API process (a lock in Redis)
makes the next plan with `ragmon.core.sampling.plan`: the series' hourly traffic, the day's
spend, each series' age, spread of nDCG@K and the cost of judging one event so far. With
`RAGMON_SAMPLING=planned` (the default) new events take the plan's rates, paced within each
planning interval (`Rates.cap`, `cold_cap`); with `fixed` every event's rate is
RAGMON_SAMPLE_RATE and the plan only forecasts the budget's pace and run-out (the budget cliff,
seen before it comes).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from ragmon.core.clock import Clock
from ragmon.core.sampling import (
    APP_MARK,
    DEFAULT_SD,
    Policy,
    Rates,
    Traffic,
    count_chosen,
    plan,
)
from ragmon.core.wire import series_app
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.keys import OTHER, fold, utc_day
from ragmon.store.sampling_state import StoredPlan

log = logging.getLogger("ragmon.api")

FLUSH_S = 1.0
READ_S = 5.0
PLAN_S = 60.0
DAY_S = 86_400.0
CAP_PACE = 4.0  # a series may spend, within one interval, at this many times the day's pace
COLD_COST_USD = 0.002  # an event's judging cost before any was judged (10 passages, mini model)
SD_MEASURE = "ndcg"


class Sampler:
    """`clock`: the time every count, plan and hour is made at (the system's; a test's
    `ragmon.core.clock.SteppedClock` runs a compressed day)."""

    def __init__(self, settings: Settings, store: Store, clock: Clock = time.time) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.state = store.sampling
        self.planned = settings.sampling == "planned"
        self.counts: Counter[str] = Counter()
        self.current = Rates({}, 1.0 if self.planned else settings.sample_rate)
        if self.planned:
            self.current = Rates({}, 1.0, cold_cap(settings, 0.0))
        # this interval's events and the sum of their probabilities, by series and by app: the
        # fleet's at the last flush (`shared`) and this process' since (`unshared`, by interval)
        self.seen: dict[str, tuple[int, float]] = {}
        self.shared: dict[str, tuple[int, float]] = {}
        self.unshared: dict[tuple[int, str], tuple[int, float]] = {}
        self.interval = -1
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.planned_series: set[str] = set()  # the series of the last plan read
        self.unplanned: set[str] = set()  # series this process saw that it does not know
        self.admitted: set[str] = set()  # the series budget's series (read with the plan)
        self.per_app: Counter[str] = Counter()  # of `admitted`, per app
        self._task: asyncio.Task | None = None

    def rates(self) -> Rates:
        """The rates for the next request: the plan's, paced by this interval's events."""
        if self.current.cap is None:
            return self.current
        self._roll()
        return replace(self.current, seen=dict(self.seen))

    def _roll(self) -> None:
        """A new planning interval: the pacing starts over, except for the series no plan has
        seen yet (their first seconds have one cap, whatever the interval boundaries)."""
        interval = int(self.clock() // PLAN_S)
        if interval != self.interval:
            self.interval = interval
            self.seen = {k: v for k, v in self.seen.items() if self._carried(k)}
            self.shared = {k: v for k, v in self.shared.items() if self._carried(k)}

    def _carried(self, key: str) -> bool:
        """Counted on into the next interval: a series no plan has seen yet."""
        return not key.startswith(APP_MARK) and key not in self.planned_series

    def note(self, items: Iterable[IngestItem], created: Iterable[bool]) -> None:
        """Count the events just accepted (not the duplicates) for the forecast, each under the
        series it is counted in after the series budget (`counted_as`), and for the pacing."""
        self._roll()
        for it, new in zip(items, created, strict=True):
            if new:
                counted = self.counted_as(it.app, it.series)
                self.counts[counted] += 1
                for key in (it.series, APP_MARK + it.app):
                    count_chosen(self.seen, key, 1, it.probability)
                    if key != it.series or counted == it.series:  # shared: within the budget
                        count_chosen(self.unshared, (self.interval, key), 1, it.probability)

    async def share(self) -> None:
        """Flush this process' chosen events to the fleet's counts and pace by the fleet's
        from now on (on the event loop's thread, where `note` and `rates` run)."""
        if self.current.cap is None:
            self.unshared.clear()
            return
        self._roll()
        interval, sent, self.unshared = self.interval, self.unshared, {}
        now, before = await asyncio.to_thread(self.state.pace, interval, sent, self.clock())
        self._roll()
        if interval != self.interval:
            return  # an interval began meanwhile: its counts start from this process' own
        fleet = dict(now)
        for key, (n, p) in before.items():
            if self._carried(key):
                count_chosen(fleet, key, n, p)
        seen = {k: v for k, v in self.seen.items() if k not in fleet and k not in self.shared}
        for (i, key), (n, p) in self.unshared.items():  # chosen while the flush ran
            if i == interval:
                m, q = fleet.get(key, (0, 0.0))
                seen[key] = (m + n, q + p)
        self.shared, self.seen = fleet, {**fleet, **seen}

    def counted_as(self, app: str, series: str) -> str:
        """`series`, or its app's folded series past the series budget, as INGEST admits it:
        20,000 junk index values of one app count as its budget's series and one fold, so
        they fill neither the hourly traffic nor the plan."""
        if series in self.admitted:
            return series
        held = self.per_app[app]
        s = self.settings
        if held < s.max_series_per_app and len(self.admitted) < s.max_series:
            self.admitted.add(series)  # admitted now (or soon): as INGEST decides it
            self.per_app[app] += 1
            return series
        return fold(app if held else OTHER)[0]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ragmon-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await asyncio.to_thread(self.state.count, self.take(), self.clock())

    def take(self) -> Counter[str]:
        """The counts so far, starting afresh (on the event loop's thread, where `note` runs)."""
        counts, self.counts = self.counts, Counter()
        return counts

    def flush(self) -> None:
        """Write the counts so far (from the event loop's thread: tests, shutdown)."""
        self.state.count(self.take(), self.clock())

    async def _run(self) -> None:
        last_read = -math.inf
        while True:
            try:
                now = self.clock()
                counts = self.take()
                self.unplanned |= counts.keys() - self.planned_series
                await asyncio.to_thread(self.state.count, counts, now)
                await self.share()
                if now - last_read >= READ_S:
                    last_read = now
                    await asyncio.to_thread(self.refresh, now)
            except Exception as exc:  # Redis away: keep the last rates, try again
                log.warning("sampling plan not refreshed: %r", exc)
            await asyncio.sleep(FLUSH_S)

    def refresh(self, now: float, force: bool = False) -> StoredPlan:
        """Read the current plan; make the next one when it is due and this process leads (or
        at once, `force`)."""
        stored = self.state.load(now)
        self.admitted = self.store.series.admitted()
        self.per_app = Counter(series_app(x) for x in self.admitted)
        # due a minute after the last plan, or sooner when a series it does not know has sent
        # (its rate is then the plan's default, and its gauge absent, until it is planned)
        due = stored is None or now - stored.at >= (READ_S if self.unplanned else PLAN_S)
        if force or (due and self.state.lead(self.owner, PLAN_S - 1)):
            stored = self.replan(now)
            self.state.save(stored)
        if stored is not None:
            self.planned_series = set(stored.rates)
            self.unplanned -= self.planned_series
            if self.planned:
                self.current = stored.to_rates()
        return stored or StoredPlan(at=now)

    def replan(self, now: float) -> StoredPlan:
        s = self.settings
        traffic = self.state.traffic(now)
        midnight = datetime.fromtimestamp(now, UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        now_s = now - midnight.timestamp()
        spent = self.store.judge_state().spent(utc_day(now))
        cost = self.state.cost_per_event()
        sds = self.state.spreads(SD_MEASURE, self.store.bounds[SD_MEASURE])
        busiest = sorted(traffic, key=lambda k: -sum(traffic[k]))
        taken: Counter[str] = Counter()  # a share per app: no app holds more of the plan
        biggest: list[str] = []
        for k in busiest:
            app = series_app(k)
            if taken[app] < s.max_series_per_app + 1 and len(biggest) < s.max_series:
                taken[app] += 1  # its budget's series and its fold
                biggest.append(k)
        ages = self.state.ages(now, traffic)
        series = {
            k: Traffic(traffic[k], sds.get(k, DEFAULT_SD), cost, ages.get(k)) for k in biggest
        }
        fixed = None if self.planned else s.sample_rate
        policy = Policy(s.target_half_width, s.min_judged_per_day, s.daily_budget_usd, fixed=fixed)
        p = plan(series, policy, spent, now_s)
        # a series the plan does not know yet: judged whole, paced (`Rates.cap`) until it is
        default = 1.0 if self.planned else max(p.rates.values(), default=1.0)
        runout = midnight.timestamp() + p.runout_s if p.runout_s is not None else None
        cap = cold_cap(s, cost) if self.planned else None
        return StoredPlan(now, p.rates, default, spent, s.daily_budget_usd, p.pace, runout, cap)


def cold_cap(settings: Settings, cost: float) -> float | None:
    """Events one series may have chosen per planning interval (`Rates.cap`): what
    `CAP_PACE` times the budget's average pace pays for in one interval at the cost of an event
    so far (`COLD_COST_USD` before any), and at least the daily minimum's share of an hour;
    without a budget, the daily minimum (None, not paced, when that is 0)."""
    s = settings
    if s.daily_budget_usd <= 0:
        return float(s.min_judged_per_day) if s.min_judged_per_day > 0 else None
    usd = s.daily_budget_usd * CAP_PACE * PLAN_S / DAY_S
    return max(1.0, s.min_judged_per_day / 24, usd / (cost or COLD_COST_USD))
