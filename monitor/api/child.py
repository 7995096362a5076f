"""Work that would hold the API's event loop, and its GIL, runs in a child process.

Parsing in a thread does not help: protobuf's and pydantic's parsers are C and Rust that keep
the GIL for the whole parse, so a large body stalled every request (an OTLP export of 500,000
tiny elements: 0.2 s; a 32 MB batch of events: 1.4 s). A child process has its own
interpreter; the API's loop only sends the body and receives the result.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any


class ChildProcess:
    """One worker process, spawned on first use (so a server that never needs it never starts
    it) and replaced after it dies; calls run one at a time, in order."""

    def __init__(self, initializer: Callable[[], None] | None = None) -> None:
        self.initializer = initializer
        self._pool: ProcessPoolExecutor | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the child (`fn`, its arguments and its result are pickled); its
        exception is raised here. `BrokenProcessPool` when the child died meanwhile."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), fn, *args)
        except BrokenProcessPool:
            self.close()
            raise

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the API has threads and an event loop running
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=self.initializer,
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
