"""/metrics off the ingest path: the text is rendered in a child process and kept for
RAGMON_METRICS_REFRESH_S, so concurrent scrapers share one rendering and the API's event loop
(and its GIL) only copies bytes.

At 500 series one rendering is ~7 MB of text and about a second of CPU; done in the API
process it held the GIL while events waited (four scrapers: ingest p99 43 → 604 ms). The
child has its own Redis connection and interpreter; `docs/performance.md` has the figures.
"""

from __future__ import annotations

import asyncio
import gzip
import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from monitor import export
from monitor.settings import Settings
from monitor.store import Store

RENDER_NICENESS = 19
_child_store: Store | None = None  # the child's store, connected on its first rendering


def _child_start() -> None:
    """Ctrl-C reaches the whole process group: the API stops the child, which must not die
    with a traceback of its own first. The child renders at the lowest CPU priority (nice 19):
    on a small machine ingest then wins the CPU while a render runs (docs/performance.md)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(RENDER_NICENESS)


def render_in_child(settings: Settings) -> bytes:
    """Runs in the child process: one Store for its life."""
    global _child_store
    if _child_store is None:
        _child_store = Store.connect(settings)
    return compressed(_child_store)


def compressed(store: Store) -> bytes:
    """The text gzipped once per rendering: 11 MB at 500 series is ~0.4 MB on the wire, and
    Prometheus asks for gzip."""
    return gzip.compress(export.metrics_text(store), compresslevel=1, mtime=0)


class MetricsText:
    """The current /metrics body, refreshed at most every `refresh_s` seconds, one rendering
    at a time (in a child process, or in a thread when `in_process`)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.refresh_s = settings.metrics_refresh_s
        self.in_process = not settings.metrics_process
        self.store = store
        self._pool: ProcessPoolExecutor | None = None
        self._body = b""
        self._at = float("-inf")
        self._pending: asyncio.Future[bytes] | None = None

    async def body(self) -> bytes:
        """The gzipped text, at most `refresh_s` old: scrapes within that share one rendering,
        and scrapes that arrive during a rendering wait for that one (0: one per scrape)."""
        if time.monotonic() - self._at < self.refresh_s:
            return self._body
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._render())
            self._pending.add_done_callback(self._settled)
        return await asyncio.shield(self._pending)

    def _settled(self, fut: asyncio.Future[bytes]) -> None:
        self._pending = None
        if not fut.cancelled() and fut.exception() is None:
            self._body, self._at = fut.result(), time.monotonic()

    async def _render(self) -> bytes:
        if self.in_process:
            return await asyncio.to_thread(compressed, self.store)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), render_in_child, self.settings)
        except BrokenProcessPool:  # the child died (OOM kill ...): a new one next time
            self.close()
            raise

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the API has threads and an event loop running
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=ctx, initializer=_child_start
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
