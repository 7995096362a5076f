"""The Python SDK: record retrievals from a RAG app without ever touching its request latency.

`RetrievalMonitor.record()` puts a tuple of references on a bounded in-memory buffer and
returns the event's id: well under a microsecond of work on the app's thread, with no I/O and
no serialisation (the id is a per-process random prefix and a counter, not a fresh uuid4).
Two daemon threads do the rest:

- the *encoder* drains that buffer every 250 ms, builds wire events (normalises passages, makes
  repairs what can be repaired, refuses what the server would reject anyway) and writes them
  as JSON into the
  outbox's batch buffers; the app's objects are released at once, and bytes are invisible to
  the garbage collector, so a slow or down sidecar does not turn buffered events into long GC
  pauses in the app;
- the *sender* posts those batches to `POST {url}/v1/retrievals/batch` over one kept-alive
  connection, retrying with backoff.

Both give the GIL back often: the encoder after every ENCODE_SLICE_S of work, the sender in
every socket call; no single step copies or encodes more than one event or one slice at once.

Whatever happens to the sidecar (slow, down, rejecting), the app only loses monitoring data,
and every loss is counted in `stats()`: at any moment `recorded` = `sent` + `invalid` +
`rejected` + the `dropped_*` counters + `buffered` + `in_flight`; `invalid` is the sum of the
`invalid_<reason>` counters, and each repair made so that an event could be sent is counted
under its own name (`events.FIXES`).

With `relay=True` the encoder only writes `record()`'s arguments to a child process that does
the rest (`relay`: less CPU in the app's process, more in all; opt-in by measurement).

This module is the app's side (`record()`, `stats()`, `close()`) and the process hooks;
`encoder` and `sender` hold the two threads' work, `state` what the three share.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ragmon.client import state
from ragmon.client.connection import Connection
from ragmon.client.encoder import ENCODE_AT, Encoder
from ragmon.client.outbox import Outbox
from ragmon.client.relay import Relayer
from ragmon.client.sender import Sender
from ragmon.client.state import COUNTERS, sched_idle, sched_normal
from ragmon.core.wire import MAX_BATCH

DEFAULT_BUFFER = 10_000
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024
DEFAULT_BATCH = MAX_BATCH
DEFAULT_FLUSH_INTERVAL_S = 1.0
DEFAULT_ENCODE_INTERVAL_S = 0.25
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RETRIES = 8
DEFAULT_BACKOFF_S = 0.5
DEFAULT_BACKOFF_MAX_S = 30.0
# A batch closes at this size too: small enough that the three batch buffers in use (filling,
# being sent, spare) add little to the memory the outbox holds, large enough that a post's
# fixed cost stays negligible per event.
BATCH_BYTES = 2 * 1024 * 1024


class RetrievalMonitor(Encoder, Sender, Relayer):
    """Non-blocking recorder of retrievals; one per process is enough (thread- and fork-safe).

    Use `record()` from sync or async code (it never blocks), `close()` (or `async with` /
    `with`) at shutdown; it also flushes at interpreter exit. `max_buffer` bounds both the
    events waiting to be encoded and the encoded events waiting to be sent (the latter also by
    `max_buffer_bytes`); when full, the oldest are dropped and counted.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        max_buffer: int = DEFAULT_BUFFER,
        max_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        batch_size: int = DEFAULT_BATCH,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL_S,
        encode_interval: float = DEFAULT_ENCODE_INTERVAL_S,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: float = DEFAULT_BACKOFF_S,
        backoff_max: float = DEFAULT_BACKOFF_MAX_S,
        close_timeout: float = 5.0,
        relay: bool = False,
    ) -> None:
        self._config = {
            k: v for k, v in locals().items() if k not in ("self", "relay", "__class__")
        }  # what the relay process makes its own monitor with
        self._use_relay = relay
        self.url = url.rstrip("/")
        self._headers = {"Content-Type": "application/json", "User-Agent": "ragmon-client/0.1"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._default_labels = dict(labels or {})
        self._maxlen = max(1, int(max_buffer))
        self._max_bytes = max(1, int(max_buffer_bytes))
        self._batch_size = max(1, min(int(batch_size), MAX_BATCH))
        self._flush_interval = flush_interval
        self._encode_interval = encode_interval
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._close_timeout = close_timeout
        self._closed = False
        self._last_log: dict[str, float] = {}
        self._connection()  # checks the URL now, and builds a TLS context at start-up
        self._reset()
        _live.add(self)
        _install_hooks()

    def _reset(self) -> None:
        """Fresh buffers, locks, threads and counters (at start, and in a forked child)."""
        self._lock = threading.Lock()  # record()'s buffer and counters
        self._out_lock = threading.Lock()  # the outbox and the encoder's and sender's counters
        self._buf: deque[tuple] = deque(maxlen=self._maxlen)  # record() → encoder
        self._out = Outbox(self._maxlen, self._max_bytes, self._batch_size, BATCH_BYTES)
        self._wake_encoder = threading.Event()
        self._wake_sender = threading.Event()
        self._closing = threading.Event()
        self._encoder_done = threading.Event()
        self._deadline: float | None = None
        self._threads: tuple[threading.Thread, ...] | None = None
        self._http = self._connection()  # a child must not share its parent's socket
        self._encoding = 0  # taken off _buf by the encoder (under _lock) ...
        self._encoded = 0  # ... of which settled: in the outbox or invalid (under _out_lock)
        self._sending = 0  # taken out of the outbox, not yet settled
        self._n = dict.fromkeys(COUNTERS, 0)
        # record()'s own count of the events its full buffer pushed out (under _lock). Not in
        # _n: the encoder and the relay add the outbox's drops to _n["dropped_buffer_full"]
        # under _out_lock, and two threads adding to one key under different locks lost
        # updates (50 events counted nowhere, seen when the SDK's threads were preempted).
        self._buffer_drops = 0
        # Event ids: a uuid4-shaped random prefix per process (a forked child draws its own)
        # and a counter from a random start. The encoder keeps a pool of them made ahead, so
        # record() only pops one, cheaper than making one, let alone str(uuid4()).
        h = os.urandom(16).hex()
        prefix = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-"
        counter = itertools.count(int(h[20:], 16) >> 1)  # 47 bits: 12 hex digits for ages
        self._ids = map((prefix + "%012x").__mod__, counter)
        self._id_pool: list[str] = []  # list.pop() and extend() are atomic: no lock
        self._drain = self._first_drain
        self._relay = None  # a forked child starts its own relay (the parent's is not its own)
        self._relay_failed_at = 0.0
        self._relay_flush_asked = False
        self._relay_read_lock = threading.Lock()
        self._relayed = 0
        self._child = {}

    # ---- the app's side -------------------------------------------------------------------

    def record(
        self,
        query: str,
        passages: Any,
        k: int,
        labels: Mapping[str, str] | None = None,
        event_id: str | None = None,
        timestamp: datetime | str | float | None = None,
        relevant_total: int | None = None,
        *,
        trace_id: str | None = None,
        metadata: Mapping[str, str | int | float | bool] | None = None,
    ) -> str | None:
        """Buffer one retrieval (ranked passages, best first) and return its event id at once
        (None if it was not buffered: after `close()`); never raises.

        `passages`: dicts `{"id", "text", "score"?, "grade"?}`, `(id, text[, score])` tuples,
        strings, LangChain documents (or `(document, score)` pairs) or LlamaIndex nodes; fewer
        than `k`, or none, is recorded as it is. `trace_id`: the app's trace or request id,
        returned by `GET /v1/retrievals/{id}`. Don't mutate the passage objects afterwards: the
        encoder thread reads them within `encode_interval`.
        """
        try:
            if self._closed:
                with self._lock:  # app threads may call record() at once
                    self._n["dropped_closed"] += 1
                return None
            ts = time.time() if timestamp is None else timestamp
            if event_id is None:
                try:
                    event_id = self._id_pool.pop()
                except IndexError:  # the pool ran dry (a burst): make one here
                    event_id = next(self._ids)
            item = (
                query,
                list(passages) if passages is not None else [],
                k,
                labels,
                event_id,
                ts,
                relevant_total,
                trace_id,
                metadata,
            )
            with self._lock:
                if len(self._buf) == self._maxlen:
                    self._buffer_drops += 1
                self._buf.append(item)
                self._n["recorded"] += 1
            if self._threads is None:
                self._start()
            elif len(self._buf) >= ENCODE_AT and not self._wake_encoder.is_set():
                self._wake_encoder.set()
            return event_id
        except Exception:
            self._bump("errors")  # under _out_lock, as the threads count theirs
            self._warn("record", "record() failed; the event was dropped", exc_info=True)
            return None

    async def arecord(self, *args: Any, **kwargs: Any) -> str | None:
        """`record()` for code that prefers to await; it does not wait for anything either."""
        return self.record(*args, **kwargs)

    def stats(self) -> dict[str, int]:
        """Counters since start (or since fork in a child), plus `buffered` and `in_flight`."""
        if self._drain == self._relay_all:
            self._relay_stats()
        with self._lock, self._out_lock:
            out = dict(self._n)
            out["dropped_buffer_full"] += self._buffer_drops
            out["buffered"] = len(self._buf) + self._out.events
            out["in_flight"] = self._encoding - self._encoded + self._sending
            if self._drain == self._relay_all:
                self._relay_counts(out)
        return out

    def flush(self, timeout: float = 5.0) -> bool:
        """Ask for everything buffered to be sent now; True if all was settled in time."""
        end = time.monotonic() + timeout
        self._relay_flush_asked = True
        while time.monotonic() < end:
            stats = self.stats()
            if not (stats["buffered"] or stats["in_flight"]):
                return True
            self._wake_encoder.set()
            self._wake_sender.set()
            time.sleep(0.005)
        return False

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (waiting at most `timeout` s), then stop; idempotent."""
        if self._closed:
            return
        timeout = self._close_timeout if timeout is None else timeout
        self._closed = True
        self._deadline = end = time.monotonic() + timeout
        for thread in self._threads or ():
            if thread.native_id is not None and thread.is_alive():
                sched_normal(thread.native_id)
        self._closing.set()
        self._wake_encoder.set()
        self._wake_sender.set()
        for thread in self._threads or ():
            thread.join(max(0.0, end - time.monotonic()))
        self._relay_close(end)
        with self._lock, self._out_lock:  # an in-flight batch is settled by the sender itself
            left = len(self._buf) + self._out.clear()
            self._buf.clear()
            self._n["dropped_at_close"] += left
        if left:
            self._warn("close", f"close(): {left} events were not sent before the timeout")
        if not any(t.is_alive() for t in self._threads or ()):
            self._http.close()

    def __enter__(self) -> RetrievalMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RetrievalMonitor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        import asyncio

        await asyncio.to_thread(self.close)

    # ---- the threads ----------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._threads is not None:
                return
            self._threads = tuple(
                threading.Thread(target=_idle(loop), name=name, daemon=True)
                for loop, name in (
                    (self._encode_loop, "ragmon-encoder"),
                    (self._send_loop, "ragmon-sender"),
                )
            )
        for thread in self._threads:
            thread.start()

    def _first_drain(self) -> None:
        """On the encoder thread, once: start the relay (or work in-process), then drain."""
        relayed = self._use_relay and self._spawn_relay()
        self._drain = self._relay_all if relayed else self._encode_all
        self._drain()

    def _connection(self) -> Connection:
        return Connection(self.url, self._headers, self._timeout, min(self._timeout, 3.0))


# ---- process hooks (installed once, when the first monitor is made) ------------------------

_live: weakref.WeakSet[RetrievalMonitor] = weakref.WeakSet()
_hooks_installed = False


def _install_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_close_all)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)


def _close_all() -> None:
    for monitor in list(_live):
        with contextlib.suppress(Exception):
            monitor.close()


def _after_fork() -> None:
    """A forked child starts with an empty buffer, a new lock, and no thread, connection or
    relay (it closes its copies of the parent's relay pipes: the relay must see EOF when the
    parent closes)."""
    for monitor in list(_live):
        relay = monitor._relay
        if relay is not None:
            for pipe in (relay.stdin, relay.stdout):
                with contextlib.suppress(Exception):
                    pipe.close() if pipe is not None else None
        monitor._reset()


def _idle(loop: Callable[[], None]) -> Callable[[], None]:
    """`loop`, run under SCHED_IDLE where the OS has it (Linux): the thread gets a CPU only when
    none of the app's threads wants it, and a request that wakes the app's thread takes the
    CPU back at once. At normal priority, each wakeup of these threads preempted the app's
    thread in the middle of a request: at 500 req/s, 215-429 involuntary switches of the app's
    thread per 3 s against 55-89 under SCHED_IDLE (docs/integration.md). Under full load they
    still get a little CPU (the OS's idle weight); what cannot be sent in time is dropped and
    counted, never waited for."""

    def run() -> None:
        if state.IDLE_THREADS:
            sched_idle()
        loop()

    return run
