"""The relay (`RetrievalMonitor(relay=True)`): a child process that builds, encodes and sends
the monitor's events, so that the app's own interpreter pays for one `orjson.dumps` and a share
of a pipe write per event (less than encoding in-process), and events already handed over
survive the app being killed.

Opt-in, by measurement (docs/integration.md, "What the hook costs"): it did not lower the app's
p99, and it costs more CPU per event in all (the relay decodes what the app encoded).
The relay runs at nice 19 and SCHED_IDLE. If it cannot start (no `sys.executable`, a sandbox
that forbids processes) the monitor works in-process.

Frames, both ways: a 4-byte little-endian length, then a 1-byte kind and a JSON body.
App → relay: `c` the monitor's settings (first), `e` the arguments of one `record()`, `f` a
flush request, `x` how long the app waits for it to close. Relay → app: `s` its `stats()`,
whenever they changed (at most every STATS_EVERY_S) and once more after it has closed, `w` a
warning for the app's logging. The relay closes at EOF on its stdin.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ragmon.client import encoder, state
from ragmon.client.events import InvalidEvent, build_event, decode, foreign_passage
from ragmon.client.state import RECORD_COUNTERS, MonitorState, log, sched_idle, sched_normal

try:
    import orjson
except ImportError:  # pragma: no cover - the stdlib path is tested by forcing it
    orjson = None  # type: ignore[assignment]

HEADER = struct.Struct("<I")
EVENT = struct.Struct("<Ic")  # a frame's header and kind, in one piece
IOV_MAX = 1024
NICE = 19  # the relay yields the CPU to the app
NORMAL_PRIORITY = "--normal-priority"  # the relay's argument when state.IDLE_THREADS is off
STATS_EVERY_S = 0.05
RELAY_CHUNK = 64  # events taken off the buffer per lock round trip
PIPE_BYTES = 1 << 20  # asked for (Linux F_SETPIPE_SZ); the default 64 kB holds ~10 events
F_SETPIPE_SZ = 1031
RESPAWN_AFTER_S = 5.0  # a relay that died is started again after this


def frame(kind: bytes, body: bytes) -> bytes:
    return HEADER.pack(len(body) + 1) + kind + body


class Frames:
    """Whole frames out of a byte stream read in pieces."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[bytes, bytes]]:
        self.buf += data
        pos, end = 0, len(self.buf)
        view = memoryview(self.buf)
        try:
            while end - pos >= HEADER.size:
                (n,) = HEADER.unpack_from(self.buf, pos)
                if end - pos - HEADER.size < n:
                    break
                start = pos + HEADER.size
                yield bytes(view[start : start + 1]), bytes(view[start + 1 : start + n])
                pos = start + n
        finally:
            view.release()
            del self.buf[:pos]


def _jsonable(obj: Any) -> Any:
    """orjson's `default`: what JSON cannot carry as it is, in the form `record()` takes."""
    if isinstance(obj, datetime):
        return obj.astimezone(UTC).isoformat()  # a naive datetime is local time, as in-process
    try:
        return foreign_passage(obj)  # LangChain documents, LlamaIndex nodes
    except InvalidEvent:
        raise TypeError(type(obj).__name__) from None


def dumps(obj: Any) -> bytes:
    if orjson is not None:
        return orjson.dumps(obj, default=_jsonable, option=orjson.OPT_PASSTHROUGH_DATETIME)
    return json.dumps(obj, default=_jsonable, ensure_ascii=False).encode("utf-8")


