"""The SDK never blocks or breaks the app, and delivers what it can (real sockets, real HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragmon.client import (
    InvalidEvent,
    RetrievalMonitor,
    build_event,
    encode_event,
    outbox,
    passage,
    recorder,
)
from ragmon.core.wire import MAX_ID_CHARS, MAX_TEXT_CHARS
from tests.support.waiting import scaled


class Sidecar:
    """A real HTTP server on 127.0.0.1 that records batches and answers from a script.

    `script` items are (status, headers) answered in order; after it runs out, 202.
    """

    def __init__(self, script: list[tuple[int, dict[str, str]]] | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[tuple[float, dict[str, str], dict]] = []
        self.lock = threading.Lock()
        sidecar = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with sidecar.lock:
                    sidecar.requests.append(
                        (time.monotonic(), dict(self.headers), json.loads(body))
                    )
                    status, headers = sidecar.script.pop(0) if sidecar.script else (202, {})
                if status < 300:
                    events = json.loads(body)["events"]
                    out = {
                        "results": [{"event_id": e["event_id"], "status": "queued"} for e in events]
                    }
                else:
                    out = {"detail": headers.pop("x-detail", "no")}
                payload = json.dumps(out).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def events(self) -> list[dict]:
        with self.lock:
            return [e for _, _, body in self.requests for e in body["events"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(
    autouse=True, params=["in-process", pytest.param("relay", marks=pytest.mark.process)]
)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs both ways: with the encoder and sender threads in the app's
    process (the default, and the relay's fallback) and through the relay process."""
    defaults = dict(RetrievalMonitor.__init__.__kwdefaults__ or {})
    defaults["relay"] = request.param == "relay"
    if defaults["relay"]:  # close() returns once all is settled; a relay process starting cold
        defaults["close_timeout"] = 30.0  # under CI load on a slow host took over 5 s
    monkeypatch.setattr(RetrievalMonitor.__init__, "__kwdefaults__", defaults)
    return request.param


@pytest.fixture
def sidecar():
    server = Sidecar()
    yield server
    server.stop()


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


@pytest.fixture
def silent_reader():
    """A server that reads requests and never answers: `(port, received)`, the bytes so far."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    received = bytearray()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = s.accept()
            while data := conn.recv(65536):
                received.extend(data)

    threading.Thread(target=serve, daemon=True).start()
    yield s.getsockname()[1], received
    s.close()


PASSAGES = [
    {"id": f"p{i}", "text": f"passage number {i}", "score": 1.0 / (i + 1)} for i in range(4)
]


def wait_for(predicate, timeout: float = 10.0) -> bool:
    """Whether `predicate()` turns true within `timeout` s, stretched by the machine's load."""
    start = time.monotonic()
    while time.monotonic() - start < scaled(timeout):
        if predicate():
            return True
        time.sleep(0.01)
    return False


def records(monitor: RetrievalMonitor, n: int) -> None:
    for i in range(n):
        monitor.record(f"query {i}", PASSAGES, 2)


@pytest.fixture
def connect_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of every connection attempt the SDK makes."""
    seen: list[str] = []
    real = http.client.HTTPConnection.connect

    def connect(self: http.client.HTTPConnection) -> None:
        seen.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(http.client.HTTPConnection, "connect", connect)
    return seen


def close_returns(monitor: RetrievalMonitor, timeout: float) -> bool:
    """Whether `close(timeout)` returns while a request hangs for an hour (a hang guard: 60 s)."""
    closer = threading.Thread(target=monitor.close, kwargs={"timeout": timeout}, daemon=True)
    closer.start()
    closer.join(60)
    return not closer.is_alive()


# ---- never blocks ---------------------------------------------------------------------------


def test_record_does_not_wait_when_the_sidecar_is_down(
    closed_port: int, connect_threads: list[str]
) -> None:
    """Records never connect on the app's thread (their speed: tests/bench/bench_record.py)."""
    url = f"http://127.0.0.1:{closed_port}"
    monitor = RetrievalMonitor(url, flush_interval=0.01, backoff=0.05, relay=False)
    records(monitor, 2000)
    assert wait_for(lambda: monitor.stats()["retries"] >= 2)  # the sender really met refusals
    records(monitor, 2000)
    me = threading.current_thread().name
    assert len(connect_threads) >= 2 and me not in connect_threads, (me, set(connect_threads))
    assert close_returns(monitor, 0.3)
    stats = monitor.stats()
    assert stats["recorded"] == 4000 and stats["sent"] == 0 and stats["errors"] == 0
    assert_conserved(stats)


