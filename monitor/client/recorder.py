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
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import itertools
import logging
import os
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from monitor.client.connection import Connection, Response
from monitor.client.events import (
    FIXES,
    INVALID_REASONS,
    InvalidEvent,
    build_event,
    decode,
    encode_event,
)
from monitor.client.outbox import Batch, Outbox
from monitor.limits import MAX_BATCH
from monitor.retry import retry_after_s

log = logging.getLogger("ragmon.client")

LOG_INTERVAL_S = 60.0
DEFAULT_BUFFER = 10_000
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024
DEFAULT_BATCH = MAX_BATCH
DEFAULT_FLUSH_INTERVAL_S = 1.0
DEFAULT_ENCODE_INTERVAL_S = 0.25
ENCODE_AT = 256  # record() wakes the encoder early when this many events wait
ID_POOL = 4 * ENCODE_AT  # event ids made ahead by the encoder for record() to take
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RETRIES = 8
DEFAULT_BACKOFF_S = 0.5
DEFAULT_BACKOFF_MAX_S = 30.0
MAX_RETRY_AFTER_S = 120.0
# A batch closes at this size too: small enough that the three batch buffers in use (filling,
# being sent, spare) add little to the memory the outbox holds, large enough that a post's
# fixed cost (~0.1 ms) stays negligible per event.
BATCH_BYTES = 2 * 1024 * 1024
BATCH_PATH = "/v1/retrievals/batch"
# The encoder gives the GIL back after this much work (about 25 typical events): without it, a
# request arriving while it works would wait up to sys.getswitchinterval() (5 ms) for the app's
# thread. A real sleep is needed: after sleep(0) the encoder takes the GIL back before the app
# wakes. The longest hold is then this slice plus the encoding of one event.
ENCODE_SLICE_S = 0.0002
YIELD_FOR_S = 0.00005
ENCODE_CHUNK = 64  # events taken off the buffer per lock round trip
_COUNTERS = (
    "recorded",  # record() calls that reached the buffer
    "sent",  # events the server accepted (2xx)
    "sampled_out",  # of those, answered "sampled_out"
    "dropped_buffer_full",  # oldest events pushed out of a full buffer
    "dropped_closed",  # record() after close()
    "dropped_send_failed",  # gave up after max_retries
    "dropped_at_close",  # still unsent when close() timed out
    "invalid",  # failed client-side validation, never sent (sum of the invalid_<reason>)
    "rejected",  # answered 4xx (not 429) by the server
    "retries",  # HTTP attempts repeated after an error, 429 or 5xx
    "batches",  # batches the server accepted
    "errors",  # exceptions swallowed inside record() or the threads
    *(f"invalid_{reason}" for reason in INVALID_REASONS),
    *FIXES,
)


