"""Micro-batching of Redis writes: concurrent requests share one transaction.

Each request hands its validated events to the `IngestWriter` and awaits a future; one task
drains everything pending into a single ingest call (`Store.async_ingest`: one Lua round trip
on redis.asyncio, so the event loop never blocks on Redis and pays no thread hop), and the
write cost is paid per batch, not per request. While one batch is in flight the next one
gathers, so batches grow with the load.

Grouping window: events that arrive one by one would each become a 1-event RQ job (a work
horse, an event loop and an HTTP client for 20 judge calls: a worker then judges ~45
passages/s instead of ~230). So a write's last, partial job is left open (its events are
stored and their refs kept in `Keys.ungrouped`, atomically) and the writer enqueues it once it
is full or `RAGMON_GROUP_WINDOW_S` has passed since its first event that a running job has not
claimed meanwhile; while jobs already wait in the RQ queue, no worker is free anyway, so the
group keeps filling for up to BUSY_WINDOW_S.
The writer also sweeps refs older than SWEEP_AGE_S into jobs: those of a dead API process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Mapping

from ragmon.api.logs import KindLimiter
from ragmon.store import IngestItem, Store
from ragmon.store.ingest import BUSY_WINDOW_S, SWEEP_AGE_S, Answer, AsyncIngest

log = logging.getLogger("ragmon.api")

MAX_FLUSH_EVENTS = 1000  # one Lua call blocks Redis: keep each write to ~10 MB
LINGER_S = 0.002
LINGER_BELOW = 8  # events in the previous write
DEPTH_REFRESH_S = 0.5
SWEEP_EVERY_S = 5.0
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
        self._grouper: asyncio.Task | None = None
        self._group_wake = asyncio.Event()
        self._rejections: Counter[str] = Counter()
        self._spans: Counter[str] = Counter()  # /v1/traces spans by outcome
        self._repairs: Counter[str] = Counter()  # /v1/traces repairs by kind
        self._depth = 0
        self._depth_at = 0.0
        self._ingest: AsyncIngest | None = None
        self._last_write = 0
        self._window = store.settings.group_window_s
        self._open: list[str] = []  # refs this process left to the grouping window
        self._opened_at = 0.0  # monotonic time of the first of them
        self._swept_at = 0.0

    async def start(self) -> None:
        self._ingest = self.store.async_ingest()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="ragmon-ingest-writer")
        self._grouper = asyncio.create_task(self._group_loop(), name="ragmon-ingest-grouper")

    async def stop(self) -> None:
        for task in (self._task, self._grouper):
            if task is not None:
                await cancel(task)
        await self._flush_rejections()
        await self._close_group()
        if self._ingest is not None:
            await self._ingest.aclose()
            self._ingest = None

    async def submit(self, items: list[IngestItem]) -> list[tuple[str, bool]]:
        """Store items durably; returns `(status, created)` per item. Raises on Redis errors
        and after RAGMON_STORE_TIMEOUT_S (TimeoutError): then Redis will refuse the write if it
        ever runs it, so the caller's 503 is true and a retry is never counted twice."""
        fut = asyncio.get_running_loop().create_future()
        deadline = time.time() + self.timeout_s - DEADLINE_MARGIN_S
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

    async def queue_depth(self) -> int:
        """The RQ queue length, refreshed at most every DEPTH_REFRESH_S seconds (TimeoutError
        after RAGMON_STORE_TIMEOUT_S)."""
        now = time.monotonic()
        if now - self._depth_at > DEPTH_REFRESH_S:
            self._depth_at = now
            read = asyncio.to_thread(self.store.queue_depth)
            self._depth = await asyncio.wait_for(read, self.timeout_s)
        return self._depth

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await _wait(self._wake, 1.0)
            self._wake.clear()
            await self._flush_rejections()
            if self._pending and LINGER_S > 0 and self._last_write < LINGER_BELOW:
                # light, steady traffic: let the requests already on their way join this write
                # (a batch of one costs a Redis call and an RQ job per event); under load,
                # batches fill while the previous write is in flight, and waiting only delays
                await asyncio.sleep(LINGER_S)
            while self._pending:
                batch, n, deadline = [], 0, float("inf")
                while self._pending and n < MAX_FLUSH_EVENTS:
                    items, fut, until = self._pending.pop(0)
                    if fut.done():  # its request already answered 503 (timed out waiting)
                        continue
                    batch.append((items, fut))
                    n += len(items)
                    deadline = min(deadline, until)
                self._last_write = n
                if batch:
                    await self._write(batch, deadline)

    def _next_tick(self) -> float:
        """Wake up for the open group's deadline (checked again if jobs are waiting)."""
        if not self._open:
            return 1.0
        left = self._opened_at + self._window - time.monotonic()
        return min(1.0, left) if left > 0.005 else 0.1

    async def _group_loop(self) -> None:
        """Its own task: a slow Redis call here never holds up the writes (and their 202s)."""
        self._group_wake = asyncio.Event()
        while True:
            await _wait(self._group_wake, self._next_tick())
            self._group_wake.clear()
            try:
                await self._grouping()
            except Exception as exc:  # noqa: BLE001 - Redis down: the refs are safe in Redis
                log.debug("grouping failed: %s", exc)

    async def _grouping(self) -> None:
        """Close the open group when due; now and then, sweep refs nobody grouped."""
        now = time.monotonic()
        if self._open:
            size = self.store.settings.job_batch_size
            age = now - self._opened_at
            due = len(self._open) >= size or age >= BUSY_WINDOW_S
            if not due and age >= self._window and self._ingest is not None:
                # A running job claims what arrives (every 0.1 s): keep open only what it has
                # not taken, timed from the oldest of those. Grouping the last 0.1 s of
                # arrivals into an RQ job would make that job end to let the new one run.
                waiting = await self._ingest.waiting(self._open)
                self._open = [ref for ref, _ in waiting]
                if waiting:
                    age = time.time() - min(arrived for _, arrived in waiting)
                    self._opened_at = now - age
                due = age >= self._window and await self.queue_depth() == 0
            if due:
                await self._close_group()
        if self._ingest is not None and now - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = now
            try:
                stale = await self._ingest.stale(SWEEP_AGE_S)
                if stale:
                    n = await self._ingest.group(stale)
                    log.info("grouped %d events left waiting by a stopped API process", n)
            except Exception as exc:  # Redis down: the next sweep tries again
                log.debug("grouping sweep failed: %s", exc)

    async def _close_group(self) -> None:
        if not self._open or self._ingest is None:
            return
        refs, self._open = self._open, []
        try:
            await self._ingest.group(refs)
        except Exception as exc:  # they stay in Redis; a sweep turns them into jobs later
            log.warning("could not enqueue %d grouped events (%s); retrying", len(refs), exc)
            self._open = refs + self._open
            self._opened_at = time.monotonic() - self._window + 1.0  # again in a second

    async def _write(
        self, batch: list[tuple[list[IngestItem], asyncio.Future]], deadline: float
    ) -> None:
        flat = [it for items, _ in batch for it in items]
        deferred: list[str] = []
        try:
            if self._ingest is not None:
                write = self._ingest.write(flat, deadline, defer=self._window > 0)
            else:  # a store without REDIS_URL: the sync client, in a thread
                write = _no_deferral(asyncio.to_thread(self.store.ingest, flat, deadline))
            # a hung connection must not stall every later batch; the deadline keeps a write
            # still on its way from landing
            results, deferred = await asyncio.wait_for(write, self.timeout_s)
        except Exception as exc:  # Redis down: every waiting request gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        if deferred:
            if not self._open:
                self._opened_at = time.monotonic()
            self._open += deferred
            if len(self._open) >= self.store.settings.job_batch_size:
                self._group_wake.set()  # a full job: enqueue it now
        i = 0
        for items, fut in batch:
            if not fut.done():
                fut.set_result(results[i : i + len(items)])
            i += len(items)

    async def _flush_rejections(self) -> None:
        if not (self._rejections or self._spans or self._repairs):
            return
        pending, self._rejections = self._rejections, Counter()
        spans, self._spans = self._spans, Counter()
        repairs, self._repairs = self._repairs, Counter()
        try:
            for reason, n in pending.items():
                await asyncio.to_thread(self.store.record_rejection, reason, n)
            for outcome, n in spans.items():
                await asyncio.to_thread(self.store.record_otlp_spans, outcome, n)
            for repair, n in repairs.items():
                await asyncio.to_thread(self.store.record_otlp_repairs, repair, n)
        except Exception as exc:  # Redis is down: kept for the next try, one line per 10 s
            self._rejections.update(pending)
            self._spans.update(spans)
            self._repairs.update(repairs)
            why = " ".join(str(exc).split()) or type(exc).__name__
            self.log.warning("counts", "could not record counts (kept for later): %s", why)


async def _no_deferral(write: Awaitable[list[Answer]]) -> tuple[list[Answer], list[str]]:
    return await write, []


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