def test_record_does_not_wait_when_the_sidecar_never_answers(silent_reader) -> None:
    port, received = silent_reader
    monitor = RetrievalMonitor(f"http://127.0.0.1:{port}", flush_interval=0.01, timeout=3600)
    monitor.record("first", PASSAGES, 2)
    # the sender is blocked on the answer to a request that holds "first" alone (in_flight == 1
    # alone was also true while the encoder held it: under load the sender then took a batch
    # of 1000 with it, and 1001 were left at close instead of 2001)
    assert wait_for(lambda: b'"first"' in received and monitor.stats()["in_flight"] == 1)
    records(monitor, 2000)
    assert monitor.stats()["in_flight"] >= 1  # still blocked: the records did not wait for it
    assert close_returns(monitor, 0.5)  # close honours its timeout even with a hung request
    stats = monitor.stats()
    # in-process the hung request is still in flight; a relay that had it ended with it
    assert stats["sent"] == 0 and stats["dropped_at_close"] + stats["in_flight"] == 2001
    assert stats["dropped_at_close"] >= 2000
    assert_conserved(stats)


@pytest.mark.slow
@pytest.mark.lowest_priority
def test_close_delivers_what_it_holds_while_other_processes_keep_every_cpu_busy(sidecar):
    """The SDK's threads (and the relay) run under SCHED_IDLE; close() puts them back at normal
    priority, or a busy machine gives them ~0.3 % of a CPU and the timeout drops everything."""
    monitor = RetrievalMonitor(sidecar.url, flush_interval=60, encode_interval=60)
    monitor.record("first", PASSAGES, 2)
    assert monitor.flush(scaled(30))  # the threads (or the relay) are up and have sent it
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        time.sleep(0.5)  # the load is on
        records(monitor, 250)
        monitor.close(timeout=10)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    stats = monitor.stats()
    assert (stats["sent"], stats["dropped_at_close"], len(sidecar.events())) == (251, 0, 251)


# ---- buffer bound ---------------------------------------------------------------------------


def test_full_buffer_drops_the_oldest_and_counts_each_drop(
    sidecar: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "ENCODE_AT", 10**6)  # the encoder waits its 60 s interval
    monitor = RetrievalMonitor(sidecar.url, max_buffer=100, flush_interval=60, encode_interval=60)
    for i in range(1000):
        monitor.record(f"q{i}", PASSAGES, 2, event_id=f"e{i}")
    stats = monitor.stats()
    assert stats["buffered"] == 100
    assert stats["dropped_buffer_full"] == 900 and stats["recorded"] == 1000
    monitor.close(timeout=scaled(5))
    assert [e["event_id"] for e in sidecar.events()] == [f"e{i}" for i in range(900, 1000)]
    assert monitor.stats()["sent"] == 100