class RetrievalMonitor:
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
    ) -> None:
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
        self._n = dict.fromkeys(_COUNTERS, 0)
        # Event ids: a uuid4-shaped random prefix per process (a forked child draws its own)
        # and a counter from a random start. The encoder keeps a pool of them made ahead, so
        # record() only pops one (~30 ns; making one costs ~200 ns, str(uuid4()) ~1 us).
        h = os.urandom(16).hex()
        prefix = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-"
        counter = itertools.count(int(h[20:], 16) >> 1)  # 47 bits: 12 hex digits for ages
        self._ids = map((prefix + "%012x").__mod__, counter)
        self._id_pool: list[str] = []  # list.pop() and extend() are atomic: no lock

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
        encoder thread reads them within ~250 ms.
        """
        try:
            if self._closed:
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
                    self._n["dropped_buffer_full"] += 1
                self._buf.append(item)
                self._n["recorded"] += 1
            if self._threads is None:
                self._start()
            elif len(self._buf) >= ENCODE_AT and not self._wake_encoder.is_set():
                self._wake_encoder.set()
            return event_id
        except Exception:
            self._n["errors"] += 1
            self._warn("record", "record() failed; the event was dropped", exc_info=True)
            return None

    async def arecord(self, *args: Any, **kwargs: Any) -> str | None:
        """`record()` for code that prefers to await; it does not wait for anything either."""
        return self.record(*args, **kwargs)

    def stats(self) -> dict[str, int]:
        """Counters since start (or since fork in a child), plus `buffered` and `in_flight`."""
        with self._lock, self._out_lock:
            out = dict(self._n)
            out["buffered"] = len(self._buf) + self._out.events
            out["in_flight"] = self._encoding - self._encoded + self._sending
        return out

    def flush(self, timeout: float = 5.0) -> bool:
        """Ask for everything buffered to be sent now; True if all was settled in time."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock, self._out_lock:
                busy = self._encoding - self._encoded + self._sending
                if not (self._buf or self._out.events or busy):
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
        self._closing.set()
        self._wake_encoder.set()
        self._wake_sender.set()
        for thread in self._threads or ():
            thread.join(max(0.0, end - time.monotonic()))
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
            self._threads = (
                threading.Thread(target=self._encode_loop, name="ragmon-encoder", daemon=True),
                threading.Thread(target=self._send_loop, name="ragmon-sender", daemon=True),
            )
        for thread in self._threads:
            thread.start()

    def _encode_loop(self) -> None:
        while True:
            try:
                closing = self._closing.is_set()
                if not closing:
                    self._wake_encoder.wait(self._encode_interval)
                    self._wake_encoder.clear()
                self._encode_all()
                if closing:
                    self._encoder_done.set()
                    self._wake_sender.set()
                    return
            except Exception:
                self._bump("errors")
                self._warn("encoder", "ragmon encoder error", exc_info=True)
                time.sleep(0.1)

    def _encode_all(self) -> None:
        """Move every buffered event into the outbox as JSON (invalid ones are counted).

        Events are taken ENCODE_CHUNK at a time (one lock round trip per chunk), each is copied
        into the outbox as soon as it is encoded (one short-lived bytes object at a time), and
        the GIL is given back after every ENCODE_SLICE_S of work.
        """
        slice_start = time.perf_counter()
        pool = self._id_pool
        if len(pool) < ID_POOL // 2:
            pool.extend(itertools.islice(self._ids, ID_POOL - len(pool)))
        while True:
            with self._lock:  # record() never waits on the outbox's lock
                n = min(len(self._buf), ENCODE_CHUNK)
                if not n:
                    break
                items = [self._buf.popleft() for _ in range(n)]
                self._encoding = n
            for item in items:
                data: bytes | None = None
                fixes: dict[str, int] = {}
                reason = "unreadable"
                try:
                    event = self._event(item, fixes)
                    reason = "encoding"
                    data = encode_event(event)
                except Exception as exc:
                    if isinstance(exc, InvalidEvent):
                        reason = exc.reason
                    with contextlib.suppress(Exception):  # even str(exc) may raise
                        self._warn(f"invalid-{reason}", f"invalid event not sent: {exc}")
                with self._out_lock:
                    self._encoded += 1
                    for name, n in fixes.items():
                        self._n[name] += n
                    if data is None:
                        self._n["invalid"] += 1
                        self._n[f"invalid_{reason}"] += 1
                    else:
                        self._n["dropped_buffer_full"] += self._out.add(data)
                if time.perf_counter() - slice_start > ENCODE_SLICE_S:
                    if not self._closing.is_set():  # at close, finish within its timeout
                        time.sleep(YIELD_FOR_S)  # let the app's threads run (ENCODE_SLICE_S)
                    slice_start = time.perf_counter()
            del items, item  # the app's objects are released here, within encode_interval
            with self._lock, self._out_lock:
                self._encoding = self._encoded = 0
            if self._out.full() and not self._wake_sender.is_set():
                self._wake_sender.set()

    def _send_loop(self) -> None:
        while True:
            try:
                done = self._encoder_done.is_set()
                if not self._closing.is_set():
                    self._wake_sender.wait(self._flush_interval)
                    self._wake_sender.clear()
                elif not done:  # closing: full batches only until the encoder has finished
                    self._encoder_done.wait(0.01)
                while self._send_batch(full_only=self._closing.is_set() and not done):
                    pass
                if done:
                    return
            except Exception:
                self._bump("errors")
                self._warn("sender", "ragmon sender error", exc_info=True)
                time.sleep(0.1)

    def _send_batch(self, full_only: bool = False) -> bool:
        """Take one batch out of the outbox and post it; False when there is none to send."""
        with self._out_lock:
            if full_only and not self._out.full():
                return False
            batch = self._out.take()
            if batch is None:
                return False
            self._sending = len(batch)
        try:
            self._post(batch, batch.live())
        except Exception:
            self._settle("dropped_send_failed", self._sending)  # what _post left unsettled
            raise
        finally:
            with self._out_lock:
                self._out.release(batch)
        return True

    def _event(self, item: tuple, fixes: dict[str, int]) -> dict[str, Any]:
        """The wire event of one buffered `record()` call (the monitor's labels under its own)."""
        query, passages, k, labels, event_id, ts, rt, trace_id, metadata = item
        merged = {**self._default_labels, **labels} if labels else self._default_labels
        return build_event(query, passages, k, merged, event_id, ts, rt, trace_id, metadata, fixes)

    def _post(self, batch: Batch, items: list[int]) -> None:
        """Post these events with retries; split them on 413, drop bad items named by a 422."""
        body = batch.body(items)
        for attempt in range(self._max_retries + 1):
            if attempt:
                self._bump("retries")
            try:
                resp = self._http.post(BATCH_PATH, body)
            except (OSError, http.client.HTTPException) as exc:
                kind, delay = type(exc).__name__, None
                self._warn(f"http-{kind}", f"ragmon sidecar unreachable ({kind}): {exc}")
            else:
                code = resp.status
                if code < 300:
                    self._settle("sent", len(items), sampled=_sampled_out(resp))
                    return
                if code == 413 and len(items) > 1:
                    half = len(items) // 2
                    del body
                    self._post(batch, items[:half])
                    self._post(batch, items[half:])
                    return
                if code == 422 and len(items) > 1:
                    bad = _bad_items(resp)
                    if bad and len(bad) < len(items):
                        self._settle("rejected", len(bad))
                        self._warn("422", f"ragmon rejected events: {resp.text[:500]}")
                        del body
                        self._post(batch, [e for i, e in enumerate(items) if i not in bad])
                        return
                if code != 429 and code < 500:
                    self._settle("rejected", len(items))
                    self._warn(f"{code}", f"ragmon answered {code}: {resp.text[:500]}")
                    return
                delay = retry_after_s(resp.headers)
                self._warn(f"{code}", f"ragmon answered {code}; retrying")
            if attempt == self._max_retries:
                break
            if delay is None:
                cap = min(self._backoff_max, self._backoff * 2**attempt)
                delay = cap / 2 + random.uniform(0, cap / 2)
            else:
                delay = min(delay, MAX_RETRY_AFTER_S) * random.uniform(1.0, 1.1)
            if not self._sleep(delay):
                self._settle("dropped_at_close", len(items))
                return
        self._settle("dropped_send_failed", len(items))

    def _settle(self, outcome: str, n: int, sampled: int = 0) -> None:
        """Count `n` in-flight events under `outcome` (atomically, so the totals add up)."""
        with self._out_lock:
            self._n[outcome] += n
            self._sending -= n
            if outcome == "sent":
                self._n["sampled_out"] += sampled
                self._n["batches"] += 1

    def _sleep(self, seconds: float) -> bool:
        """Sleep, cut short by the close deadline; False if the deadline has passed."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            deadline = self._deadline
            limit = end if deadline is None else min(end, deadline)
            if now >= limit:
                return deadline is None or now < deadline
            if self._closing.is_set():
                time.sleep(limit - now)
            else:
                self._closing.wait(limit - now)

    def _connection(self) -> Connection:
        return Connection(self.url, self._headers, self._timeout, min(self._timeout, 3.0))

    def _bump(self, name: str, n: int = 1) -> None:
        with self._out_lock:
            self._n[name] += n

    def _warn(self, kind: str, msg: str, exc_info: bool = False) -> None:
        """Log at most once per LOG_INTERVAL_S per kind of problem."""
        now = time.monotonic()
        last = self._last_log.get(kind)
        if last is not None and now - last < LOG_INTERVAL_S:
            return
        self._last_log[kind] = now
        log.warning(msg, exc_info=exc_info)


def _sampled_out(resp: Response) -> int:
    """How many items a batch answer says were sampled out (parsed only when there are some)."""
    if b"sampled_out" not in resp.body:
        return 0
    with contextlib.suppress(Exception):
        return sum(r.get("status") == "sampled_out" for r in decode(resp.body)["results"])
    return 0


def _bad_items(resp: Response) -> set[int]:
    """Positions of batch items a 422 names (`loc` = ["body", "events", i, ...])."""
    try:
        detail = decode(resp.body)["detail"]
        return {
            d["loc"][2]
            for d in detail
            if list(d["loc"][:2]) == ["body", "events"] and isinstance(d["loc"][2], int)
        }
    except Exception:
        return set()


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
    """A forked child starts with an empty buffer, a new lock, and no thread or connection."""
    for monitor in list(_live):
        monitor._reset()
