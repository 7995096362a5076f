"""Micro-batching of Redis writes: concurrent requests share one transaction.

Each request hands its validated events to the `IngestWriter` and awaits a future; one task
drains everything pending into a single ingest call (`Store.async_ingest`: one Lua round trip
on redis.asyncio, so the event loop never blocks on Redis and pays no thread hop), and the
write cost is paid per batch, not per request. While one batch is in flight the next one
gathers, so batches grow with the load, up to `MAX_FLUSH_EVENTS`. A request of more than
`SMALL_REQUEST` events is written on its own, in short calls (`ragmon.store.staged`): Redis runs
one script at a time, and another app's event waits for no long one.

The same call puts the events to judge into their apps' pending sets and refuses a request
whose app is at RAGMON_QUEUE_LIMIT (`AppAtLimit`); when no drain job waits in RQ's queue, the
writer enqueues one once the batch's requests are answered (`ragmon.store.delivery`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Mapping

from ragmon.api.logs import KindLimiter
from ragmon.store import IngestItem, Store
from ragmon.store.ingest import Answer, AppAtLimit, AsyncIngest

log = logging.getLogger("ragmon.api")

MAX_FLUSH_EVENTS = 100  # one Lua call blocks Redis: a batch's script stays short
LINGER_S = 0.002
SMALL_REQUEST = 50  # events: a larger request is written on its own, staged
LINGER_BELOW = 8  # events in the previous write
# The write's deadline in Redis comes this much before the API stops waiting: Redis refuses a
# write it runs later, so no write the API answered 503 for can land, with clocks up to this far
# apart (NTP keeps them within milliseconds).
DEADLINE_MARGIN_S = 1.0


def sampled_in(event_id: str, rate: float) -> bool:
    """Deterministic sampling on the event id: a retried event gets the same decision."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    h = int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=8).digest(), "big")
    return h / 2**64 < rate