def test_encoded_outbox_is_bounded_too(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    monitor = RetrievalMonitor(url, max_buffer=50, encode_interval=0.005, backoff=0.05)
    for _ in range(10):
        records(monitor, 50)
        time.sleep(0.05)  # the encoder moves them to the outbox, which overflows
    # (a relay holds as much, once it has read what is still in its pipe)
    assert wait_for(lambda: monitor.stats()["buffered"] <= 100)
    stats = monitor.stats()
    assert stats["buffered"] <= 100 and stats["dropped_buffer_full"] >= 350
    assert_conserved(stats)
    monitor.close(timeout=0.2)
    assert_conserved(monitor.stats())


def test_drops_counted_while_the_encoder_adds_to_the_outbox(
    closed_port: int, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """record() counts its full buffer's drops while the encoder, under the other lock, is
    adding an event to the outbox (and counting the outbox's drops): none may be lost. It once
    lost 50, when the encoder thread was preempted inside that addition."""
    if mode == "relay":
        pytest.skip("with a relay the encoder writes to its pipe, not to the outbox")
    inside, go = threading.Event(), threading.Event()
    real_add = outbox.Outbox.add

    def add(self: outbox.Outbox, data: bytes) -> int:
        if not inside.is_set():  # the first addition waits until record() has dropped some
            inside.set()
            go.wait(scaled(30))
        return real_add(self, data)

    monkeypatch.setattr(outbox.Outbox, "add", add)
    monitor = RetrievalMonitor(
        f"http://127.0.0.1:{closed_port}", max_buffer=10, encode_interval=0.005, backoff=0.05
    )
    records(monitor, 10)
    assert inside.wait(scaled(10))  # the encoder holds those 10 and is inside its first add
    records(monitor, 30)  # 20 pushed out of the full buffer, counted by record()
    go.set()
    assert wait_for(lambda: monitor.stats()["in_flight"] == 0)
    stats = monitor.stats()
    assert stats["dropped_buffer_full"] >= 20
    assert_conserved(stats)
    monitor.close(timeout=0.2)
    assert_conserved(monitor.stats())


def assert_conserved(stats: dict[str, int]) -> None:
    """Every recorded event is somewhere: sent, refused, dropped, buffered or in flight."""
    accounted = stats["sent"] + stats["invalid"] + stats["rejected"]
    accounted += sum(v for name, v in stats.items() if name.startswith("dropped_"))
    accounted -= stats["dropped_closed"]  # never counted as recorded
    assert stats["recorded"] == accounted + stats["buffered"] + stats["in_flight"], stats


# ---- delivery -------------------------------------------------------------------------------


def test_events_recorded_before_close_arrive(sidecar: Sidecar) -> None:
    monitor = RetrievalMonitor(
        sidecar.url, api_key="k" * 20, labels={"app": "shop"}, batch_size=100, flush_interval=60
    )
    when = datetime.now(UTC) - timedelta(hours=1)
    for i in range(250):
        monitor.record(f"q{i}", PASSAGES, 2, labels={"segment": "gold"}, event_id=f"e{i}")
    monitor.record("last", PASSAGES, 4, timestamp=when, relevant_total=3)
    monitor.close(timeout=scaled(5))
    events = sidecar.events()
    assert len(events) == 251 and monitor.stats()["sent"] == 251
    assert [e["event_id"] for e in events[:250]] == [f"e{i}" for i in range(250)]
    assert all(len(body["events"]) <= 100 for _, _, body in sidecar.requests)
    assert all(h["Authorization"] == "Bearer " + "k" * 20 for _, h, _ in sidecar.requests)
    first, last = events[0], events[-1]
    assert first["labels"] == {"app": "shop", "segment": "gold"}
    assert first["passages"][0] == {"id": "p0", "text": "passage number 0", "score": 1.0}
    assert first["timestamp"].endswith("Z")
    assert len(last["event_id"]) == 36  # a uuid4 made by the SDK
    assert datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")) == when
    assert last["relevant_total"] == 3 and last["k"] == 4


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
@pytest.mark.lowest_priority
def test_the_hooks_threads_run_under_sched_idle_and_the_apps_do_not(sidecar: Sidecar) -> None:
    """The OS gives the hook's threads a CPU only when the app's threads leave it idle."""
    monitor = RetrievalMonitor(
        sidecar.url, api_key="k" * 20, labels={"app": "shop"}, flush_interval=0.05
    )
    for i in range(20):
        monitor.record(f"q{i}", PASSAGES, 2)
    deadline = time.monotonic() + scaled(30)
    while monitor.stats()["sent"] < 20 and time.monotonic() < deadline:  # both threads worked
        time.sleep(0.02)
    threads = [t for t in threading.enumerate() if t.name.startswith("ragmon-")]
    policies = {t.name: os.sched_getscheduler(t.native_id or 0) for t in threads}
    assert policies == {"ragmon-encoder": os.SCHED_IDLE, "ragmon-sender": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread, the app's, is untouched
    monitor.close(timeout=scaled(5))
    assert monitor.stats()["sent"] == 20 and len(sidecar.events()) == 20


@pytest.mark.process
def test_events_are_flushed_at_interpreter_exit(sidecar: Sidecar) -> None:
    script = (
        "from ragmon.client import RetrievalMonitor\n"
        f"m = RetrievalMonitor({sidecar.url!r}, flush_interval=60)\n"
        "for i in range(30):\n"
        "    m.record('q', [('a', 't'), ('b', 'u')], 2, event_id=f'exit-{i}')\n"
    )  # no close(): the atexit hook must send them
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], cwd=repo, check=True, timeout=30)
    assert sorted(e["event_id"] for e in sidecar.events()) == sorted(f"exit-{i}" for i in range(30))


def test_async_context_manager_delivers(sidecar: Sidecar) -> None:
    async def app() -> None:
        async with RetrievalMonitor(sidecar.url, flush_interval=60) as monitor:
            await monitor.arecord("q", PASSAGES, 2, event_id="async-1")
            monitor.record("q", PASSAGES, 2, event_id="async-2")

    asyncio.run(app())
    assert [e["event_id"] for e in sidecar.events()] == ["async-1", "async-2"]


def test_503_retry_after_is_honoured() -> None:
    server = Sidecar(script=[(503, {"Retry-After": "1"})])
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=0.01, backoff=0.01)
        monitor.record("q", PASSAGES, 2, event_id="once")
        assert wait_for(lambda: monitor.stats()["sent"] == 1, timeout=10)
        (t1, _, b1), (t2, _, b2) = server.requests
        assert t2 - t1 >= 1.0  # waited Retry-After, not the 10 ms backoff
        assert b1 == b2  # same event_id: the retry is idempotent
        stats = monitor.stats()
        assert stats["retries"] == 1 and stats["rejected"] == 0
        monitor.close()
    finally:
        server.stop()


