"""Every Redis key ragmon writes, in one place. RQ keeps its own keys under `rq:`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from ragmon.core.wire import LABEL_KEYS, SEP, field_name
from ragmon.store.fields import Name, Slot

OTHER = "other"  # the label value of a folded series (`ragmon.store.series`)
DAY_TTL_S = 400 * 86400  # per-day aggregates: a year of weekly reports plus margin
QUERIES_TTL_S = 15 * 86400  # a day's distinct-query HyperLogLogs (up to 12 kB each): 2 weeks


def fold(app: str) -> tuple[str, str]:
    """Where an event of `app` past the series budget is counted: the folded series
    `app|other|other|other` and its `series_folded|app` counter field (`OTHER` as `app`: the
    all-`other` series of apps without a series of their own)."""
    return field_name(app, *[OTHER] * (len(LABEL_KEYS) - 1)), field_name(Name.SERIES_FOLDED, app)


@dataclass(frozen=True)
class Keys:
    """Key names under a prefix (one ragmon deployment per prefix)."""

    prefix: str = "ragmon"

    def event(self, ref: str) -> str:
        """Hash of one event (`ref` from `event_ref`), its fields `fields.Field`."""
        return f"{self.prefix}:ev:{ref}"

    def staged(self, write: str, n: int) -> str:
        """Event `n` of a large request's write `write` until its commit renames it to its
        `event` key (`ragmon.store.staged`); expires when the write never commits."""
        return f"{self.prefix}:stage:{write}:{n}"

    @property
    def hist(self) -> str:
        """Hash of lifetime histogram fields `name|labels...|b<i>`, `...|sum`, `...|count`."""
        return f"{self.prefix}:h"

    @property
    def counters(self) -> str:
        """Hash of lifetime counters `name|label values...` → number."""
        return f"{self.prefix}:c"

    @property
    def series(self) -> str:
        """Sorted set of the admitted `app|index|retriever|segment` series by the time one of
        their events was last recorded (the series budget; idle ones are freed)."""
        return f"{self.prefix}:series:seen"

    @property
    def series_per_app(self) -> str:
        """Hash app → how many admitted series it holds (the per-app budget)."""
        return f"{self.prefix}:series:apps"

    @property
    def series_sweep(self) -> str:
        """Present while a sweep (idle series, expired explorer entries) was done recently: one
        per hour per fleet."""
        return f"{self.prefix}:series:sweep"

    @property
    def failed(self) -> str:
        """Sorted set of failed event refs by failure time (for `ragmon requeue-failed`)."""
        return f"{self.prefix}:failed"

    def app_failed(self, app: str) -> str:
        """Sorted set of one app's failed event refs by failure time (the explorer's
        `status=failed` search reads only the searching app's)."""
        return f"{self.prefix}:failed:{app}"

    def pending(self, app: str) -> str:
        """Sorted set of one app's events waiting for a drain job, by when each may be taken
        (receipt time; a retry's due time): the delivery path's pending state."""
        return f"{self.prefix}:q:ev:{app}"

    @property
    def pending_template(self) -> str:
        """`pending` with `Slot.APP` for the app: the scripts that find apps as they go."""
        return self.pending(Slot.APP)

    @property
    def pending_apps(self) -> str:
        """Sorted set of the apps with pending events, by their pass (stride scheduling: the
        virtual time of each app's next turn, `ragmon.store.delivery`)."""
        return f"{self.prefix}:q:apps"

    @property
    def virtual_time(self) -> str:
        """The pass of the last turn taken: where an app that starts having pending events
        joins `pending_apps`."""
        return f"{self.prefix}:q:vt"

    @property
    def leased(self) -> str:
        """Sorted set of the event refs drain jobs hold, by the end of their lease (epoch s);
        a lease that ends puts its event back into its app's pending set."""
        return f"{self.prefix}:leased"

    def apart(self, app: str) -> str:
        """Sorted set of one app's passages retried apart from their event (ids), by when the
        next try is due (`ragmon.store.apart`)."""
        return f"{self.prefix}:apart:q:{app}"

    def apart_payloads(self, app: str) -> str:
        """Hash of the same: id → the sealed passage, its query, judge identity and tries."""
        return f"{self.prefix}:apart:p:{app}"

    @property
    def apart_apps(self) -> str:
        """Set of the apps with passages retried apart."""
        return f"{self.prefix}:apart:apps"

    @property
    def drain_wanted(self) -> str:
        """Present while a drain job waits in RQ's queue (set by whoever enqueues it, deleted
        by the job when it starts; expires after `DRAIN_WANTED_TTL_S` in case its enqueuer
        died in between)."""
        return f"{self.prefix}:q:wake"

    @property
    def event_template(self) -> str:
        """`event` with `Slot.REF` for the ref: the scripts that find events as they go."""
        return self.event(Slot.REF)

    @property
    def explore_series(self) -> str:
        """Sorted set of the series the event explorer indexes, by the time one of their events
        was last indexed (`ragmon.store.event_index`)."""
        return f"{self.prefix}:x:series"

    @property
    def explore_traces(self) -> str:
        """Hash `app|trace_id` → `[series, ref]` of the explorer's indexed events."""
        return f"{self.prefix}:x:trace"

    def explore_time(self, series: str) -> str:
        """One series' indexed events by time: members `<time>|<ref>`, all scored 0, so that
        a member is its own sort key and pages continue exactly after a cursor (ZRANGEBYLEX)."""
        return f"{self.prefix}:x:t:{series}"

    def explore_measure(self, measure: str, series: str) -> str:
        """One series' indexed events by one measure: members `<value>|<time>|<ref>`, scored 0."""
        return f"{self.prefix}:x:m:{measure}:{series}"

    def explore_records(self, series: str) -> str:
        """Hash ref → the compact record the explorer filters and lists (`explorer.record`)."""
        return f"{self.prefix}:x:r:{series}"

    def explore_hour(self, series: str, hour: str) -> str:
        """Hash of one series' sums over one hour (unix hours) of the overview's measures:
        `<measure>|n`, `|s`, `|q` (count, sum, sum of squares), for the explorer's overview."""
        return f"{self.prefix}:x:hr:{series}:{hour}"

    def explore_app_series(self, app: str) -> str:
        """Sorted set of one app's indexed series, by the time one of their events was last
        indexed: a search of one app reads only its own series."""
        return f"{self.prefix}:x:a:{app}"

    def explore_summary(self, series: str) -> str:
        """Hash of one series' overview sums over the complete hours of its two windows, made
        for the hour `h` by the workers (each finish step of the series, and once an hour for
        every series: `scripts.SUMMARIZE`): the overview reads it and this hour's sums."""
        return f"{self.prefix}:x:ov:{series}"

    def explore_summaries_made(self, hour: int) -> str:
        """Present (3 hours) once a worker has brought every series' overview summary to that
        unix hour (`ExploreIndex.keep_summaries`): one worker of the fleet does it an hour."""
        return f"{self.prefix}:x:ovmade:{hour}"

    def explore_expiry(self, series: str) -> str:
        """Sorted set of one series' indexed refs by when their event expires (trimming)."""
        return f"{self.prefix}:x:e:{series}"

    def day_hist(self, day: str) -> str:
        """Per-UTC-day histograms of the quality measures (same layout as `hist`)."""
        return f"{self.prefix}:day:{day}:h"

    def day_counters(self, day: str) -> str:
        """Per-UTC-day counters: events, k sums and grades per series, judge spend."""
        return f"{self.prefix}:day:{day}:c"

    def day_queries(self, day: str, series: str) -> str:
        """HyperLogLog of one series' distinct normalized queries on one UTC day (by the
        events' timestamps), written at ingest: `ragmon_signal_queries_distinct`."""
        return f"{self.prefix}:day:{day}:q:{series}"

    def day_empty_queries(self, day: str, series: str) -> str:
        """HyperLogLog of the normalized queries one series answered empty on one UTC day,
        written at ingest: `ragmon_signal_empty_queries` grows by its count's growth, so a
        user's retries of one empty query are one observation, not eight, and the memory is
        one key per series and day whatever the traffic."""
        return f"{self.prefix}:day:{day}:eq:{series}"

    def day_events(self, day: str, app: str | None = None) -> str:
        """Per-UTC-day list of one app's compact per-event records (the drift report's
        comparisons, worst events, clustering), kept per app so that one app's flood of a day
        never trims another's; `app` None: the list of all apps, written before apps had their
        own (still read)."""
        base = f"{self.prefix}:day:{day}:ev"
        return base if app is None else f"{base}:{app}"

    def day_apps(self, day: str) -> str:
        """Set of the apps with per-day records of one UTC day (`day_events(day, app)`)."""
        return f"{self.prefix}:day:{day}:apps"

    def judgment(
        self, model: str, prompt_version: str, query_hash: str, text_hash: str, app: str | None
    ) -> str:
        """A cached grade for (model, prompt version, normalized query, passage text), of one
        app (`jca:{app}|...`: an app never learns from a hit what another app asked), or of
        the whole fleet when `app` is None (RAGMON_SHARED_CACHE; `jc:...`, the layout before
        apps had their own, kept so that a shared cache stays valid)."""
        tail = f"{model}:{prompt_version}:{query_hash}:{text_hash}"
        return f"{self.prefix}:jc:{tail}" if app is None else f"{self.prefix}:jca:{app}{SEP}{tail}"

    def pool(self, app: str, model: str, prompt_version: str, query_hash: str) -> str:
        """Hash of one query's pooled ideal in one app, for one judge identity: passage text
        hash → `<best grade> <unix seconds last seen>` (`ragmon.store.pool`). Always per app,
        as the judgment cache's `jca:{app}|...`: an app's pooled measures never read what
        another app retrieved."""
        return f"{self.prefix}:pool:{app}{SEP}{model}:{prompt_version}:{query_hash}"

    def human_grades(self, ref: str) -> str:
        """Hash of people's grades of one event: field `["passage_id", "reviewer"]` (JSON) →
        the grade's record (`ragmon.store.human`)."""
        return f"{self.prefix}:hg:ev:{ref}"

    def human_texts(self, ref: str) -> str:
        """Hash of the texts people's grades of one event were given on, each once however
        many people graded it: `q` the query, `t:<passage_id>` a passage (the anchor set
        re-judges them after the event has expired)."""
        return f"{self.prefix}:hg:tx:{ref}"

    def human_refs(self, app: str) -> str:
        """Sorted set of one app's events that people graded, by the time of the last change."""
        return f"{self.prefix}:hg:refs:{app}"

    @property
    def human_apps(self) -> str:
        """Set of the apps with people's grades."""
        return f"{self.prefix}:hg:apps"

    @property
    def human_generation(self) -> str:
        """Counter bumped by every change of a person's grade (derived statistics' cache)."""
        return f"{self.prefix}:hg:gen"

    def second_opinions(self, app: str) -> str:
        """Hash of one app's events the second judge graded too: event id → both judges'
        grades (`ragmon.store.second_opinions`)."""
        return f"{self.prefix}:j2:ev:{app}"

    @property
    def second_opinion_apps(self) -> str:
        """Set of the apps with second-judge grades."""
        return f"{self.prefix}:j2:apps"

    @property
    def anchor_set(self) -> str:
        """The anchor set taken from people's grades, frozen at its first run (JSON list of
        `ragmon.core.anchor.AnchorItem`s)."""
        return f"{self.prefix}:anchor:set"

    @property
    def anchor_runs(self) -> str:
        """Hash of the anchor set's re-judgings: run time (ISO) → what it found (JSON)."""
        return f"{self.prefix}:anchor:runs"

    def rate(self, model: str, kind: str) -> str:
        """Sliding-window log of judge requests or tokens for one model."""
        return f"{self.prefix}:rl:{model}:{kind}"

    def traffic(self, hour: str) -> str:
        """Hash series -> events accepted in one UTC hour `YYYYMMDDHH` (the sampling forecast)."""
        return f"{self.prefix}:traffic:{hour}"

    @property
    def sampling_first(self) -> str:
        """Hash series → unix seconds it was first counted (its age: the plan reads a new
        series' traffic over the time it has existed)."""
        return f"{self.prefix}:traffic:first"

    @property
    def sampling_plan(self) -> str:
        """JSON of the current sampling plan (`sampling_state.StoredPlan`)."""
        return f"{self.prefix}:sampling:plan"

    def estimates(self, app: str) -> str:
        """Hash of one app's corrected estimates, summarized by a worker: window (`last`, the
        last 7 UTC days, or an ISO week `YYYY-Www`) → the summary's JSON (`ragmon.oversight`),
        and `CHARGED` → the bytes charged for it (`ragmon.store.estimate_summaries`). Under
        `est:a:`, so that no app name can be one of the fleet's keys beside it (`est:at`)."""
        return f"{self.prefix}:est:a:{app}"

    @property
    def estimates_at(self) -> str:
        """Hash app → unix seconds its estimates were last summarized."""
        return f"{self.prefix}:est:at"

    @property
    def estimates_due(self) -> str:
        """Set of the apps whose estimates a worker summarizes next (people graded)."""
        return f"{self.prefix}:est:due"

    @property
    def estimates_queued(self) -> str:
        """Present while a summarizing job waits to start (one at a time for the fleet)."""
        return f"{self.prefix}:est:queued"

    def pace(self, interval: int, what: str) -> str:
        """Hash series (and `app:` + app) → the events every API process chose in one planning
        interval: `what` "n" their count, "p" the sum of their probabilities (the pacing)."""
        return f"{self.prefix}:sampling:pace:{interval}:{what}"

    @property
    def sampling_lead(self) -> str:
        """Present while one API process plans; its value names the process."""
        return f"{self.prefix}:sampling:lead"

    def spend(self, day: str) -> str:
        """USD spent on the judge on one UTC day (the daily budget)."""
        return f"{self.prefix}:spend:{day}"

    def ledger(self, kind: str, width: int, index: int) -> str:
        """Hash app → bytes charged in class `kind` during bucket `index` of `width` seconds
        (`ragmon.store.ledger`; width 0: the one bucket of a class kept until deleted)."""
        return f"{self.prefix}:lg:{kind}:{width}:{index}"

    @property
    def ledger_since(self) -> str:
        """Hash `kind|app` → unix seconds of the class' first charge (the ledger's rates)."""
        return f"{self.prefix}:lg:since"

    def hold(self, app: str, part: str = "") -> str:
        """One app's OTLP spans held for their parent (`ragmon.store.holds`): the hash (`part`
        ""), and its `|due`, `|w` and `|seen` sorted sets (`|`: never in an app name)."""
        return f"{self.prefix}:hold:{app}{SEP + part if part else ''}"

    @property
    def holds(self) -> str:
        """Sorted set of the apps holding spans, by when the first of them is due."""
        return f"{self.prefix}:holds"

    def event_texts(self, ref: str) -> str:
        """A judged event's payload with its texts, kept RAGMON_TEXT_TTL_DAYS; its hash keeps
        the compact record (texts as hashes) for RAGMON_RESULT_TTL_DAYS."""
        return f"{self.prefix}:tx:{ref}"

    def app_spend(self, day: str) -> str:
        """Hash app → USD its events spent on the judge on one UTC day (the apps' budgets)."""
        return f"{self.prefix}:spend:{day}:apps"


def utc_day(ts: float) -> str:
    """The UTC day of unix time `ts`, as the per-day keys spell it."""
    return datetime.fromtimestamp(ts, UTC).date().isoformat()  # YYYY-MM-DD; cheaper than strftime


def utc_today() -> str:
    return utc_day(time.time())