class IngestWriter:
    """Collects ingest requests and writes them to Redis in batches."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: list[tuple[list[IngestItem], asyncio.Future, float]] = []
        self.timeout_s = store.settings.store_timeout_s
        self.log = KindLimiter(log)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._waker: asyncio.Task | None = None
        self._drain_wanted = asyncio.Event()
        self._rejections: Counter[str] = Counter()
        self._spans: Counter[str] = Counter()  # /v1/traces spans by outcome
        self._repairs: Counter[str] = Counter()  # /v1/traces repairs by kind
        self._holds: Counter[str] = Counter()  # held /v1/traces spans by outcome
        self._ingest: AsyncIngest | None = None
        self._last_write = 0

    async def start(self) -> None:
        self._ingest = self.store.async_ingest()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="ragmon-ingest-writer")
        self._waker = asyncio.create_task(self._wake_loop(), name="ragmon-drain-waker")

    async def stop(self) -> None:
        for task in (self._task, self._waker):
            if task is not None:
                await cancel(task)
        await self._flush_rejections()
        if self._drain_wanted.is_set():  # a write's drain job not enqueued yet
            await self._enqueue_drain()
        if self._ingest is not None:
            await self._ingest.aclose()
            self._ingest = None

    async def submit(self, items: list[IngestItem]) -> list[Answer] | AppAtLimit:
        """Store items durably; returns `(status, created)` per item, or the refusal of the
        whole request when one of its apps is at RAGMON_QUEUE_LIMIT. Raises on Redis errors
        and after RAGMON_STORE_TIMEOUT_S (TimeoutError): then Redis will refuse the write if it
        ever runs it, so the caller's 503 is true and a retry is never counted twice."""
        deadline = time.time() + self.timeout_s - DEADLINE_MARGIN_S
        if len(items) > SMALL_REQUEST and self._ingest is not None:
            return await asyncio.wait_for(self._write_staged(items, deadline), self.timeout_s)
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((items, fut, deadline))
        assert self._wake is not None
        self._wake.set()
        return await asyncio.wait_for(fut, self.timeout_s)

    def reject(self, reason: str, count: int = 1) -> None:
        """Count a refused request; written with the next batch (never on the request path)."""
        self._rejections[reason] += count
        if self._wake is not None:
            self._wake.set()

    def count_spans(self, outcomes: Mapping[str, int], repairs: Mapping[str, int]) -> None:
        """Count the spans of one trace export by outcome, and the repairs that made events of
        them; written like the rejections."""
        self._spans.update({outcome: n for outcome, n in outcomes.items() if n})
        self._repairs.update({repair: n for repair, n in repairs.items() if n})
        if self._wake is not None:
            self._wake.set()

    def count_holds(self, outcomes: Mapping[str, int]) -> None:
        """Count what became of held spans (`ragmon.api.holding`), written like the rest."""
        self._holds.update({outcome: n for outcome, n in outcomes.items() if n})
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await _wait(self._wake, 1.0)
            self._wake.clear()
            await self._flush_rejections()
            if self._pending and LINGER_S > 0 and self._last_write < LINGER_BELOW:
                # light, steady traffic: let the requests already on their way join this write
                # (a batch of one costs a Redis call per event); under load,
                # batches fill while the previous write is in flight, and waiting only delays
                await asyncio.sleep(LINGER_S)
            while self._pending:
                batch, n, deadline = [], 0, float("inf")
                for items, fut, until in self._next():
                    batch.append((items, fut))
                    n += len(items)
                    deadline = min(deadline, until)
                self._last_write = n
                if batch:
                    await self._write(batch, deadline)

    async def _write_staged(
        self, items: list[IngestItem], deadline: float
    ) -> list[Answer] | AppAtLimit:
        written = await asyncio.to_thread(self.store.ingest_staged, items, deadline)
        if written.wake:
            self._drain_wanted.set()
        return written.request(0, len(items))

    def _next(self) -> list[tuple[list[IngestItem], asyncio.Future, float]]:
        """The requests of the next write, up to `MAX_FLUSH_EVENTS` events: small requests
        first (in order), then large ones (without redis.asyncio, large ones are not staged),
        so that one app's flood of large batches does not hold another app's single events for
        a write each; the rest wait for the next."""
        pending = [p for p in self._pending if not p[1].done()]  # done: answered 503 already
        small = [p for p in pending if len(p[0]) <= SMALL_REQUEST]
        large = [p for p in pending if len(p[0]) > SMALL_REQUEST]
        taken: list[tuple[list[IngestItem], asyncio.Future, float]] = []
        n = 0
        for p in small + large:
            if taken and n + len(p[0]) > MAX_FLUSH_EVENTS:
                continue
            taken.append(p)
            n += len(p[0])
        chosen = {id(p) for p in taken}
        self._pending = [p for p in pending if id(p) not in chosen]
        return taken

    async def _wake_loop(self) -> None:
        """Its own task: enqueuing a drain job never holds up the writes (and their 202s)."""
        while True:
            await self._drain_wanted.wait()
            await self._enqueue_drain()

    async def _enqueue_drain(self) -> None:
        self._drain_wanted.clear()
        try:
            read = asyncio.to_thread(self.store.delivery.jobs.enqueue)
            await asyncio.wait_for(read, self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the events are safe in pending
            # a worker's maintenance tick enqueues one when events are due and none waits
            self.log.warning("wake", "could not enqueue a drain job (%s); a worker will", exc)

    async def _write(
        self, batch: list[tuple[list[IngestItem], asyncio.Future]], deadline: float
    ) -> None:
        flat = [it for items, _ in batch for it in items]
        sizes = [len(items) for items, _ in batch]
        try:
            if self._ingest is not None:
                write = self._ingest.write(flat, deadline, sizes)
            else:  # a store without REDIS_URL: the sync client, in a thread
                write = asyncio.to_thread(self.store.ingest, flat, deadline, sizes, False)
            # a hung connection must not stall every later batch; the deadline keeps a write
            # still on its way from landing
            written = await asyncio.wait_for(write, self.timeout_s)
        except Exception as exc:  # Redis down: every waiting request gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        i = 0
        for items, fut in batch:
            if not fut.done():
                fut.set_result(written.request(i, i + len(items)))
            i += len(items)
        if written.wake:
            self._drain_wanted.set()

    async def _flush_rejections(self) -> None:
        if not (self._rejections or self._spans or self._repairs or self._holds):
            return
        pending, self._rejections = self._rejections, Counter()
        spans, self._spans = self._spans, Counter()
        repairs, self._repairs = self._repairs, Counter()
        holds, self._holds = self._holds, Counter()
        try:
            for reason, n in pending.items():
                await asyncio.to_thread(self.store.record_rejection, reason, n)
            for outcome, n in spans.items():
                await asyncio.to_thread(self.store.record_otlp_spans, outcome, n)
            for repair, n in repairs.items():
                await asyncio.to_thread(self.store.record_otlp_repairs, repair, n)
            for outcome, n in holds.items():
                await asyncio.to_thread(self.store.record_otlp_holds, outcome, n)
        except Exception as exc:  # Redis is down: kept for the next try, one line per 10 s
            self._rejections.update(pending)
            self._spans.update(spans)
            self._repairs.update(repairs)
            self._holds.update(holds)
            why = " ".join(str(exc).split()) or type(exc).__name__
            self.log.warning("counts", "could not record counts (kept for later): %s", why)


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` seconds. Not `wait_for`: on Python 3.11 it drops a
    cancellation that arrives as the event is set, and `stop()` then waited forever."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


async def cancel(task: asyncio.Task) -> None:
    """Cancel `task` until it ends. One cancellation can be lost when it lands just as what
    the task awaits completes (a Redis write, or `asyncio.wait_for` on Python 3.11), and then a
    single cancel-and-await waits forever: a stopping server must not. An error the task ended
    with is raised, as awaiting it would."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    if not task.cancelled():
        task.result()