def test_5xx_and_429_retry_with_backoff_then_succeed() -> None:
    server = Sidecar(script=[(500, {}), (429, {}), (502, {})])
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=0.01, backoff=0.05)
        monitor.record("q", PASSAGES, 2)
        assert wait_for(lambda: monitor.stats()["sent"] == 1)
        assert len(server.requests) == 4 and monitor.stats()["retries"] == 3
        monitor.close()
    finally:
        server.stop()


def test_4xx_is_dropped_as_rejected_without_retry() -> None:
    server = Sidecar(script=[(401, {})])
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=0.01, backoff=0.01)
        monitor.record("q", PASSAGES, 2)
        assert wait_for(lambda: monitor.stats()["rejected"] == 1)
        monitor.record("q2", PASSAGES, 2)
        monitor.close()
        assert len(server.requests) == 2 and monitor.stats()["sent"] == 1
        assert monitor.stats()["retries"] == 0
    finally:
        server.stop()


def test_422_naming_an_item_drops_only_that_item() -> None:
    detail = [{"loc": ["body", "events", 1, "query"], "msg": "bad", "type": "x"}]
    server = Sidecar(script=[(422, {"x-detail": detail})])
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=60)
        for i in range(3):
            monitor.record(f"q{i}", PASSAGES, 2, event_id=f"e{i}")
        monitor.close()
        assert [e["event_id"] for _, _, b in server.requests[1:] for e in b["events"]] == [
            "e0",
            "e2",
        ]
        stats = monitor.stats()
        assert stats["rejected"] == 1 and stats["sent"] == 2
    finally:
        server.stop()


def test_gives_up_after_max_retries_and_counts_it(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    monitor = RetrievalMonitor(url, flush_interval=0.01, backoff=0.01, max_retries=2)
    monitor.record("q", PASSAGES, 2)
    assert wait_for(lambda: monitor.stats()["dropped_send_failed"] == 1)
    assert monitor.stats()["retries"] == 2
    monitor.close(timeout=0.1)


def test_each_kind_of_problem_is_logged_at_most_once_a_minute(closed_port: int, caplog) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    monitor = RetrievalMonitor(url, flush_interval=0.01, backoff=0.01, backoff_max=0.01)
    with caplog.at_level("WARNING", logger="ragmon.client"):
        for _ in range(20):
            monitor.record("q", PASSAGES, 2)
            monitor.record("q", PASSAGES, 0)  # invalid
        assert wait_for(lambda: monitor.stats()["retries"] >= 5)
        assert wait_for(lambda: monitor.stats()["invalid"] == 20)
        monitor.close(timeout=0.1)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in messages) == 1
    assert sum("invalid event" in m for m in messages) == 1


def test_invalid_events_are_counted_per_reason_not_sent(sidecar: Sidecar, caplog) -> None:
    monitor = RetrievalMonitor(sidecar.url, flush_interval=60)
    with caplog.at_level("WARNING", logger="ragmon.client"):
        for _ in range(3):
            monitor.record("q", PASSAGES, 0)  # k out of range
            monitor.record("", PASSAGES, 2)  # empty query
            monitor.record("q", [{"id": "a", "text": "t", "grade": 7}], 1)
            monitor.record("q", [object()], 1)
        monitor.record("q", PASSAGES, 2, event_id="ok")
        monitor.close()
    assert [e["event_id"] for e in sidecar.events()] == ["ok"]
    stats = monitor.stats()
    reasons = {k: v for k, v in stats.items() if k.startswith("invalid_") and v}
    assert reasons == {
        "invalid_k": 3,
        "invalid_query": 3,
        "invalid_grade": 3,
        "invalid_passages": 3,
    }
    assert stats["invalid"] == 12
    messages = [r.getMessage() for r in caplog.records]
    for field in ("k:", "query:", "grade:", "passages:"):  # once a minute per reason
        assert sum(m.startswith(f"invalid event not sent: {field}") for m in messages) == 1


