"""Work that would hold the API's event loop, and its GIL, runs in a child process.

Parsing in a thread does not help: protobuf's and pydantic's parsers are C and Rust that keep
the GIL for the whole parse, so a large body stalled every request (an OTLP export of 500,000
tiny elements: 0.2 s; a 32 MB batch of events: 1.4 s). A child process has its own
interpreter; the API's loop only sends the body and receives the result. The /metrics
renderer (`ragmon.api.metrics`) is such a child too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl(2)
PARENT_POLL_S = 1.0  # where there is no parent-death signal
CHILD_EXIT_S = 5.0  # how long close() waits for the terminated child
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 20


def release_large_frees() -> None:
    """Make glibc return every freed block of 1 MiB or more to the system at once.

    glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB): after one
    32 MB body, later bodies of that size come from the heap and stay resident when freed, so
    each large request left the process bigger. A fixed threshold turns that off."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def die_with(parent: int) -> None:
    """End this process when `parent` ends: the kernel's parent-death signal on Linux, else a
    thread that watches the parent's pid. Without it a child outlives a killed API (and keeps
    multiprocessing's resource tracker alive with it), re-parented to PID 1."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it died before the signal was armed
                    os._exit(0)
                return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="ragmon-parent-watch", daemon=True).start()


def _start(parent: int, initializer: Callable[[], None] | None) -> None:
    """In the child, first: Ctrl-C reaches the whole process group, and the API stops its
    children itself (they must not die first with tracebacks of their own); then it dies with
    the API however that ends (SIGKILL, OOM kill)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(parent)
    release_large_frees()
    if initializer is not None:
        initializer()


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, then the heap's free pages back to the system: a 32 MB body leaves
    thousands of freed small blocks that glibc would otherwise keep."""
    try:
        return fn(*args)
    finally:
        if sys.platform == "linux":
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).malloc_trim(0)


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
            return await loop.run_in_executor(self._executor(), _call, fn, *args)
        except BrokenProcessPool:
            self.close()
            raise

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the API has threads and an event loop running
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(os.getpid(), self.initializer),
            )
        return self._pool

    def close(self) -> None:
        """Stop the child now (work in progress is thrown away): `shutdown(wait=False)` alone
        left it running after the API exited, with the resource tracker beside it."""
        if self._pool is not None:
            children = list((self._pool._processes or {}).values())  # noqa: SLF001
            self._pool.shutdown(wait=False, cancel_futures=True)
            for child in children:
                child.terminate()
            for child in children:
                child.join(CHILD_EXIT_S)
            self._pool = None
