"""The SDK's cheap paths: the outbox's reusable batch buffers, encoding, ids, timestamps, HTTP."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragmon.client import RetrievalMonitor, build_event, encode_event
from ragmon.client import events as events_module
from ragmon.client.events import new_event_id
from ragmon.client.outbox import Batch, Outbox
from tests.monitor.test_client import PASSAGES, Sidecar, assert_conserved

# ---- outbox ---------------------------------------------------------------------------------


def encoded(i: int, size: int = 10) -> bytes:
    return json.dumps({"n": i, "pad": "x" * size}).encode()


def sent_events(batch: Batch, items: list[int]) -> list[dict]:
    return json.loads(b"".join(bytes(p) for p in batch.body(items)))["events"]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
    max_events=st.integers(1, 40),
    batch_events=st.integers(1, 10),
    data=st.data(),
)
def test_outbox_keeps_the_newest_events_in_order_and_counts_every_drop(
    sizes, max_events, batch_events, data
) -> None:
    box = Outbox(max_events, max_bytes=10**9, batch_events=batch_events, batch_bytes=10**9)
    dropped = sum(box.add(encoded(i, size)) for i, size in enumerate(sizes))
    assert dropped == max(0, len(sizes) - max_events) and box.events == len(sizes) - dropped
    got = []
    while (batch := box.take()) is not None:
        assert 0 < len(batch) <= batch_events
        items = batch.live()
        subset = sorted(data.draw(st.sets(st.sampled_from(items), min_size=1)))
        assert [e["n"] for e in sent_events(batch, subset)] == [
            json.loads(batch.event(i))["n"] for i in subset
        ]
        got += [e["n"] for e in sent_events(batch, items)]
        box.release(batch)
    assert got == list(range(dropped, len(sizes))) and box.events == 0 and box.nbytes == 0


def test_outbox_is_bounded_in_bytes_but_keeps_one_oversized_event() -> None:
    box = Outbox(max_events=100, max_bytes=1000, batch_events=10, batch_bytes=10**9)
    fit = 1000 // len(encoded(0, 90))
    dropped = sum(box.add(encoded(i, 90)) for i in range(30))
    assert box.events == fit and dropped == 30 - fit and box.nbytes <= 1000
    assert box.add(encoded(99, 5000)) == fit  # everything older makes room...
    assert box.events == 1 and box.nbytes > 1000  # ...but a valid event is never refused


def test_a_sent_batch_buffer_is_reused_in_place() -> None:
    """The same memory is refilled: no new allocation, so no page faults for the next batch."""
    box = Outbox(max_events=1000, max_bytes=10**9, batch_events=100, batch_bytes=10**9)
    for i in range(100):
        box.add(encoded(i, 500))
    first = box.take()
    assert first is not None
    buf, capacity = first.buf, len(first.buf)
    box.release(first)
    for i in range(100, 150):  # a smaller batch: fits in the old buffer
        box.add(encoded(i, 500))
    second = box.take()
    assert second is first and second.buf is buf and len(buf) == capacity
    assert [e["n"] for e in sent_events(second, second.live())] == list(range(100, 150))


def test_a_buffer_still_exported_is_replaced_not_corrupted() -> None:
    box = Outbox(max_events=1000, max_bytes=10**9, batch_events=3, batch_bytes=10**9)
    for i in range(3):
        box.add(encoded(i))
    batch = box.take()
    assert batch is not None
    kept = batch.body(batch.live())  # e.g. held by a traceback after a failed send
    box.release(batch)
    for i in range(3, 6):
        box.add(encoded(i, 50))  # longer: the buffer has to grow, which it cannot in place
    again = box.take()
    assert again is batch and [e["n"] for e in sent_events(again, again.live())] == [3, 4, 5]
    assert len(kept) == 3  # the old slices stay valid memory (their content is not kept)


# ---- encoding, ids, timestamps --------------------------------------------------------------

texts = st.text(min_size=1, max_size=50)  # no lone surrogates: hypothesis leaves them out


@settings(max_examples=200, deadline=None)
@given(query=texts, passages=st.lists(st.tuples(texts, texts, st.floats()), min_size=1, max_size=5))
def test_orjson_and_the_stdlib_fallback_send_the_same_event(query, passages) -> None:
    assert events_module.orjson is not None  # the dev install has it (the `fast` extra)
    event = build_event(query, passages, 1, {"app": "a"}, "id-1", time.time())
    fast = encode_event(event)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(events_module, "orjson", None)
        slow = encode_event(event)
    assert json.loads(fast) == json.loads(slow) == json.loads(json.dumps(event))


@pytest.mark.parametrize("fallback", [False, True])
def test_a_lone_surrogate_is_refused_by_both_encoders(fallback: bool, monkeypatch) -> None:
    if fallback:
        monkeypatch.setattr(events_module, "orjson", None)
    with pytest.raises(Exception):  # noqa: B017 - orjson and the stdlib raise different types
        encode_event(build_event("q\ud800", PASSAGES, 1, timestamp=time.time()))


def test_event_ids_are_random_uuid4() -> None:
    ids = {new_event_id() for _ in range(5000)}
    assert len(ids) == 5000
    for text in list(ids)[:500]:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == text


@settings(max_examples=500)
@given(offset=st.floats(-86400 * 30, 300), digits=st.integers(0, 9))
def test_epoch_timestamps_match_datetime(offset: float, digits: int) -> None:
    ts = round(time.time() + offset, digits)
    wire = build_event("q", PASSAGES, 1, timestamp=ts)["timestamp"]
    assert wire.endswith("Z")
    assert datetime.fromisoformat(wire.replace("Z", "+00:00")) == datetime.fromtimestamp(ts, UTC)


# ---- HTTP: keep-alive, stale connections, 413, path prefix ----------------------------------


class KeepAliveSidecar:
    """HTTP/1.1 with keep-alive; `close_after` closes the connection after that many answers
    without saying so, as a server does when its idle timeout passes."""

    def __init__(self, close_after: int | None = None, script: list[int] | None = None) -> None:
        self.requests: list[tuple[str, int, list[dict]]] = []  # (path, client port, events)
        self.script = list(script or [])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                events = json.loads(body)["events"]
                outer.requests.append((self.path, self.client_address[1], events))
                status = outer.script.pop(0) if outer.script else 202
                payload = json.dumps({"results": [{"status": "queued"} for _ in events]})
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())
                if close_after and len(outer.requests) % close_after == 0:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send_batches(monitor: RetrievalMonitor, n: int, pause: float = 0.0) -> None:
    for i in range(n):
        monitor.record("q", PASSAGES, 2, event_id=f"e{i}")
        assert monitor.flush(10)
        time.sleep(pause)


def test_batches_share_one_kept_alive_connection() -> None:
    server = KeepAliveSidecar()
    try:
        monitor = RetrievalMonitor(server.url + "/prefix/", flush_interval=60)
        send_batches(monitor, 5)
        monitor.close()
        assert len({port for _, port, _ in server.requests}) == 1
        assert {path for path, _, _ in server.requests} == {"/prefix/v1/retrievals/batch"}
    finally:
        server.stop()


def test_a_connection_closed_while_idle_is_replaced_without_a_retry() -> None:
    server = KeepAliveSidecar(close_after=1)
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=60, backoff=5)
        send_batches(monitor, 4, pause=0.05)  # each send finds the last connection closed
        monitor.close()
        stats = monitor.stats()
        assert stats["sent"] == 4 and stats["retries"] == 0 and stats["batches"] == 4
        assert [e["event_id"] for _, _, ev in server.requests for e in ev] == [
            f"e{i}" for i in range(4)
        ]
    finally:
        server.stop()


def test_413_splits_the_batch_and_delivers_every_event() -> None:
    server = KeepAliveSidecar(script=[413, 413])
    try:
        monitor = RetrievalMonitor(server.url, flush_interval=60)
        for i in range(8):
            monitor.record("q", PASSAGES, 2, event_id=f"e{i}")
        monitor.close()
        sizes = [len(ev) for _, _, ev in server.requests]
        assert sizes == [8, 4, 2, 2, 4]
        delivered = [e["event_id"] for _, _, ev in server.requests[1:] for e in ev]
        assert sorted(set(delivered)) == [f"e{i}" for i in range(8)]
        assert monitor.stats()["sent"] == 8
        assert_conserved(monitor.stats())
    finally:
        server.stop()


def test_large_batches_arrive_intact(sidecar: Sidecar) -> None:
    big = [{"id": f"p{i}", "text": f"{i} " + "é" * 30000, "score": 1.0} for i in range(20)]
    monitor = RetrievalMonitor(sidecar.url, flush_interval=60)
    for i in range(30):  # ~36 MB of JSON: batches of about 2 MB
        monitor.record(f"q{i}", big, 10, event_id=f"big-{i}")
    monitor.close(timeout=60)
    assert [e["event_id"] for e in sidecar.events()] == [f"big-{i}" for i in range(30)]
    assert len(sidecar.requests) >= 10
    assert sidecar.events()[-1]["passages"][-1]["text"] == big[-1]["text"]


def test_a_large_batch_goes_through_a_small_send_buffer() -> None:
    """A send() into the default buffer took a whole batch and kept the app's CPU in the kernel
    (docs/integration.md); the connection's buffer is bounded, and large batches still arrive."""
    import socket

    from ragmon.client import connection

    server = KeepAliveSidecar()
    try:
        text = "x" * 20_000
        monitor = RetrievalMonitor(server.url, flush_interval=60)
        for i in range(40):  # ~16 MB in batches of ~2 MB: hundreds of buffers' worth
            monitor.record(f"q{i}", [(f"p{j}", text, 1.0) for j in range(20)], 10)
        assert monitor.flush(60)
        sock = monitor._http.conn.sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * connection.SEND_BUFFER
        monitor.close(timeout=60)
        events = [e for _, _, batch in server.requests for e in batch]
        assert [e["query"] for e in events] == [f"q{i}" for i in range(40)]
        assert all(e["passages"][19]["text"] == text for e in events)
    finally:
        server.stop()


