"""Slow clients against the real API over HTTP: unfinished headers are answered 408 and
closed, an unfinished body is closed, and past RAGMON_MAX_CONNECTIONS a new connection evicts
the one that has been waiting longest, for its headers or its body (a health check always
gets through)."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import socket
import time
from collections.abc import Iterator

import pytest

from ragmon.api.guard import OUT_OF_RESOURCES, _loop_problem
from ragmon.settings import Settings
from tests.support.api_server import ApiServer
from tests.support.waiting import scaled, wait_until


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
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n")  # never the blank line
        assert read_all(sock).startswith(b"HTTP/1.1 408")
    with connect(api) as sock:  # a connection that sends nothing at all
        assert read_all(sock).startswith(b"HTTP/1.1 408")


def test_an_unfinished_body_is_closed_and_counted(api: ApiServer) -> None:
    with connect(api) as sock:
        sock.sendall(
            b"POST /v1/retrievals HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            b'content-length: 1000\r\n\r\n{"query": '
        )
        assert b"202" not in read_all(sock)  # closed, nothing accepted
    assert api.client.get("/healthz").status_code == 200
    deadline = time.monotonic() + scaled(10)  # the writer records rejections off the request path
    while "events_rejected|timeout" not in (counters := api.store.counters()):
        assert time.monotonic() < deadline, counters
        time.sleep(0.05)
    assert counters["events_rejected|timeout"] == 1
    assert counters.get("events_received", 0) == 0


def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent(api: ApiServer) -> None:
    """`413` on the header: a client that waits for `100 Continue` never sends the body."""
    with connect(api) as sock:
        sock.sendall(
            b"POST /v1/retrievals HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n"
            % (api.settings.max_body_bytes + 1)
        )
        assert read_all(sock).startswith(b"HTTP/1.1 413")


def test_past_the_cap_the_longest_idle_connection_makes_room(settings: Settings) -> None:
    api = ApiServer(dataclasses.replace(settings, max_connections=10)).start()
    idle = [connect(api) for _ in range(10)]
    try:
        idle[0].sendall(b"GET /healthz HTTP/1.1\r\n")  # the oldest, still on its headers
        for _ in range(3):  # each new connection is a health check that gets through
            assert api.client.get("/healthz").status_code == 200
        assert read_all(idle[0]) == b""  # evicted: closed without an answer
        idle[-1].sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")  # the newer ones stay
        assert idle[-1].recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()
        api.stop()


@pytest.mark.parametrize("path", ["/ui/login", "/v1/retrievals/batch", "/v1/grades"])
def test_past_the_cap_the_oldest_slow_body_makes_room(settings: Settings, path: str) -> None:
    """Slow bodies on every connection (before: never evicted, so a health check was refused
    until RAGMON_BODY_TIMEOUT_S ended one of them)."""
    slow = dataclasses.replace(settings, body_timeout_s=60.0, max_connections=10)
    api = ApiServer(slow).start()
    bodies = [connect(api) for _ in range(10)]
    try:
        for sock in bodies:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 4000\r\n"
                "content-type: application/x-www-form-urlencoded\r\n\r\nkey=".encode()
            )
        gate = api.server.config.http.gate  # type: ignore[union-attr]
        wait_until(lambda: len(gate.bodies) == 10, 5, "ten bodies on their way")
        for _ in range(3):  # each health check gets through, evicting the oldest body
            assert api.client.get("/healthz").status_code == 200
        assert b"HTTP/1.1 2" not in read_all(bodies[0])  # cut off, nothing accepted
        bodies[-1].sendall(b"x" * 3996)  # the newest finish their request
        assert bodies[-1].recv(4096)[:12] in (b"HTTP/1.1 303", b"HTTP/1.1 422")
    finally:
        for sock in bodies:
            sock.close()
        api.stop()


def test_a_connection_just_made_outlives_older_slow_bodies(settings: Settings) -> None:
    """A health check's connection waits a turn of the loop for its headers; a flood that
    reconnects in that turn evicts the oldest slow body, not it (before: any connection
    waiting for headers went first, and CI saw 2 of 66 health checks closed)."""
    slow = dataclasses.replace(settings, body_timeout_s=60.0, max_connections=10)
    api = ApiServer(slow).start()
    bodies = [connect(api) for _ in range(9)]
    fresh: list[socket.socket] = []
    try:
        for sock in bodies:
            sock.sendall(
                b"POST /v1/retrievals/batch HTTP/1.1\r\nhost: localhost\r\ncontent-length: 4000\r\n"
                b"content-type: application/json\r\n\r\n["
            )
        gate = api.server.config.http.gate  # type: ignore[union-attr]
        wait_until(lambda: len(gate.bodies) == 9, 5, "nine bodies on their way")
        fresh.append(connect(api))  # the health check, its headers not sent yet
        wait_until(lambda: len(gate.waiting) == 1, 5, "the new connection waits for headers")
        fresh.append(connect(api))  # one past the cap: someone makes room
        wait_until(lambda: gate.evicted == 1, 5, "one connection evicted")
        assert b"HTTP/1.1 2" not in read_all(bodies[0])  # the oldest body went
        fresh[0].sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        assert fresh[0].recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for sock in bodies + fresh:
            sock.close()
        api.stop()


def test_out_of_descriptors_on_accept_is_one_line_not_a_traceback_each() -> None:
    """asyncio logs a traceback per failed accept (24,218 in 10 s of a flood under a 1,024-fd
    limit, 14 MB of log); the server's handler says it once per 10 s."""
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    logging.getLogger("ragmon.api").addHandler(handler)
    loop = asyncio.new_event_loop()
    try:
        context = {"message": OUT_OF_RESOURCES, "exception": OSError(errno.EMFILE, "Too many")}
        for _ in range(2000):
            _loop_problem(loop, context)
    finally:
        loop.close()
        logging.getLogger("ragmon.api").removeHandler(handler)
    assert len(lines) == 1 and lines[0].exc_info is None, lines
    assert "RAGMON_MAX_CONNECTIONS" in lines[0].getMessage()


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
