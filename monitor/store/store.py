"""`Store`: the façade over the store's parts, built from one Redis client, its keys and the
settings (each part receives only what it uses). What the parts are: `ragmon.store`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import redis
import redis.asyncio

from ragmon.core.measures import histogram_bounds
from ragmon.core.results import describe
from ragmon.core.wire import SEP, Status, event_ref
from ragmon.settings import Settings
from ragmon.store import scripts
from ragmon.store.address import async_client, sync_client
from ragmon.store.anchors import Anchors
from ragmon.store.apart import PassageRetries
from ragmon.store.delivery import Delivery
from ragmon.store.estimate_summaries import EstimateSummaries
from ragmon.store.event_index import ExploreIndex
from ragmon.store.fields import Field
from ragmon.store.finish import day_keys, day_records_ttl_s, fail_call, finish_call, weight
from ragmon.store.holds import Holds
from ragmon.store.human import HumanGrades
from ragmon.store.ingest import AsyncIngest, Written, plan_ingest, replicated, signal_setup
from ragmon.store.judge_state import JudgeState
from ragmon.store.keys import DAY_TTL_S, Keys
from ragmon.store.ledger import Ledger
from ragmon.store.pool import QueryPool
from ragmon.store.records import (
    Histogram,
    IngestItem,
    Result,
    StoredEvent,
    histograms_of,
    number_of,
    query_hash,
    result_ttl_s,
    text_hash,
    text_of,
)
from ragmon.store.sampling_state import SamplingState
from ragmon.store.sealing import Sealer
from ragmon.store.second_opinions import SecondOpinions
from ragmon.store.series import SWEEP_EVERY_S, SeriesBudget
from ragmon.store.staged import StagedWrite

if TYPE_CHECKING:
    from redis.retry import Retry

HSCAN_COUNT = 1000  # fields per step of `Store.read_hash`
CONNECT_TIMEOUT_S = 5.0  # an unreachable host fails in seconds, not the OS's ~2 minutes


class Store:
    """Redis-backed event store and aggregates for one ragmon deployment."""

    def __init__(self, client: redis.Redis, settings: Settings, keys: Keys | None = None) -> None:
        self.client = client
        self.settings = settings
        self.keys = keys or Keys()
        self._ingest = client.register_script(scripts.INGEST.source)
        self._signal_setup = signal_setup(self.keys, settings)  # INGEST's, built once
        self._staged = StagedWrite(client, self.keys, settings, self._signal_setup)
        self._finish = client.register_script(scripts.FINISH.source)
        self._fail = client.register_script(scripts.FAIL.source)
        self.series = SeriesBudget(client, self.keys, settings, self.counters)
        self.sealer = Sealer(settings)
        self.apart = PassageRetries(client, self.keys, self.sealer)
        self.delivery = Delivery(client, self.keys, settings, self.apart)
        self.explore = ExploreIndex(client, self.keys, settings, self.sealer)
        self.pool = QueryPool(client, self.keys, settings)
        self.ledger = Ledger(client, self.keys, settings)  # what each app holds, by class
        self.anchors = Anchors(client, self.keys, self.ledger)
        self.human = HumanGrades(client, self.keys, self.ledger)
        self.sampling = SamplingState(client, self.keys, self.ledger)
        self.second_opinions = SecondOpinions(client, self.keys, self.ledger)
        self.holds = Holds(client, self.keys, self.ledger, settings)  # OTLP spans held
        self.estimates = EstimateSummaries(client, self.keys, self.delivery.jobs, self.ledger)
        # the histograms' bucket bounds for the configured measure parameters (T's follow a)
        self.bounds = histogram_bounds(settings.measure_params())
        # seconds `read_hash` pauses between its steps: the /metrics renderer spreads its reads
        self.read_pause_s = 0.0

    @classmethod
    def connect(cls, settings: Settings) -> Store:
        """Open a connection pool to `settings.redis_url` (RQ needs bytes, not decoded strings)."""
        if not settings.redis_url:
            raise ValueError("REDIS_URL is not set")
        client = sync_client(
            settings.redis_url, health_check_interval=30, socket_connect_timeout=CONNECT_TIMEOUT_S
        )
        return cls(client, settings)

    @property
    def result_ttl_s(self) -> int:
        return result_ttl_s(self.settings)

    def ping(self) -> bool:
        return bool(self.client.ping())

    def set_retry(self, retry: Retry) -> None:
        """How a long-lived process (a worker, and RQ on the same connection) rides out a
        Redis restart."""
        self.client.set_retry(retry)

    def close(self) -> None:
        """Close the connection pool (a one-off command that is done with Redis)."""
        self.client.close()

    def judge_state(self) -> JudgeState:
        """The LLM judge's fleet-wide state: rate limits, the day's spend, call accounting."""
        return JudgeState(self.client, self.keys)

    def unreachable(self) -> str | None:
        """None when Redis answers PING, else why not in one line (start-up messages)."""
        try:
            self.client.ping()
        except redis.RedisError as exc:
            return str(exc).strip() or type(exc).__name__
        return None

    # ---- ingest -------------------------------------------------------------------------

    def ingest(
        self,
        items: Sequence[IngestItem],
        deadline: float = 0.0,
        sizes: Sequence[int] | None = None,
        enqueue: bool = True,
    ) -> Written:
        """Store new events and put the ones to judge into their apps' pending sets, atomically,
        in one round trip (`ragmon.store.ingest`); enqueues a drain job if none waits (unless
        not `enqueue`: then `wake` says the caller must).

        Per item `(status, created)` (a duplicate id, already stored or earlier in `items`,
        answers the stored status with created False) or, for each request of `sizes` items
        one of whose apps is at RAGMON_QUEUE_LIMIT, an `AppAtLimit`. Nothing is written when
        Redis runs the write past `deadline` (unix seconds; 0: none): it raises instead.
        """
        plan = plan_ingest(self.keys, self.settings, items, deadline, sizes, self._signal_setup)
        written = plan.settle(self._ingest(keys=plan.keys, args=plan.args) if plan.keys else [])
        if plan.keys and self.settings.wait_replicas:
            s = self.settings
            replicated(self.client.wait(s.wait_replicas, s.wait_timeout_ms), s)
        if written.wake and enqueue:
            self.delivery.jobs.enqueue()
        return written

    def ingest_staged(self, items: Sequence[IngestItem], deadline: float = 0.0) -> Written:
        """`ingest` of one large request in short calls (`ragmon.store.staged`), no enqueue."""
        return self._staged.write(items, deadline)

    def async_ingest(self) -> AsyncIngest | None:
        """`ingest` over redis.asyncio for the running event loop (None without REDIS_URL)."""
        url = self.settings.redis_url
        if not url:
            return None
        client = async_client(url, health_check_interval=30)
        return AsyncIngest(client, self.keys, self.settings)

    def statuses(self, refs: Sequence[str]) -> list[str | None]:
        """The stored status of each event by `event_ref` (None when unknown or expired)."""
        with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hget(self.keys.event(ref), Field.STATUS)
            return [s.decode() if s is not None else None for s in pipe.execute()]

    def record_rejection(self, reason: str, count: int = 1) -> None:
        self.incr(f"events_rejected{SEP}{reason}", count)

    def record_otlp_spans(self, outcome: str, count: int) -> None:
        """Spans received on /v1/traces: `event`, `nested`, `ignored` or `rejected`."""
        self.incr(f"otlp_spans{SEP}{outcome}", count)

    def record_otlp_holds(self, outcome: str, count: int) -> None:
        """What became of /v1/traces retriever spans whose parent was in another export."""
        self.incr(f"otlp_holds{SEP}{outcome}", count)

    def record_otlp_repairs(self, repair: str, count: int) -> None:
        """Repairs that made events of /v1/traces spans: `labels_repaired` and the others
        of `ragmon_otlp_repairs` (`ragmon.core.catalog`)."""
        self.incr(f"otlp_repairs{SEP}{repair}", count)

    # ---- events and results ----------------------------------------------------------------

    def load_events(self, refs: Sequence[str]) -> list[StoredEvent | None]:
        """Payload, status, receipt time and claims so far (`_attempts`) of each event by
        `event_ref` (None when unknown or expired)."""
        with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                fields = (Field.PAYLOAD, Field.STATUS, Field.RECEIVED, Field.ATTEMPTS)
                pipe.hmget(self.keys.event(ref), *fields)
                pipe.get(self.keys.event_texts(ref))
            raw = pipe.execute()
        out: list[StoredEvent | None] = []
        for (payload, status, rt, attempts), texts in zip(raw[::2], raw[1::2], strict=True):
            payload = texts if texts is not None else payload  # a judged event's, with texts
            if status is None or payload is None:
                out.append(None)
                continue
            event: StoredEvent = json.loads(self.sealer.open(payload))
            event["_status"] = Status(status.decode())
            event["_received_at"] = float(rt)
            event["_attempts"] = int(attempts or 0)
            out.append(event)
        return out

    def finish(
        self,
        event: StoredEvent,
        result: Result,
        grades: Sequence[int | None],
        stripped_payload: str | None = None,
        judge: str | None = None,
        series_counts: dict[str, int] | None = None,
        inclusion: float | None = None,
        now: float | None = None,
    ) -> bool:
        """Store an event's result and its observations atomically; False if already done.

        `judge` is the identity of the judge that graded it (kept in the per-day record for the
        report); `inclusion` the probability with which it was chosen for judging (default: its
        own, else RAGMON_SAMPLE_RATE). `series_counts` adds to per-series counters once with
        it: `name` or `name|reason` becomes the field `name|app|index|retriever|segment[|reason]`.
        `now`: when it is finished (default the system's time; a test's hours).
        """
        now = time.time() if now is None else now
        call = finish_call(
            self.keys, self.settings, self.bounds, event, result, grades, now, stripped_payload,
            judge, series_counts, inclusion,
        )  # fmt: skip
        with self.client.pipeline(transaction=True) as pipe:
            self._finish(keys=call.keys, args=call.args, client=pipe)
            # the explorer's index, in the same step, each event weighing as in the histograms
            self.explore.index(pipe, event, result, weight(self.settings, event, inclusion), now)
            day_hist, day_counters, day_events, day_apps = day_keys(self.keys, event)
            for key in (day_hist, day_counters, day_apps):
                pipe.expire(key, DAY_TTL_S)
            pipe.expire(day_events, day_records_ttl_s(self.settings))
            pipe.set(self.keys.series_sweep, 1, nx=True, ex=SWEEP_EVERY_S)
            replies = pipe.execute()
        self.explore.indexed(replies[1], now)
        if replies[-1]:  # this process sweeps for the fleet
            if self.settings.series_idle_days > 0:
                self.series.free_idle(now)
            self.explore.trim(now)
        return bool(replies[0])

    def fail(self, ref: str, reason: str, message: str) -> bool:
        """Mark a queued event failed with a reason; False if it was not queued."""
        call = fail_call(self.keys, ref, reason, message, time.time())
        return bool(self._fail(keys=call.keys, args=call.args))

    def result(self, app: str, event_id: str) -> dict[str, Any] | None:
        """What `GET /v1/retrievals/{id}` answers for `app`'s event, or None when that app has
        no such event (another app's event of the same id is never read)."""
        ref = event_ref(app, event_id)
        f = Field
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(self.keys.event(ref), f.STATUS, f.RESULT, f.PAYLOAD, f.RECEIVED, f.ERROR)
            pipe.hvals(self.keys.human_grades(ref))
            pipe.get(self.keys.event_texts(ref))
            fields, people, texts = pipe.execute()
        status, result, payload, rt, error = fields
        payload = texts if texts is not None else payload  # within RAGMON_TEXT_TTL_DAYS
        if status is None:
            return None
        return describe(
            event_id,
            text_of(status),
            json.loads(result) if result is not None else None,
            json.loads(self.sealer.open(payload)) if payload is not None else None,
            float(rt) if rt is not None else None,
            text_of(error) if error is not None else None,
            show_text=self.settings.store_text,
            human=sorted((json.loads(x) for x in people), key=lambda r: r["at"]),
        )

    def results(self, refs: Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored results (grades, measures) of many events by `event_ref`, in one round
        trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hget(self.keys.event(ref), Field.RESULT)
            rows = pipe.execute()
        return [json.loads(r) if r is not None else None for r in rows]

    def failed_refs(self, limit: int = 100_000) -> list[str]:
        """The `event_ref`s of failed events, oldest failure first."""
        refs = cast(list[bytes], self.client.zrange(self.keys.failed, 0, limit - 1))
        return [x.decode() for x in refs]

    def requeue(self, refs: Iterable[str]) -> int:
        """Put failed events back into their apps' pending sets (status queued); returns how
        many. Refs whose event expired leave the failed set."""
        n = self.delivery.requeue(refs)
        if n:
            self.delivery.wake()
        return n

    # ---- counters and histograms ----------------------------------------------------------

    def incr(self, field: str, amount: float = 1, day: str | None = None) -> None:
        """Add to a lifetime counter (and to the per-day one when `day` is given)."""
        with self.client.pipeline(transaction=True) as pipe:
            self._incr(pipe, self.keys.counters, field, amount)
            if day:
                self._incr(pipe, self.keys.day_counters(day), field, amount)
                pipe.expire(self.keys.day_counters(day), DAY_TTL_S)
            pipe.execute()

    @staticmethod
    def _incr(pipe: redis.client.Pipeline, key: str, field: str, amount: float) -> None:
        if isinstance(amount, int):
            pipe.hincrby(key, field, amount)
        else:
            pipe.hincrbyfloat(key, field, amount)

    def counters(self, day: str | None = None) -> dict[str, float]:
        key = self.keys.day_counters(day) if day else self.keys.counters
        return {text_of(k): number_of(v) for k, v in self.read_hash(key).items()}

    def read_hash(self, key: str) -> dict[bytes, bytes]:
        """A whole hash, read in HSCAN steps of `HSCAN_COUNT` fields rather than one HGETALL.

        With hundreds of series the lifetime histograms hold a hundred thousand fields: one
        HGETALL kept Redis busy long enough that every ingest write and worker finish waited
        behind it (the /metrics render's cost to the ingest p99); a step is short. Not a
        snapshot: a field
        written during the read is seen before or after its change (`histograms` keeps each
        histogram consistent anyway)."""
        out: dict[bytes, bytes] = {}
        cursor = None
        while cursor != 0:
            cursor, part = self.client.hscan(key, cursor or 0, count=HSCAN_COUNT)
            out.update(cast(dict[bytes, bytes], part))
            if cursor and self.read_pause_s > 0:  # the /metrics renderer spreads its reads
                time.sleep(self.read_pause_s)
        return out

    def histograms(
        self, bounds: dict[str, Sequence[float]], day: str | None = None
    ) -> dict[str, dict[tuple[str, ...], Histogram]]:
        """Lifetime (or one day's) histograms by name, then label values (`histograms_of`)."""
        return histograms_of(self.read_hash(self.keys.day_hist(day) if day else self.keys.hist),
                             bounds)  # fmt: skip

    def distinct_queries(self, day: str, series: Sequence[str]) -> list[int]:
        """Each series' distinct queries on one UTC day (HyperLogLog estimates), in one round
        trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for name in series:
                pipe.pfcount(self.keys.day_queries(day, name))
            return [int(n) for n in pipe.execute()]

    def distinct_queries_over(self, days: Sequence[str], series: Sequence[str]) -> int:
        """Distinct queries of `series` together over `days` (the union of their days'
        HyperLogLogs, kept `QUERIES_TTL_S`; 0 where none is kept)."""
        keys = [self.keys.day_queries(d, name) for d in days for name in series]
        return int(self.client.pfcount(*keys)) if keys else 0

    def app_day_events(self, day: str, app: str) -> list[dict[str, Any]]:
        """One app's compact per-event results of one UTC day: its own list only (never the
        list all apps shared before they had their own, nor another app's)."""
        return [json.loads(x) for x in cast(list[bytes], self.client.lrange(
            self.keys.day_events(day, app), 0, -1))]  # fmt: skip

    def apps_on(self, days: Iterable[str]) -> set[str]:
        """The apps with per-day records on any of these UTC days."""
        with self.client.pipeline(transaction=False) as pipe:
            for day in days:
                pipe.smembers(self.keys.day_apps(day))
            return {x.decode() for found in pipe.execute() for x in found}

    def day_events(self, day: str, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The compact per-event results kept for one UTC day: every app's (each app's newest
        last; `only`: these apps' lists alone), after those of the list all apps shared before."""
        apps = sorted(
            x.decode() for x in cast(set[bytes], self.client.smembers(self.keys.day_apps(day)))
        )
        if only is not None:
            wanted = set(only)
            apps = [a for a in apps if a in wanted]
        with self.client.pipeline(transaction=False) as pipe:
            for key in [self.keys.day_events(day), *(self.keys.day_events(day, a) for a in apps)]:
                pipe.lrange(key, 0, -1)
            lists = pipe.execute()
        return [json.loads(x) for raw in lists for x in raw]

    # ---- judgment cache ---------------------------------------------------------------------

    def cached_grades(
        self, model: str, prompt_version: str, query: str, texts: Sequence[str], app: str | None
    ) -> list[int | None]:
        """Grades cached for (model, prompt version, query, text) of `app` (None: the shared
        cache); None where not cached."""
        raw = self._cached(model, prompt_version, query, texts, app)
        return [int(v) if v is not None else None for v in raw]

    def cached_p(
        self, model: str, prompt_version: str, query: str, texts: Sequence[str], app: str | None
    ) -> list[float | None]:
        """Cached p(NO-RESPONSE) of the utility probe, like `cached_grades`."""
        raw = self._cached(model, prompt_version, query, texts, app)
        return [float(v) if v is not None else None for v in raw]

    def _cached(
        self, model: str, prompt_version: str, query: str, texts: Sequence[str], app: str | None
    ) -> list[bytes | None]:
        if not texts:
            return []
        qh = query_hash(query)
        keys = [self.keys.judgment(model, prompt_version, qh, text_hash(t), app) for t in texts]
        return list(self.client.mget(keys))  # type: ignore[arg-type]

    def cache_grades(
        self,
        model: str,
        prompt_version: str,
        query: str,
        graded: Sequence[tuple[str, float]],
        app: str | None,
    ) -> None:
        """Remember grades (or probe p's) of (text, value) pairs of `app` (None: the shared
        cache) for the cache TTL (0 days: no caching); the prompt version keeps the two apart."""
        ttl = int(self.settings.cache_ttl_days * 86400)
        if ttl <= 0 or not graded:
            return
        qh = query_hash(query)
        with self.client.pipeline(transaction=False) as pipe:
            for text, grade in graded:
                pipe.set(
                    self.keys.judgment(model, prompt_version, qh, text_hash(text), app),
                    grade,
                    ex=ttl,
                )
            pipe.execute()

    def queue_depth(self) -> int:
        """Events waiting to be judged: pending or leased, every app."""
        return self.delivery.counts()[0]

    def retrying_jobs(self) -> int:
        """Events waiting out a retry delay after a passing judge failure."""
        return self.delivery.counts()[1]