def test_a_bad_url_is_a_clear_error_at_start() -> None:
    with pytest.raises(ValueError, match="http"):
        RetrievalMonitor("ragmon:8000")


@pytest.fixture
def sidecar():
    server = Sidecar()
    yield server
    server.stop()


def test_the_encoder_gives_the_gil_back_between_slices(monkeypatch) -> None:
    """With a slice of zero, every event is followed by a real sleep (the GIL is released)."""
    import ragmon.client.encoder as encoder

    sleeps: list[float] = []
    monkeypatch.setattr(encoder, "ENCODE_SLICE_S", 0.0)
    monkeypatch.setattr(encoder.time, "sleep", lambda s: sleeps.append(s))
    monitor = RetrievalMonitor("http://127.0.0.1:9", flush_interval=60)
    monitor._threads = ()  # no threads: the encoder's pass runs here
    for i in range(100):
        monitor.record("q", PASSAGES, 2, event_id=f"e{i}")
    monitor._encode_all()
    assert len(sleeps) == 100 and all(s == encoder.YIELD_FOR_S > 0 for s in sleeps)
    assert monitor.stats()["buffered"] == 100


@pytest.fixture
def tls_sidecar(tmp_path):
    """The test sidecar behind TLS, with a self-signed certificate for 127.0.0.1."""
    import shutil
    import ssl
    import subprocess

    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    server = KeepAliveSidecar()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
    yield server, cert
    server.stop()


@pytest.mark.process
def test_https_is_verified_and_delivers(tls_sidecar, monkeypatch) -> None:
    server, cert = tls_sidecar
    url = server.url.replace("http://", "https://")
    untrusted = RetrievalMonitor(url, flush_interval=60, max_retries=0)
    untrusted.record("q", PASSAGES, 2, event_id="refused")
    untrusted.close(timeout=5)
    assert untrusted.stats()["dropped_send_failed"] == 1  # an unknown certificate is refused
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # now trusted, as a private CA would be
    monitor = RetrievalMonitor(url, flush_interval=60)
    send_batches(monitor, 3)
    monitor.close()
    assert monitor.stats()["sent"] == 3 and len({port for _, port, _ in server.requests}) == 1
    assert [e["event_id"] for _, _, ev in server.requests for e in ev] == ["e0", "e1", "e2"]