class Relayer(MonitorState):
    """The app's side of the relay, part of `RetrievalMonitor` (which sets these attributes).

    The encoder thread drains `record()`'s buffer into the relay's stdin (`_relay_all`); the
    relay's stats are read back from its stdout by whichever thread asks (`_relay_stats`).
    """

    _config: dict[str, Any]
    _close_timeout: float
    _relay: subprocess.Popen | None
    _relay_failed_at: float
    _relay_flush_asked: bool  # flush(): the encoder asks the relay to send now
    _relay_read_lock: threading.Lock
    _relayed: int  # events written to the relay process now running
    _child: dict[str, int]  # its last stats
    _frames: Frames
    _threads: tuple[threading.Thread, ...] | None

    def _spawn_relay(self) -> bool:
        """Start the relay process; False (and the monitor works in-process) if it cannot."""
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            argv = [sys.executable, "-c", "from ragmon.client.relay import main; main()"]
            proc = subprocess.Popen(
                argv if state.IDLE_THREADS else [*argv, NORMAL_PRIORITY],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                close_fds=True,
            )
            assert proc.stdin is not None and proc.stdout is not None
            with contextlib.suppress(OSError):
                import fcntl

                fcntl.fcntl(proc.stdin.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
            os.set_blocking(proc.stdout.fileno(), False)
            os.write(proc.stdin.fileno(), frame(b"c", dumps(self._config)))
        except Exception as exc:
            self._warn("relay-start", f"ragmon relay could not start ({exc}); working in-process")
            return False
        self._relay = proc
        self._relayed = 0
        self._child = {}
        self._frames = Frames()
        return True

    def _relay_all(self) -> None:
        """Write every buffered event to the relay: RELAY_CHUNK events per lock round trip, and
        the GIL given back (a pipe write, then a sleep) after every ENCODE_SLICE_S of work."""
        while True:
            with self._lock:
                n = min(len(self._buf), RELAY_CHUNK)
                if not n:
                    break
                items = [self._buf.popleft() for _ in range(n)]
                self._encoding = n
            pieces: list[bytes] = []  # written with one writev: no copy, no buffer to grow
            start = time.perf_counter()
            for i, item in enumerate(items, 1):
                data = self._relay_item(item)
                if data is not None:
                    pieces += (EVENT.pack(len(data) + 1, b"e"), data)
                if i < n and time.perf_counter() - start > encoder.ENCODE_SLICE_S:
                    self._write(pieces, len(pieces) // 2, n - i)
                    pieces = []
                    if not self._closing.is_set():  # a real sleep: the app's thread runs
                        time.sleep(encoder.YIELD_FOR_S)
                    start = time.perf_counter()
            del items, item  # the app's objects are released here
            self._write(pieces, len(pieces) // 2, 0)
        if self._relay_flush_asked:
            self._relay_flush_asked = False
            self._write([frame(b"f", b"{}")], 0, 0)
        self._relay_stats()  # and its warnings

    def _relay_item(self, item: tuple) -> bytes | None:
        """`record()`'s arguments as JSON; what JSON cannot carry is built here (as in-process)
        and sent built, or counted invalid here."""
        try:
            return dumps(item)
        except Exception:
            pass
        fixes: dict[str, int] = {}
        reason = "unreadable"
        try:
            query, passages, k, labels, event_id, ts, rt, trace_id, metadata = item
            e = build_event(query, passages, k, labels, event_id, ts, rt, trace_id, metadata, fixes)
            reason = "encoding"
            data = dumps(
                [e["query"], e["passages"], e["k"], e.get("labels"), e["event_id"],
                 e["timestamp"], e.get("relevant_total"), e.get("trace_id"), e.get("metadata")]
            )  # fmt: skip
        except Exception as exc:
            if isinstance(exc, InvalidEvent):
                reason = exc.reason
            with contextlib.suppress(Exception):
                self._warn(f"invalid-{reason}", f"invalid event not sent: {exc}")
            data = None
        with self._out_lock:
            for name, n in fixes.items():
                self._n[name] += n
            if data is None:
                self._n["invalid"] += 1
                self._n[f"invalid_{reason}"] += 1
                self._encoded += 1  # settled (the valid ones are when written)
        return data

    def _write(self, pieces: list[bytes], valid: int, taken: int) -> None:
        """Hand `valid` events (their frames in `pieces`) to the relay, `taken` more still to
        come from this chunk; blocks while the relay is behind (record() keeps filling its
        bounded buffer meanwhile)."""
        proc = self._relay
        if proc is None and time.monotonic() - self._relay_failed_at > RESPAWN_AFTER_S:
            proc = self._relay if self._spawn_relay() else None
        with self._out_lock:
            self._encoding, self._encoded = taken, 0
            if proc is None:
                self._n["dropped_relay_died"] += valid
                return
            self._relayed += valid
        try:
            assert proc.stdin is not None
            fd = proc.stdin.fileno()
            while pieces:
                n = os.writev(fd, pieces[:IOV_MAX])
                while pieces and n >= len(pieces[0]):
                    n -= len(pieces.pop(0))
                if n:  # a piece was written in part
                    pieces[0] = pieces[0][n:]
        except (OSError, ValueError):
            self._relay_died(proc)

    def _relay_stats(self) -> dict[str, int]:
        """The relay's latest stats (read whatever it has written)."""
        proc = self._relay
        if proc is not None and proc.stdout is not None:
            with contextlib.suppress(BlockingIOError, OSError), self._relay_read_lock:
                while data := os.read(proc.stdout.fileno(), 1 << 16):
                    self._read(data)
        return self._child

    def _read(self, data: bytes) -> None:
        for kind, body in self._frames.feed(data):
            if kind == b"s":
                self._child = decode(body)
            elif kind == b"w":  # the relay's warning, logged by the app's own logging
                log.warning(body.decode("utf-8", "replace"))

    def _relay_died(self, proc: subprocess.Popen) -> None:
        """The relay is gone: what it had not settled is counted lost; a new one starts later."""
        if proc is not self._relay:  # close() has settled it already
            return
        self._end_relay(self._relay_stats(), "dropped_relay_died")
        self._warn("relay-died", "ragmon relay process died; its unsent events were counted lost")
        self._relay_failed_at = time.monotonic()
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait(1.0)

    def _end_relay(self, child: dict[str, int], lost_as: str) -> None:
        """A relay has ended: add its last counters to this monitor's, and count what it was
        given and had not settled under `lost_as`."""
        settled = child.get("recorded", 0) - child.get("buffered", 0) - child.get("in_flight", 0)
        with self._out_lock:
            for name, value in child.items():
                if name in self._n and name not in RECORD_COUNTERS:
                    self._n[name] += value
            self._n[lost_as] += self._relayed - settled
            self._relayed = 0
            self._child = {}
        self._relay = None

    def _relay_counts(self, out: dict[str, int]) -> None:
        """Merge the relay's counters into a `stats()` snapshot (events still in the pipe, or
        not yet in the relay's last stats, are `buffered`)."""
        child = self._relay_stats()
        for name, value in child.items():
            if name in out and name not in ("recorded", "buffered", "in_flight"):
                out[name] += value
        out["buffered"] += self._relayed - child.get("recorded", 0) + child.get("buffered", 0)
        out["in_flight"] += child.get("in_flight", 0)

    def _relay_close(self, end: float) -> None:
        """After the encoder has written everything: EOF to the relay, wait for its last stats
        until `end`; what it could not send by then is counted `dropped_at_close`."""
        proc = self._relay
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):  # its threads, as close() does ours
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                sched_normal(int(tid))
        with contextlib.suppress(OSError, ValueError):
            if not any(t.is_alive() for t in self._threads or ()):  # nobody else writes
                close_s = max(0.0, 0.9 * (end - time.monotonic()) - 0.05)
                os.write(proc.stdin.fileno(), frame(b"x", json.dumps(close_s).encode()))
            proc.stdin.close()
        fd = proc.stdout.fileno()
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                break
            self._read(data)
        self._end_relay(self._child, "dropped_at_close")
        with contextlib.suppress(Exception):
            proc.wait(max(0.05, end - time.monotonic()))
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


# ---- the relay process --------------------------------------------------------------------


def main() -> None:
    """`python -m ragmon.client.relay`: record what the app sends until EOF, then close."""
    from ragmon.client.recorder import RetrievalMonitor

    encoder.ENCODE_SLICE_S = float("inf")  # no app thread here to give the GIL back to
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the app closes it (EOF), not the app's ^C
    if NORMAL_PRIORITY in sys.argv:
        state.IDLE_THREADS = False  # its monitor's threads too
    else:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, NICE)
        sched_idle()  # Linux: runs only on a CPU left idle; its threads inherit it
    out = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, not into the frames
    os.set_blocking(out, False)
    log.addHandler(_Forward(out))  # the monitor's warnings go to the app's logging
    log.propagate = False
    frames = Frames()
    monitor: Any = None
    flush_s = 5.0
    last: dict[str, int] = {}
    last_at = 0.0
    while True:
        ready, _, _ = select.select([0], [], [], STATS_EVERY_S)
        if ready:
            data = os.read(0, PIPE_BYTES)
            if not data:
                break
            for kind, body in frames.feed(data):
                if kind == b"e":
                    _record(monitor, decode(body))
                elif kind == b"c":  # the first frame
                    config = decode(body)
                    flush_s = config.get("close_timeout", flush_s)
                    monitor = RetrievalMonitor(**config, relay=False)
                elif kind == b"f":
                    monitor.flush(flush_s)
                elif kind == b"x":  # closing: the app waits this long
                    flush_s = decode(body)
        now = time.monotonic()
        if monitor is not None and now - last_at >= STATS_EVERY_S:
            last_at = now
            stats = monitor.stats()
            if stats != last:
                with contextlib.suppress(BlockingIOError):  # the app reads them when it asks
                    os.write(out, frame(b"s", json.dumps(stats).encode()))
                    last = stats
    if monitor is None:
        return
    monitor.close(flush_s)
    os.set_blocking(out, True)
    with contextlib.suppress(OSError):
        os.write(out, frame(b"s", json.dumps(monitor.stats()).encode()))


class _Forward(logging.Handler):
    """Sends each warning to the app as a `w` frame (dropped if the app is not reading)."""

    def __init__(self, fd: int) -> None:
        super().__init__(logging.WARNING)
        self.fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            os.write(self.fd, frame(b"w", self.format(record).encode("utf-8", "replace")))


def _record(monitor: Any, args: list) -> None:
    query, passages, k, labels, event_id, ts, rt, trace_id, metadata = args
    if type(passages) is list:  # JSON made the app's tuples lists: back to the fast path
        passages = [tuple(p) if type(p) is list else p for p in passages]
    monitor.record(
        query, passages, k, labels, event_id, ts, rt, trace_id=trace_id, metadata=metadata
    )


if __name__ == "__main__":
    main()
