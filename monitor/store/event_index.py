"""The event explorer's index in Redis: written in the workers' finish step, read by searches.

What a search means is `ragmon.core.search`, how members and records encode an event
`ragmon.core.index_members` (both pure); this module only moves them in and out of Redis. Per
series (after the series budget's folding, as on /metrics): a lex-ordered set by time, one per
sortable measure, a hash of compact records and a set of refs by expiry (`Keys.explore_*`).
Entries leave with their event (the result retention, RAGMON_RESULT_TTL_DAYS): each finish
trims its own series and the hourly sweep trims all.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import redis

from ragmon.core.index_members import (
    HOUR_KEEP_S,
    OVERVIEW,
    SORTS,
    encode_time,
    index_members,
    measure_member_parts,
    member_ref,
    overview_hours,
    record,
    row,
    time_member,
    weighted_moments,
    within,
)
from ragmon.core.search import SCAN_BUDGET, Search, encode_cursor
from ragmon.core.wire import (
    LABEL_KEYS,
    SEP,
    Status,
    alternatives,
    event_ref,
    series_app,
)
from ragmon.store import scripts
from ragmon.store.failed_page import failed_page
from ragmon.store.fields import HourPart, Slot
from ragmon.store.index_walk import Page, Walk
from ragmon.store.keys import OTHER, Keys, fold
from ragmon.store.records import result_ttl_s, text_of

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store.sealing import Sealer

TRIM_PER_FINISH = 16  # expired events dropped per finish: more than one arrives, so it keeps up
TRIM_PER_CALL = 200  # expired events one sweep call drops (a few ms of Redis)
CANDIDATE_CAP = 20_000  # members a selective threshold may list instead of walking by time
OVERVIEW_CHUNK = 10  # series per OVERVIEW call: Redis is held briefly at a time
SUMMARY_CHUNK = 10  # series per SUMMARIZE call (each may read 191 hourly hashes)
SUMMED = [f"{m}{SEP}{part}" for m in OVERVIEW for part in HourPart]  # a summary's sums, in order


def trace_pointer(series: str, ref: str) -> str:
    """What the trace hash keeps of an indexed event: its series and ref (EXPLORE_INDEX stores
    it as given, the series filled in for `Slot.SERIES`; pointers an earlier release's script
    encoded decode alike)."""
    return json.dumps([series, ref], separators=(",", ":"))


def trace_field(app: str, trace_id: str) -> str:
    """The trace hash's field of an app's trace."""
    return f"{app}{SEP}{trace_id}"


def pointed(raw: bytes | str) -> tuple[str, str]:
    """The (series, ref) of a trace pointer."""
    series, ref = json.loads(raw)
    return series, ref


class ExploreIndex:
    """The explorer's keys of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings, sealer: Sealer) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self.sealer = sealer
        self._index = client.register_script(scripts.EXPLORE_INDEX.source)
        self._trim = client.register_script(scripts.EXPLORE_TRIM.source)
        self._overview = client.register_script(scripts.OVERVIEW.source)
        self._summarize = client.register_script(scripts.SUMMARIZE.source)
        k, s = self.keys, Slot.SERIES
        self._templates = {
            "time_key": k.explore_time(s), "measure_key": k.explore_measure(Slot.MEASURE, s),
            "records_key": k.explore_records(s), "expiry_key": k.explore_expiry(s),
            "app_key": k.explore_app_series(s),
        }  # fmt: skip
        self._keys = {"indexed": k.explore_series, "traces": k.explore_traces}
        self._summary_args = {
            "hour_key": k.explore_hour(s, Slot.HOUR), "summary_key": k.explore_summary(s),
            "parts": len(HourPart),
        }  # fmt: skip
        self._fields = {"fields": SUMMED}

    # ---- writing (workers) --------------------------------------------------------------------

    def index(
        self,
        pipe: redis.client.Pipeline,
        event: Mapping[str, Any],
        result: Mapping[str, Any],
        weight: float = 1.0,
        now: float | None = None,
    ) -> None:
        """Queue the index write on the finish step's transaction `pipe` (after FINISH);
        `weight`: what the event counts for in the overview's means (1 / its inclusion
        probability with planned sampling, as in the quality histograms). The series' overview
        summary is brought to the hour of `now` in the same step."""
        now = time.time() if now is None else now
        rec = record(event, result, now + result_ttl_s(self.settings), self.settings.store_text)
        ref = event_ref(rec["app"], rec["id"])
        measures = result["measures"]
        hourly = [x for m in OVERVIEW if (v := measures.get(m)) is not None for x in (m, repr(v))]
        at, sortable = index_members(rec, ref)
        call = scripts.EXPLORE_INDEX.call(
            keys={**self._keys, "event": self.keys.event(ref)},
            args={
                **self._templates,
                **self._summary_args,
                "now": now,
                "record": json.dumps(rec, separators=(",", ":")),
                "time_member": at,
                "hour": int(rec["t"]) // 3_600_000,
                "expires": rec["e"],
                "trace_field": trace_field(rec["app"], rec["tid"]) if rec.get("tid") else "",
                "trace": trace_pointer(Slot.SERIES, ref),
                "ref": ref,
                "hour_ttl": HOUR_KEEP_S,
                "orphan": fold(OTHER)[0],
                "fold_tail": SEP.join([OTHER] * (len(LABEL_KEYS) - 1)),
                "weight": repr(float(weight)),
            },
            lists={**self._fields, "sortable": [x for kv in sortable for x in kv],
                   "hourly": hourly},
        )  # fmt: skip
        self._index(keys=call.keys, args=call.args, client=pipe)

    def indexed(self, reply: list[Any], now: float) -> None:
        """After the finish step: trim the series EXPLORE_INDEX (`reply`) indexed into when it
        holds expired events."""
        if int(reply[0]) and int(reply[2]):
            self.trim_series(text_of(reply[1]), now, TRIM_PER_FINISH)

    def trim_series(self, series: str, now: float, limit: int) -> int:
        """Drop up to `limit` expired events of `series` (EXPLORE_TRIM), their index members
        read from their records here; returns how many."""
        k = self.keys
        expired = cast(
            list[bytes],
            self.client.zrangebyscore(k.explore_expiry(series), "-inf", now, start=0, num=limit),
        )
        refs = [r.decode() for r in expired]
        raws: list[bytes | None] = []
        if refs:
            raws = cast(list[bytes | None], self.client.hmget(k.explore_records(series), refs))
        lists: dict[str, list[str]] = {"refs": refs, "time_members": [], "measure_members": []}
        traced: dict[str, str] = {}  # trace field -> the ref it should point to
        for ref, raw in zip(refs, raws, strict=True):
            if raw is None:
                continue
            rec = json.loads(raw)
            at, sortable = index_members(rec, ref)
            lists["time_members"].append(at)
            lists["measure_members"] += [x for kv in sortable for x in kv]
            if rec.get("tid"):
                traced[trace_field(rec["app"], rec["tid"])] = ref
        held: list[bytes | None] = []
        if traced:
            held = cast(list[bytes | None], self.client.hmget(k.explore_traces, list(traced)))
        lists["traces"] = [
            x for (field, ref), p in zip(traced.items(), held, strict=True)
            if p is not None and pointed(p)[1] == ref for x in (field, p.decode())
        ]  # fmt: skip
        call = scripts.EXPLORE_TRIM.call(
            keys=self._keys, args={**self._templates, "now": now, "series": series}, lists=lists
        )
        return int(self._trim(keys=call.keys, args=call.args))

    def trim(self, now: float | None = None) -> int:
        """Drop expired events from every series (the hourly sweep), `TRIM_PER_CALL` at a time
        so that no call holds Redis for long; returns how many."""
        now = now or time.time()
        dropped = 0
        held = cast(
            list[tuple[bytes, float]],
            self.client.zrange(self.keys.explore_series, 0, -1, withscores=True),
        )
        with self.client.pipeline(transaction=False) as pipe:  # each app's set of its series
            for raw, when in held:
                name = raw.decode()
                pipe.zadd(self.keys.explore_app_series(series_app(name)), {name: when}, gt=True)
            pipe.execute()
        for series in self.series():
            while True:
                n = self.trim_series(series, now, TRIM_PER_CALL)
                dropped += n
                if n < TRIM_PER_CALL:
                    break
        return dropped

    def summarize(self, now: float | None = None) -> int:
        """Bring every indexed series' overview summary to the hour of `now` (made from the
        hourly sums when it is missing or older than two hours), `SUMMARY_CHUNK` series a call
        so that no call holds Redis for long; returns how many changed."""
        hour = int((time.time() if now is None else now) // 3600)
        series = sorted(self.series())
        changed = 0
        for i in range(0, len(series), SUMMARY_CHUNK):
            call = scripts.SUMMARIZE.call(
                keys={},
                args={**self._summary_args, "hour": hour, "hour_ttl": HOUR_KEEP_S},
                more_args=series[i : i + SUMMARY_CHUNK],
                lists=self._fields,
            )
            changed += int(self._summarize(keys=call.keys, args=call.args))
        return changed

    def keep_summaries(self, now: float | None = None) -> int | None:
        """`summarize` once an hour for the fleet (the workers' maintenance calls it every
        minute: the first caller of an hour does it); None when already done this hour."""
        now = time.time() if now is None else now
        hour = int(now // 3600)
        if not self.client.set(self.keys.explore_summaries_made(hour), 1, nx=True, ex=3 * 3600):
            return None
        return self.summarize(now)

    # ---- reading (API) ------------------------------------------------------------------------

    def series(self, search: Search | None = None) -> list[str]:
        """Indexed series matching the search's labels, most recently indexed first. A search
        of one app reads only that app's series (`Keys.explore_app_series`)."""
        names = (
            self._app_series(search.labels["app"]) if search and "app" in search.labels else None
        )
        if names is None:
            raw = self.client.zrevrange(self.keys.explore_series, 0, -1)
            names = [x.decode() for x in raw]  # type: ignore[union-attr]
        return [s for s in names if search is None or search.series_matches(s)]

    def _app_series(self, apps: str) -> list[str] | None:
        """The series of the apps `a|b...`, most recently indexed first; None when an app has
        no set of its own yet (indexed before apps had them: the hourly sweep makes it)."""
        with self.client.pipeline(transaction=False) as pipe:
            for app in alternatives(apps):
                pipe.exists(self.keys.explore_app_series(app))
                pipe.zrevrange(self.keys.explore_app_series(app), 0, -1, withscores=True)
            replies = pipe.execute()
        if not all(replies[::2]):
            return None
        held = sorted(((-t, x.decode()) for got in replies[1::2] for x, t in got))
        return [name for _, name in held]

    def draw(
        self, series: str, n: int, since: float | None = None, now: float | None = None
    ) -> list[str]:
        """Up to `n` distinct refs of the series' indexed (judged, unexpired) events, drawn
        uniformly at random: the review page's sample. `since` (unix seconds): only events at
        or after it, the window the corrected estimates count (else the whole retention).
        Reads a count and one member per draw, whatever the series holds."""
        now = now or time.time()
        key = self.keys.explore_time(series)
        start = "-" if since is None else "[" + encode_time(since)
        held = int(self.client.zlexcount(key, start, "+"))
        if not held:
            return []
        offsets = random.sample(range(held), min(n, held))
        with self.client.pipeline(transaction=False) as pipe:
            for off in offsets:
                pipe.zrangebylex(key, start, "+", start=off, num=1)
            members = [m.decode() for got in pipe.execute() for m in got]
        refs = [member_ref(m, "time") for m in members]
        if not refs:
            return []
        records = cast(
            list[bytes | None], self.client.hmget(self.keys.explore_records(series), refs)
        )
        return [
            ref for ref, rec in zip(refs, records, strict=True)
            if rec is not None and json.loads(rec).get("e", now + 1) >= now
        ]  # fmt: skip

    def counts(self, series: list[str], since: float | None = None) -> list[int]:
        """How many events each series holds in the index (its retained, judged events), or
        holds from `since` (unix seconds) on."""
        with self.client.pipeline(transaction=False) as pipe:
            for s in series:
                if since is None:
                    pipe.zcard(self.keys.explore_time(s))
                else:
                    pipe.zlexcount(self.keys.explore_time(s), "[" + encode_time(since), "+")
            return [int(n) for n in pipe.execute()]

    def overview(self, search: Search, now: float | None = None) -> list[dict[str, Any]]:
        """Per indexed series matching `search`: events held, whether its summary is made
        (`made`), and per `OVERVIEW` measure the (n, mean, variance) over the last 24 hours and
        over the 7 days before (None without events, or while the summary is not made), from
        each series' summary and this hour's sums. Reads only: two keys a series, three more
        per hour the summary is behind (two at most)."""
        series = sorted(self.series(search))
        recent, _ = overview_hours(time.time() if now is None else now)
        n, parts = len(SUMMED), len(HourPart)
        out = []
        for i in range(0, len(series), OVERVIEW_CHUNK):  # no call holds Redis for long
            chunk = series[i : i + OVERVIEW_CHUNK]
            call = scripts.OVERVIEW.call(
                keys={},
                args={**self._summary_args, "time_key": self._templates["time_key"],
                      "hour": recent[-1]},
                more_args=chunk,
                lists=self._fields,
            )  # fmt: skip
            lines = cast(list[bytes], self._overview(keys=call.keys, args=call.args))
            for s, line in zip(chunk, lines, strict=True):
                got = line.split()
                row: dict[str, Any] = {"series": s, "events": int(got[0]), "made": got[1] == b"1"}
                if row["made"]:  # the summary's windows, this hour's sums added to the recent
                    sums = [float(x) for x in got[2:]]
                    live = sums[2 * n :]
                    windows = {"recent": [a + b for a, b in zip(sums[:n], live, strict=True)],
                               "before": sums[n : 2 * n]}  # fmt: skip
                for window in ("recent", "before"):
                    row[window] = {
                        m: weighted_moments(*windows[window][parts * k : parts * (k + 1)])
                        if row["made"] else None
                        for k, m in enumerate(OVERVIEW)
                    }  # fmt: skip
                out.append(row)
        return out

    def search(self, search: Search, now: float | None = None, budget: int = SCAN_BUDGET) -> Page:
        """One page of events matching `search` (`ragmon.core.search`), reading at most
        `budget` records."""
        now = now or time.time()
        series = self.series(search)
        if search.trace_id:
            return self._by_trace(search, search.trace_id, series, now)
        if search.status == Status.FAILED:
            return failed_page(self.client, self.keys, self.sealer, search, budget)
        listed = self._candidates(search, series)
        if listed is not None:
            return self._check_in_order(search, listed, now, budget)
        return Walk(self, search, series, now, budget).run()

    def _candidates(self, search: Search, series: list[str]) -> list[tuple[str, str]] | None:
        """Newest-first (or oldest-first) searches with thresholds on sortable measures: the
        events inside every threshold's range of its index, as (time member, series) in order,
        when one of those ranges holds at most CANDIDATE_CAP events; else None (walk the time
        index). A selective threshold then reads its few members, not the whole time order."""
        measures = sorted({b.measure for b in search.bounds if b.measure in SORTS[1:]})
        if search.sort != "time" or not measures or not series:
            return None
        ranges = {m: search.measure_range(m) for m in measures}
        with self.client.pipeline(transaction=False) as pipe:
            for m in measures:
                for s in series:
                    pipe.zlexcount(self.keys.explore_measure(m, s), *ranges[m])
            counts = iter(pipe.execute())
        totals = {m: sum(int(next(counts)) for _ in series) for m in measures}
        chosen = [m for m in measures if totals[m] <= CANDIDATE_CAP]
        if not chosen:
            return None
        with self.client.pipeline(transaction=False) as pipe:
            for m in chosen:
                for s in series:
                    pipe.zrangebylex(self.keys.explore_measure(m, s), *ranges[m])
            replies = iter(pipe.execute())
        found: dict[str, dict[str, str]] = {s: {} for s in series}  # series -> ref -> time
        for i in range(len(chosen)):
            for s in series:
                times = {}
                for raw in next(replies):
                    _, ts, ref = measure_member_parts(raw.decode())
                    times[ref] = ts
                found[s] = times if i == 0 else {r: t for r, t in found[s].items() if r in times}
        lo, hi = search.lex_range()  # the time range and the cursor, on time members
        listed = [
            (member, s)
            for s, refs in found.items()
            for ref, ts in refs.items()
            if within(member := time_member(ts, ref), lo, hi)
        ]
        listed.sort(reverse=search.descending)
        return listed

    def _check_in_order(
        self, search: Search, listed: list[tuple[str, str]], now: float, budget: int
    ) -> Page:
        """Read the records of `listed` in order until the page is full or `budget` is spent."""
        page, i, last = Page(), 0, None
        while i < len(listed) and len(page.events) < search.limit and page.scanned < budget:
            want = min(max(64, 2 * (search.limit - len(page.events))), budget - page.scanned)
            batch = listed[i : i + want]
            i += len(batch)
            with self.client.pipeline(transaction=False) as pipe:
                for member, s in batch:
                    pipe.hget(self.keys.explore_records(s), member_ref(member, "time"))
                records = pipe.execute()
            for (member, s), raw in zip(batch, records, strict=True):
                page.scanned += 1
                last = member
                if raw is not None and search.record_matches(rec := json.loads(raw), now):
                    page.events.append(row(s, member_ref(member, "time"), rec))
                    if len(page.events) == search.limit:
                        break
        page.partial = len(page.events) < search.limit and i < len(listed)
        if last is not None and (page.partial or len(page.events) == search.limit):
            page.cursor = encode_cursor(search, last)
        return page

    def _by_trace(self, search: Search, trace_id: str, series: list[str], now: float) -> Page:
        apps = [search.labels["app"]] if "app" in search.labels else sorted(
            {series_app(s) for s in series}
        )  # fmt: skip
        if not apps:
            return Page()
        held = self.client.hmget(self.keys.explore_traces, [trace_field(a, trace_id) for a in apps])
        page = Page()
        for raw in held:
            if raw is None:
                continue
            s, ref = pointed(raw)
            if s not in series:
                continue
            rec = self.client.hget(self.keys.explore_records(s), ref)
            page.scanned += 1
            if rec is not None and search.record_matches(r := json.loads(rec), now):
                page.events.append(row(s, ref, r))
        return page
