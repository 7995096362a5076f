"""/metrics off the ingest path: the text is rendered in a child process ahead of the scrapes,
every RAGMON_METRICS_REFRESH_S, so scrapers share one rendering, never wait for one, and the
API's event loop (and its GIL) only copies bytes.

With hundreds of series one rendering is megabytes of text and most of a second of CPU; done
in the API process it held the GIL while events waited. The child has its own Redis
connection and interpreter; `docs/performance.md` has the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import time
from collections.abc import AsyncIterator

from ragmon import export
from ragmon.api.child import ChildProcess
from ragmon.settings import Settings
from ragmon.store import Store

RENDER_NICENESS = 19
# A plain (not gzipped) body is sent in slices of this size, one body at a time, and the next
# waits (1 / PLAIN_SHARE - 1) times as long as the last took (at most PLAIN_WAIT_MAX_S): whole,
# each body was copied three times by the event loop in one turn, and scrapers back to back
# without gzip held every other request (tests/bench/bench_attacks.py).
SEND_SLICE_BYTES = 256 * 1024
PLAIN_SHARE = 0.25  # of the API process's time that plain bodies may take
PLAIN_WAIT_MAX_S = 1.0
# Pause between the renderer's HSCAN steps: its reads of 26k-140k fields, back to back, kept
# Redis busy enough to double the ingest p99 (docs/performance.md); spread, they do not.
RENDER_READ_PAUSE_S = 0.002
_child_store: Store | None = None  # the child's store, connected on its first rendering


def _child_start() -> None:
    """The child renders at the lowest CPU priority (nice 19): on a small machine ingest then
    wins the CPU while a render runs (docs/performance.md)."""
    os.nice(RENDER_NICENESS)


def render_in_child(settings: Settings) -> bytes:
    """Runs in the child process: one Store for its life."""
    global _child_store
    if _child_store is None:
        _child_store = Store.connect(settings)
        _child_store.read_pause_s = RENDER_READ_PAUSE_S
    return compressed(_child_store, paced=True)


def compressed(store: Store, paced: bool = False) -> bytes:
    """The text gzipped once per rendering: a small part of it on the wire, and Prometheus asks
    for gzip. `paced`: rest as long as each step worked (the child), so a
    rendering never takes a CPU for long at a time."""
    between = None
    if paced:
        mark = [time.perf_counter()]

        def between() -> None:
            time.sleep(time.perf_counter() - mark[0])
            mark[0] = time.perf_counter()

    text = export.metrics_text(store, between)
    return gzip.compress(text, compresslevel=1, mtime=0)


class MetricsText:
    """The current /metrics body, rendered ahead of the scrapes (in a child process, or in a
    thread when `in_process`).

    A scrape never waits for a rendering once one exists: while scrapes keep coming, a
    background task renders every `refresh_s` seconds, and each scrape gets the latest body
    (at most `refresh_s` plus one rendering old). Only the first scrape, and one that finds
    the body older than 2 x `refresh_s` (after `IDLE_S` without scrapes the task stops; or
    renderings keep failing), wait for a rendering. With `refresh_s` 0 every scrape gets a
    rendering of its own (tests)."""

    IDLE_S = 120.0

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.refresh_s = settings.metrics_refresh_s
        self.stale_s = 2 * self.refresh_s  # a body older than this waits for a new rendering
        self.in_process = not settings.metrics_process
        self.store = store
        self._child = ChildProcess(_child_start)
        self._body = b""
        self._at = float("-inf")
        self._pending: asyncio.Future[bytes] | None = None
        self._ahead: asyncio.Task[None] | None = None
        self._scraped_at = float("-inf")
        self._plain: tuple[bytes, asyncio.Future[bytes]] | None = None  # gzipped, plain
        self._one_plain = asyncio.Semaphore(1)  # bound to the server's loop on first use

    async def body(self) -> bytes:
        """The gzipped text: the latest rendering while it is fresh enough, else a new one
        (concurrent scrapes share it)."""
        now = time.monotonic()
        self._scraped_at = now
        if self.refresh_s > 0:
            if self._ahead is None or self._ahead.done():
                self._ahead = asyncio.ensure_future(self._render_ahead())
            if now - self._at <= self.stale_s:
                return self._body
        return await self._rendering()

    async def plain(self) -> bytes:
        """The text uncompressed, for a scraper that does not take gzip: decompressed once per
        rendering, in a thread, whoever asks (once per scrape, scrapers back to back held the
        ingest)."""
        body = await self.body()
        if self._plain is None or self._plain[0] is not body:
            self._plain = (body, asyncio.ensure_future(asyncio.to_thread(gzip.decompress, body)))
        return await asyncio.shield(self._plain[1])

    async def in_slices(self, body: bytes) -> AsyncIterator[memoryview]:
        """A plain body in `SEND_SLICE_BYTES` views, not copies, within `PLAIN_SHARE`: the
        server sends a slice and waits for the socket to drain before the next, so other
        requests run between them; other plain scrapes wait their turn, Prometheus' gzipped
        ones never do."""
        view = memoryview(body)
        async with self._one_plain:
            started = time.monotonic()
            for start in range(0, len(body), SEND_SLICE_BYTES):
                yield view[start : start + SEND_SLICE_BYTES]
            spent = time.monotonic() - started
            await asyncio.sleep(min(PLAIN_WAIT_MAX_S, spent * (1 / PLAIN_SHARE - 1)))

    def _rendering(self) -> asyncio.Future[bytes]:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._render())
            self._pending.add_done_callback(self._settled)
        return asyncio.shield(self._pending)

    def _settled(self, fut: asyncio.Future[bytes]) -> None:
        self._pending = None
        if not fut.cancelled() and fut.exception() is None:
            self._body, self._at = fut.result(), time.monotonic()

    async def _render_ahead(self) -> None:
        """Render every `refresh_s` while scrapes come; a failed rendering (Redis down) is
        tried again next time, and scrapes keep the last body until it is too old."""
        while time.monotonic() - self._scraped_at < self.IDLE_S:
            started = time.monotonic()
            with contextlib.suppress(Exception):  # said by a scrape once the body is too old
                await self._rendering()
            await asyncio.sleep(max(0.0, self.refresh_s - (time.monotonic() - started)))

    async def _render(self) -> bytes:
        if self.in_process:
            return await asyncio.to_thread(compressed, self.store)
        # a child that died (OOM kill ...) raises here once and is replaced next time
        return await self._child.run(render_in_child, self.settings)

    def close(self) -> None:
        """Stop the renderer now (a rendering in progress is thrown away)."""
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
        self._child.close()
