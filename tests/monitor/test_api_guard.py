"""Slow clients against the real API over HTTP: unfinished headers are answered 408 and
closed, an unfinished body is closed, and past RAGMON_MAX_CONNECTIONS a new connection evicts
the one that has waited longest for its headers (a health check always gets through)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Iterator

import pytest

from ragmon.settings import Settings
from tests.support.api_server import ApiServer


@pytest.fixture
def api(settings: Settings) -> Iterator[ApiServer]:
    fast = dataclasses.replace(
        settings, header_timeout_s=0.5, body_timeout_s=0.5, max_connections=10
    )
    server = ApiServer(fast).start()
    yield server
    server.stop()


def connect(api: ApiServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", api.port), timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as closed)."""
    out = b""
    try:
        while chunk := sock.recv(4096):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def test_unfinished_headers_get_408_and_are_closed(api: ApiServer) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # never the blank line
        assert read_all(sock).startswith(b"HTTP/1.1 408")
    with connect(api) as sock:  # a connection that sends nothing at all
        assert read_all(sock).startswith(b"HTTP/1.1 408")


def test_an_unfinished_body_is_closed_and_counted(api: ApiServer) -> None:
    with connect(api) as sock:
        sock.sendall(
            b"POST /v1/retrievals HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b'content-length: 1000\r\n\r\n{"query": '
        )
        assert b"202" not in read_all(sock)  # closed, nothing accepted
    assert api.client.get("/healthz").status_code == 200
    deadline = time.monotonic() + 10  # the writer records rejections off the request path
    while "events_rejected|timeout" not in (counters := api.store.counters()):
        assert time.monotonic() < deadline, counters
        time.sleep(0.05)
    assert counters["events_rejected|timeout"] == 1
    assert counters.get("events_received", 0) == 0


def test_past_the_cap_the_longest_idle_connection_makes_room(settings: Settings) -> None:
    api = ApiServer(dataclasses.replace(settings, max_connections=10)).start()
    idle = [connect(api) for _ in range(10)]
    try:
        idle[0].sendall(b"GET /healthz HTTP/1.1\r\n")  # the oldest, still on its headers
        for _ in range(3):  # each new connection is a health check that gets through
            assert api.client.get("/healthz").status_code == 200
        assert read_all(idle[0]) == b""  # evicted: closed without an answer
        idle[-1].sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")  # the newer ones stay
        assert idle[-1].recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()
        api.stop()


def test_a_flood_of_malformed_requests_logs_one_line_per_kind(api: ApiServer) -> None:
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        for _ in range(50):
            with connect(api) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                read_all(sock)
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert lines == ["Invalid HTTP request received."], lines
