"""What the app's thread, the encoder thread and the sender thread of a `RetrievalMonitor`
share: its buffers, locks, wake-ups and counters, declared once so that each part
(`recorder`, `encoder`, `sender`) type-checks on its own; `RetrievalMonitor._reset` makes them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from ragmon.client.connection import Connection
from ragmon.client.events import FIXES, INVALID_REASONS
from ragmon.client.outbox import Outbox

log = logging.getLogger("ragmon.client")

# The encoder and sender threads run under SCHED_IDLE (`sched_idle`), the relay process and its
# threads at nice 19 and SCHED_IDLE; off (tests of what the SDK sends, not of its priority), at
# normal priority.
IDLE_THREADS = True

LOG_INTERVAL_S = 60.0
COUNTERS = (
    "recorded",  # record() calls that reached the buffer
    "sent",  # events the server accepted (2xx)
    "sampled_out",  # of those, answered "sampled_out"
    "dropped_buffer_full",  # oldest events pushed out of a full buffer
    "dropped_closed",  # record() after close()
    "dropped_send_failed",  # gave up after max_retries
    "dropped_at_close",  # still unsent when close() timed out
    "dropped_relay_died",  # handed to a relay process that died before settling them
    "invalid",  # failed client-side validation, never sent (sum of the invalid_<reason>)
    "rejected",  # answered 4xx (not 429) by the server
    "retries",  # HTTP attempts repeated after an error, 429 or 5xx
    "batches",  # batches the server accepted
    "errors",  # exceptions swallowed inside record() or the threads
    *(f"invalid_{reason}" for reason in INVALID_REASONS),
    *FIXES,
)
# Written by record() only (under _lock): nothing else may add to these keys, since the
# threads count under _out_lock and two locks on one key lose updates.
RECORD_COUNTERS = ("recorded", "dropped_closed")


class MonitorState:
    """The shared state (made by `_reset`), and the counting and logging every part uses."""

    _lock: threading.Lock  # record()'s buffer and counters
    _out_lock: threading.Lock  # the outbox and the encoder's and sender's counters
    _buf: deque[tuple]  # record() → encoder
    _out: Outbox  # encoder → sender
    _wake_encoder: threading.Event
    _wake_sender: threading.Event
    _closing: threading.Event
    _encoder_done: threading.Event
    _deadline: float | None  # close()'s deadline (monotonic)
    _http: Connection
    _encoding: int  # taken off _buf by the encoder (under _lock) ...
    _encoded: int  # ... of which settled: in the outbox or invalid (under _out_lock)
    _sending: int  # taken out of the outbox, not yet settled
    _n: dict[str, int]  # COUNTERS; record() writes only its own keys, under _lock
    _buffer_drops: int  # record()'s dropped_buffer_full (under _lock; stats() adds it)
    _ids: Iterator[str]  # event ids, made on demand
    _id_pool: list[str]  # event ids made ahead by the encoder for record() to take
    _last_log: dict[str, float]
    _drain: Callable[[], None]  # the encoder's work: in-process, or writing to the relay

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


def sched_idle() -> None:
    """The calling thread runs under SCHED_IDLE from now on, where the OS has it (Linux);
    elsewhere, or where it is refused, it keeps its priority."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def sched_normal(tid: int) -> None:
    """Thread `tid` back under the OS's normal policy (and nice 0 where allowed), for close():
    the app is shutting down, so what the threads hold must go out within the close timeout.
    Under SCHED_IDLE, while other processes kept every CPU busy, they got ~0.3 % of one and
    close() dropped everything it held. Where the OS refuses, the thread keeps its policy."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, tid, 0)  # Linux: PRIO_PROCESS of a tid is that thread
