"""Micro-batching of Redis writes: concurrent requests share one transaction.

Each request hands its validated events to the `IngestWriter` and awaits a future; one task
drains everything pending into a single ingest call (`Store.async_ingest`: one Lua round trip
on redis.asyncio, so the event loop never blocks on Redis and pays no thread hop), and the
write cost is paid per batch, not per request. While one batch is in flight the next one
gathers, so batches grow with the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter

from monitor.api.logs import KindLimiter
from monitor.store import IngestItem, Store
from monitor.store.ingest import AsyncIngest

log = logging.getLogger("ragmon.api")

MAX_FLUSH_EVENTS = 1000  # one Lua call blocks Redis: keep each write to ~10 MB
LINGER_S = 0.002
LINGER_BELOW = 8  # events in the previous write
DEPTH_REFRESH_S = 0.5
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
        self._rejections: Counter[str] = Counter()
        self._spans: Counter[str] = Counter()  # /v1/traces spans by outcome
        self._depth = 0
        self._depth_at = 0.0
        self._ingest: AsyncIngest | None = None
        self._last_write = 0

    async def start(self) -> None:
        self._ingest = self.store.async_ingest()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="ragmon-ingest-writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._flush_rejections()
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

    def count_spans(self, events: int, ignored: int, rejected: int) -> None:
        """Count the spans of one trace export by outcome; written like the rejections."""
        for outcome, n in (("event", events), ("ignored", ignored), ("rejected", rejected)):
            if n:
                self._spans[outcome] += n
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
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

    async def _write(
        self, batch: list[tuple[list[IngestItem], asyncio.Future]], deadline: float
    ) -> None:
        flat = [it for items, _ in batch for it in items]
        try:
            if self._ingest is not None:
                write = self._ingest(flat, deadline)
            else:  # a store without REDIS_URL: the sync client, in a thread
                write = asyncio.to_thread(self.store.ingest, flat, deadline)
            # a hung connection must not stall every later batch; the deadline keeps a write
            # still on its way from landing
            results = await asyncio.wait_for(write, self.timeout_s)
        except Exception as exc:  # Redis down: every waiting request gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        i = 0
        for items, fut in batch:
            if not fut.done():
                fut.set_result(results[i : i + len(items)])
            i += len(items)

    async def _flush_rejections(self) -> None:
        if not (self._rejections or self._spans):
            return
        pending, self._rejections = self._rejections, Counter()
        spans, self._spans = self._spans, Counter()
        try:
            for reason, n in pending.items():
                await asyncio.to_thread(self.store.record_rejection, reason, n)
            for outcome, n in spans.items():
                await asyncio.to_thread(self.store.record_otlp_spans, outcome, n)
        except Exception as exc:  # Redis is down: kept for the next try, one line per 10 s
            self._rejections.update(pending)
            self._spans.update(spans)
            why = " ".join(str(exc).split()) or type(exc).__name__
            self.log.warning("counts", "could not record counts (kept for later): %s", why)
