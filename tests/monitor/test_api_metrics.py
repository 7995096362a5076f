"""/metrics off the ingest path: rendered in a child process, shared by concurrent scrapers and
kept for RAGMON_METRICS_REFRESH_S."""

from __future__ import annotations

import dataclasses
import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragmon.settings import Settings
from tests.support.api_server import ApiServer

pytestmark = pytest.mark.process  # the /metrics renderer's child process


def count(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("ragmon_events_rejected_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_scrapes_share_a_rendering_from_a_child_process(settings: Settings) -> None:
    api = ApiServer(dataclasses.replace(settings, metrics_refresh_s=3600)).start()
    try:
        with ThreadPoolExecutor(4) as pool:
            bodies = list(pool.map(lambda _: api.client.get("/metrics").text, range(4)))
        assert len(set(bodies)) == 1 and "ragmon_queue_depth" in bodies[0]
        assert multiprocessing.active_children()  # the renderer
        api.store.record_rejection("invalid", 5)
        assert count(api.client.get("/metrics").text) == count(bodies[0])  # kept for an hour
    finally:
        api.stop()


def test_refresh_zero_renders_every_scrape(settings: Settings) -> None:
    api = ApiServer(dataclasses.replace(settings, metrics_refresh_s=0)).start()
    try:
        before = count(api.client.get("/metrics").text)
        api.store.record_rejection("invalid", 5)
        assert count(api.client.get("/metrics").text) == before + 5
    finally:
        api.stop()


def test_the_fast_text_has_the_reference_samples(settings: Settings) -> None:
    """`metrics_text` writes the per-series histograms itself: every sample equals the one
    prometheus_client builds (T's negative bounds and its _sum/_count included)."""
    from prometheus_client.parser import text_string_to_metric_families

    from ragmon.export import make_registry, metrics_text, render
    from ragmon.store import Store
    from tests.monitor.test_series_budget import labels, record

    store = Store.connect(settings)
    for i in range(30):
        record(store, i, labels(f"app{i % 3}", f"idx{i % 7}", f"r{i % 2}"))
    store.record_rejection("invalid", 2)

    live = {"ragmon_redis_used_memory_bytes", "ragmon_memory_forecast_total_bytes"}  # INFO's

    def samples(text: bytes) -> list:
        families = text_string_to_metric_families(text.decode())
        return sorted(
            (s.name, sorted(s.labels.items()), s.value if s.name not in live else None)
            for f in families
            for s in f.samples
        )

    fast, reference = samples(metrics_text(store)), samples(render(make_registry(store)))
    assert fast == reference
    assert any(name == "ragmon_retrieval_t_sum" for name, _, _ in fast)
    assert len(fast) > 1000
    store.client.close()


def test_a_large_plain_body_is_sent_a_slice_at_a_time(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scraper without gzip that reads slowly holds at most a slice or two in the server's
    send buffer (before: the whole 14.7 MB body went into it in one turn of the loop, copied
    three times), and gets the whole body with its Content-Length."""
    import socket

    from ragmon.api import metrics
    from tests.support.waiting import wait_until

    text = b"".join(b'ragmon_x{i="%d"} 1\n' % i for i in range(1_500_000))  # ~30 MB

    async def plain(self: metrics.MetricsText) -> bytes:
        return text

    monkeypatch.setattr(metrics.MetricsText, "plain", plain)
    api = ApiServer(settings).start()
    sock = socket.create_connection(("127.0.0.1", api.port), timeout=30)
    try:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nhost: localhost\r\naccept-encoding: identity\r\n\r\n"
        )
        server = api.server.server_state

        def buffered() -> int:
            return max((c.transport.get_write_buffer_size() for c in server.connections), default=0)

        held = wait_until(buffered, 10, "the body past what the kernel holds (nothing read)")
        assert held <= 2 * metrics.SEND_SLICE_BYTES, held
        received = bytearray()
        while len(received) < len(text) or not received.endswith(text[-100:]):
            chunk = sock.recv(1 << 20)
            assert chunk, "closed early"
            received += chunk
        head, body = bytes(received).split(b"\r\n\r\n", 1)
        assert f"content-length: {len(text)}".encode() in head.lower()
        assert b"transfer-encoding" not in head.lower() and body == text
    finally:
        sock.close()
        api.stop()
