"""The encoder thread of a `RetrievalMonitor`: buffered `record()` calls → wire JSON in the
outbox, releasing the app's objects at once and giving the GIL back often."""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

from ragmon.client.events import InvalidEvent, build_event, encode_event
from ragmon.client.state import MonitorState

# record() wakes the encoder once this many events wait. Until the encoder's pass, each event
# keeps a score of the app's GC-tracked objects alive (its passages, their list, the call), and
# the interpreter's young collection runs once enough of those pile up: a larger backlog makes
# the app collect where it alone never would; a smaller one costs more passes per event
# (docs/integration.md, "what the hook costs").
ENCODE_AT = 24
ID_POOL = 1024  # event ids made ahead by the encoder for record() to take
# ... at most this many per pass: making them is one C call that never gives the GIL back, so
# topping the whole pool up at once would hold it long enough for the app's thread to notice.
ID_REFILL = 64
# The encoder gives the GIL back after this much work (a few dozen typical events): without it,
# a request arriving while it works would wait up to sys.getswitchinterval() for the app's
# thread. A real sleep is needed: after sleep(0) the encoder takes the GIL back before the app
# wakes. The longest hold is then this slice plus the encoding of one event.
ENCODE_SLICE_S = 0.0002
# ... and sleeps this long, longer than a waiting thread takes to wake up: a shorter sleep let
# the encoder take the GIL back before the app's thread woke, so the app waited through several
# slices in a row (tests/bench/bench_gil.py measures both). It caps the encoder below half a
# CPU, far above what one app process records.
YIELD_FOR_S = 0.00025
ENCODE_CHUNK = 64  # events taken off the buffer per lock round trip


class Encoder(MonitorState):
    """The encoder's part of `RetrievalMonitor` (which sets these attributes)."""

    _default_labels: dict[str, str]
    _encode_interval: float

    def _encode_loop(self) -> None:
        while True:
            try:
                closing = self._closing.is_set()
                if not closing:
                    self._wake_encoder.wait(self._encode_interval)
                    self._wake_encoder.clear()
                self._make_ids()
                self._drain()  # _encode_all, or the relay's _relay_all
                if closing:
                    self._encoder_done.set()
                    self._wake_sender.set()
                    return
            except Exception:
                self._bump("errors")
                self._warn("encoder", "ragmon encoder error", exc_info=True)
                time.sleep(0.1)

    def _make_ids(self) -> None:
        """Top the pool of event ids up by at most ID_REFILL (record() takes from it)."""
        pool = self._id_pool
        if len(pool) < ID_POOL:
            pool.extend(itertools.islice(self._ids, min(ID_REFILL, ID_POOL - len(pool))))

    def _encode_all(self) -> None:
        """Move every buffered event into the outbox as JSON (invalid ones are counted).

        Events are taken ENCODE_CHUNK at a time (one lock round trip per chunk), each is copied
        into the outbox as soon as it is encoded (one short-lived bytes object at a time), and
        the GIL is given back after every ENCODE_SLICE_S of work.
        """
        slice_start = time.perf_counter()
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

    def _event(self, item: tuple, fixes: dict[str, int]) -> dict[str, Any]:
        """The wire event of one buffered `record()` call (the monitor's labels under its own)."""
        query, passages, k, labels, event_id, ts, rt, trace_id, metadata = item
        merged = {**self._default_labels, **labels} if labels else self._default_labels
        return build_event(query, passages, k, merged, event_id, ts, rt, trace_id, metadata, fixes)