def test_record_after_close_is_counted(sidecar: Sidecar) -> None:
    monitor = RetrievalMonitor(sidecar.url)
    monitor.close()
    monitor.record("q", PASSAGES, 2)
    assert monitor.stats()["dropped_closed"] == 1 and sidecar.requests == []


# ---- fork -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_forked_child_keeps_working(sidecar: Sidecar) -> None:
    monitor = RetrievalMonitor(sidecar.url, flush_interval=0.05)
    monitor.record("before fork", PASSAGES, 2, event_id="parent-0")
    assert wait_for(lambda: monitor.stats()["sent"] == 1)  # the parent's thread is running
    pid = os.fork()
    if pid == 0:  # the child: fresh buffer, lock and thread
        code = 1
        try:
            fresh = monitor.stats()["recorded"] == 0
            for i in range(5):
                monitor.record("from child", PASSAGES, 2, event_id=f"child-{i}")
            monitor.close(timeout=scaled(5))
            code = 0 if fresh and monitor.stats()["sent"] == 5 else 1
        finally:
            os._exit(code)
    monitor.record("after fork", PASSAGES, 2, event_id="parent-1")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    monitor.close(timeout=scaled(5))
    ids = {e["event_id"] for e in sidecar.events()}
    assert ids == {"parent-0", "parent-1"} | {f"child-{i}" for i in range(5)}
    assert monitor.stats()["sent"] == 2  # the child's counters are its own


def test_the_encoder_makes_event_ids_ahead_a_few_per_pass(closed_port: int) -> None:
    """Making ids holds the GIL for the whole call: each pass tops the pool up by at most
    ID_REFILL, and passes fill it up to ID_POOL, with ids never made twice."""
    from ragmon.client import encoder

    monitor = RetrievalMonitor(f"http://127.0.0.1:{closed_port}")
    sizes = [len(monitor._id_pool)]
    for _ in range(encoder.ID_POOL // encoder.ID_REFILL + 2):
        monitor._make_ids()
        sizes.append(len(monitor._id_pool))
    steps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert sizes[0] == 0 and max(steps) == encoder.ID_REFILL and sizes[-1] == encoder.ID_POOL
    assert len(set(monitor._id_pool)) == encoder.ID_POOL
    monitor.close()


@pytest.mark.process
def test_record_returns_the_event_id_unique_across_a_fork(sidecar: Sidecar) -> None:
    monitor = RetrievalMonitor(sidecar.url, flush_interval=0.05)
    ids = [monitor.record("q", PASSAGES, 2) for _ in range(500)]
    assert len(set(ids)) == 500 and all(uuid.UUID(i).version == 4 for i in ids)
    assert monitor.record("q", PASSAGES, 2, event_id="mine") == "mine"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child draws its own ids: never one its parent also makes
        try:
            child = [monitor.record("from child", PASSAGES, 2) for _ in range(500)]
            monitor.close(timeout=scaled(5))
            os.write(write, json.dumps(child).encode())
        finally:
            os._exit(0)
    os.close(write)
    more = [monitor.record("q", PASSAGES, 2) for _ in range(500)]
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        child = json.loads(f.read())
    assert os.waitstatus_to_exitcode(status) == 0
    monitor.close(timeout=scaled(5))
    assert len(set(ids + more + child)) == 1500
    sent = {e["event_id"] for e in sidecar.events()}
    assert set(ids + more + child + ["mine"]) == sent  # the id returned is the id sent
    assert monitor.record("q", PASSAGES, 2) is None  # after close: not recorded


# ---- never raises ---------------------------------------------------------------------------


class Hostile:
    """Raises from everything the SDK might touch."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(name)

    def __iter__(self) -> object:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        raise RuntimeError("len")

    def __bool__(self) -> bool:
        raise RuntimeError("bool")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = object.__hash__


anything = st.deferred(
    lambda: st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.binary(),
        st.datetimes(),
        st.just(Hostile()),
        st.builds(object),
        st.lists(anything, max_size=4),
        st.tuples(anything, anything),
        st.tuples(anything, anything, anything),
        st.dictionaries(st.sampled_from(["id", "text", "score", "grade", "app"]), anything),
        st.builds(SimpleNamespace, page_content=anything, metadata=anything),
        st.builds(SimpleNamespace, node=anything, score=anything),
    )
)


@pytest.fixture(scope="module")
def shared_sidecar():
    server = Sidecar()
    yield server
    server.stop()


def test_record_never_raises(shared_sidecar: Sidecar, mode: str) -> None:
    """Any input, anywhere: record() returns and the totals add up. Each example starts and
    closes a monitor; through the relay that is a process each (~0.4 s), so fewer examples."""

    @settings(
        max_examples=300 if mode == "in-process" else 40,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        query=anything,
        passages=anything,
        k=anything,
        labels=anything,
        event_id=anything,
        timestamp=anything,
        relevant_total=anything,
    )
    def check(query, passages, k, labels, event_id, timestamp, relevant_total) -> None:
        monitor = RetrievalMonitor(shared_sidecar.url, flush_interval=60, max_buffer=10)
        monitor.record(query, passages, k, labels, event_id, timestamp, relevant_total)
        monitor.record(query, passages, k)
        monitor.close()  # the sender met the same input and survived it
        stats = monitor.stats()
        assert stats["recorded"] + stats["errors"] == 2
        assert stats["sent"] + stats["invalid"] + stats["rejected"] == stats["recorded"]
        assert_conserved(stats)

    check()


def test_sender_survives_garbage_and_still_delivers(sidecar: Sidecar) -> None:
    monitor = RetrievalMonitor(sidecar.url, flush_interval=60)
    monitor.record(Hostile(), [Hostile(), object()], Hostile(), Hostile(), Hostile(), Hostile())
    monitor.record("q", [Hostile(), Hostile()], 1)
    monitor.record("q", Hostile(), 1)
    monitor.record("q", "\ud800 lone surrogate", 1)
    monitor.record("q\ud800", PASSAGES, 1)
    monitor.record("q", PASSAGES, 2, event_id="good")
    monitor.close()
    assert [e["event_id"] for e in sidecar.events()] == ["good"]
    stats = monitor.stats()
    assert stats["errors"] == 1 and stats["invalid"] == 4 and stats["sent"] == 1


# ---- passage shapes -------------------------------------------------------------------------


class LangChainDoc:
    def __init__(self, text: str, metadata: dict, id: str | None = None) -> None:
        self.page_content, self.metadata, self.id = text, metadata, id


class TextNode:
    def __init__(self, text: str, node_id: str) -> None:
        self.text, self.node_id = text, node_id

    def get_content(self) -> str:
        return self.text


class ContentOnlyNode:
    def __init__(self, text: str, id_: str) -> None:
        self._text, self.id_ = text, id_

    def get_content(self) -> str:
        return self._text


class NodeWithScore:
    def __init__(self, node: object, score: float | None) -> None:
        self.node, self.score = node, score


@pytest.mark.parametrize(
    ("given_passage", "expected"),
    [
        (
            {"id": "a", "text": "t", "score": 2, "grade": 3},
            {"id": "a", "text": "t", "score": 2.0, "grade": 3},
        ),
        (("a", "t"), {"id": "a", "text": "t"}),
        (("a", "t", 0.5), {"id": "a", "text": "t", "score": 0.5}),
        ((7, "t", float("nan")), {"id": "7", "text": "t"}),
        ({"id": "a", "text": "t", "score": 0.5}, {"id": "a", "text": "t", "score": 0.5}),
        ({"id": "a", "text": "t", "score": float("inf")}, {"id": "a", "text": "t"}),
        ({"id": "a", "text": "", "score": 0.5}, None),
        (LangChainDoc("t", {"id": "m", "score": 0.3}), {"id": "m", "text": "t", "score": 0.3}),
        (LangChainDoc("t", {}, id="doc-id"), {"id": "doc-id", "text": "t"}),
        ((LangChainDoc("t", {"id": "m"}), 0.9), {"id": "m", "text": "t", "score": 0.9}),
        (NodeWithScore(TextNode("t", "n1"), 0.7), {"id": "n1", "text": "t", "score": 0.7}),
        (NodeWithScore(ContentOnlyNode("t", "n2"), None), {"id": "n2", "text": "t"}),
        (TextNode("t", "n3"), {"id": "n3", "text": "t"}),
    ],
)
def test_passage_shapes(given_passage, expected) -> None:
    assert passage(given_passage) == expected


SHAPES = [
    ("a", "t", 0.5),
    ("b", "text two", -1.25),
    ["c", "a list of three", 0.1],
    {"id": "d", "text": "a dict of three", "score": 0.2},
    ("e", "t", float("nan")),
    ("f", "t", float("inf")),
    ("g", "", 0.3),
    ("h" * (MAX_ID_CHARS + 1), "long id", 0.4),
    ("i", "x" * (MAX_TEXT_CHARS + 1), 0.5),
    (9, "an int id", 0.6),
    ("j", "an int score", 1),
    ("k", "t", True),
    "abc",
    ("l", "two"),
    LangChainDoc("a document", {"id": "m"}),
]


@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
def test_an_event_of_plain_triples_and_one_other_shape_is_built_as_passage_by_passage(
    shape,
) -> None:
    """build_event takes plain (id, text, float) triples in one pass and anything else through
    passage(): with one other shape among triples, anywhere, the two must agree."""
    triples = [(f"p{i}", f"text {i}", float(i)) for i in range(4)]
    for at in (0, 2, 4):
        given = [*triples[:at], shape, *triples[at:]]
        fixes: dict[str, int] = {}
        event = build_event("q", given, 3, timestamp=time.time(), fixes=fixes)
        one_by_one: dict[str, int] = {}
        wanted = [w for p in given if (w := passage(p, 0, one_by_one)) is not None]
        assert event["passages"] == wanted
        assert fixes == one_by_one
    with pytest.raises(InvalidEvent, match="passages"):  # and one bad passage is still refused
        build_event("q", [*triples, ("x", 5, 0.1)], 3, timestamp=time.time())


def test_passage_without_id_gets_a_stable_content_id() -> None:
    a = passage(LangChainDoc("same text", {}))
    assert a["id"].startswith("sha1:") and a == passage(LangChainDoc("same text", {}))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": 101},
        {"k": True},
        {"query": ""},
        {"passages": [("a", None)]},
        {"passages": [("a", "t", 1.0, "x")]},
        {"passages": [{"id": "a", "text": "t", "grade": 4}] * 2},
        {"event_id": "x" * 129},
        {"timestamp": datetime.now(UTC) - timedelta(days=36)},
        {"timestamp": "2024-01-01T00:00:00"},
        {"relevant_total": -1},
    ],
)
def test_build_event_rejects_what_the_server_would(kwargs) -> None:
    args = {"query": "q", "passages": [("a", "t"), ("b", "u")], "k": 2, "timestamp": time.time()}
    assert build_event(**args)["k"] == 2
    with pytest.raises(InvalidEvent) as info:
        build_event(**{**args, **kwargs})
    assert info.value.reason == ("grade" if "grade" in str(kwargs) else next(iter(kwargs)))


LONG = "word " * 7000  # 35,000 chars: over MAX_TEXT_CHARS


@pytest.mark.parametrize(
    ("kwargs", "check", "fixes"),
    [
        ({"passages": [], "k": 5}, lambda e: e["passages"] == [], {}),
        ({"passages": [("a", "t")], "k": 5}, lambda e: len(e["passages"]) == 1, {}),
        (
            {"passages": ["first chunk", "second chunk"]},
            lambda e: (
                [p["id"] for p in e["passages"]]
                == [
                    "sha1:" + hashlib.sha1(t.encode()).hexdigest()
                    for t in ("first chunk", "second chunk")
                ]
            ),
            {},
        ),
        (
            {"passages": [("a", "t"), ("b", ""), ("c", "u")]},
            lambda e: [p["id"] for p in e["passages"]] == ["a", "c"],
            {"passages_skipped_empty": 1},
        ),
        (
            {"passages": [LONG, ("b", LONG)]},
            lambda e: (
                [len(p["text"]) for p in e["passages"]] == [32768, 32768]
                and e["passages"][0]["id"] == "sha1:" + hashlib.sha1(LONG.encode()).hexdigest()
            ),
            {"passages_truncated": 2},
        ),
        (
            {"passages": [("x" * 300, "t")]},
            lambda e: e["passages"][0]["id"] == "sha1:" + hashlib.sha1(b"x" * 300).hexdigest(),
            {"passage_ids_hashed": 1},
        ),
        (
            {"passages": [(f"p{i}", "t") for i in range(205)]},
            lambda e: len(e["passages"]) == 200 and e["passages"][-1]["id"] == "p199",
            {"passages_cut": 5},
        ),
        ({"query": "q" * 9000}, lambda e: len(e["query"]) == 8192, {"queries_truncated": 1}),
        (
            {"labels": {"app": "a", "user": "bob", "tier": 2}, "metadata": {"tier": "gold"}},
            lambda e: (
                e["labels"] == {"app": "a"} and e["metadata"] == {"tier": "gold", "user": "bob"}
            ),
            {"labels_to_metadata": 2},
        ),
        (
            {"metadata": {f"key{i}": i for i in range(40)}},
            lambda e: list(e["metadata"]) == [f"key{i}" for i in range(32)],
            {"metadata_dropped": 8},
        ),
        (
            {"metadata": {"big": "é" * 1000, "ok": True, "nan": float("nan"), "list": [1]}},
            lambda e: e["metadata"] == {"ok": True},  # "é" is 6 bytes as the server counts
            {"metadata_dropped": 3},
        ),
        (
            {"trace_id": uuid.UUID(int=7)},
            lambda e: e["trace_id"] == "00000000-0000-0000-0000-000000000007",
            {},
        ),
        ({"trace_id": "t" * 129}, lambda e: "trace_id" not in e, {"trace_ids_dropped": 1}),
        (
            {"labels": {"app": "has space", "index": "x" * 70, "segment": {}, "retriever": ""}},
            lambda e: e["labels"] == {"app": "has_space", "index": "x" * 64},
            {"labels_repaired": 3},
        ),
    ],
)
def test_build_event_repairs_what_it_can_and_counts_it(kwargs, check, fixes) -> None:
    args = {"query": "q", "passages": [("a", "t"), ("b", "u")], "k": 2, "timestamp": time.time()}
    counted: dict[str, int] = {}
    event = build_event(**{**args, **kwargs}, fixes=counted)
    assert check(event), event
    assert counted == fixes
    assert encode_event(event)  # and it is valid JSON for the wire


# ---- against the real ragmon API ------------------------------------------------------------


@pytest.fixture
def ragmon_api(settings):
    """The real API (`create_app`) under uvicorn in a thread, on a real Redis, with a key."""
    import dataclasses

    import uvicorn

    from ragmon.api import create_app

    key = "sdk-test-key-0123456789"
    app = create_app(dataclasses.replace(settings, api_keys=(key,)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_for(lambda: server.started)
    yield f"http://127.0.0.1:{port}", key
    server.should_exit = True
    thread.join(10)


def test_real_api_accepts_what_the_sdk_sends(ragmon_api) -> None:
    import httpx

    url, key = ragmon_api
    docs = [
        LangChainDoc(f"text of doc {i}", {"id": f"d{i}", "score": 1 - i / 10}) for i in range(6)
    ]
    nodes = [NodeWithScore(TextNode(f"node text {i}", f"n{i}"), 0.5) for i in range(4)]
    with RetrievalMonitor(url, api_key=key, labels={"app": "sdk-test"}) as monitor:
        for i in range(40):
            monitor.record(f"question {i}", docs, 3, labels={"segment": "s1"}, event_id=f"lc-{i}")
        monitor.record("llama question", nodes, 2, event_id="li-0")
        monitor.record("golden", [{"id": "g", "text": "t", "grade": 3}], 1, relevant_total=1)
    stats = monitor.stats()
    assert stats["sent"] == 42 and stats["rejected"] == 0 and stats["invalid"] == 0
    headers = {"Authorization": f"Bearer {key}"}
    for event_id in ("lc-0", "lc-39", "li-0"):
        r = httpx.get(f"{url}/v1/retrievals/{event_id}?app=sdk-test", headers=headers, timeout=5)
        assert r.status_code == 200 and r.json()["event_id"] == event_id
    assert r.json()["k"] == 2 and r.json()["labels"]["app"] == "sdk-test"


def test_real_api_wrong_key_is_rejected_not_retried(ragmon_api) -> None:
    url, _ = ragmon_api
    monitor = RetrievalMonitor(url, api_key="not-the-key-at-all", backoff=0.01)
    monitor.record("q", PASSAGES, 2)
    monitor.close()
    stats = monitor.stats()
    assert stats["rejected"] == 1 and stats["sent"] == 0 and stats["retries"] == 0


@pytest.mark.parametrize("event_id", [".", "..", "a\tb"])
def test_the_sdk_refuses_an_event_id_no_url_can_name(event_id):
    args = {"query": "q", "passages": [("a", "t")], "k": 1, "timestamp": time.time()}
    with pytest.raises(InvalidEvent, match="event_id"):
        build_event(**args, event_id=event_id)
    assert build_event(**args, event_id="tenant/42")["event_id"] == "tenant/42"
