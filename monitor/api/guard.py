"""Slow clients cannot take the API down: uvicorn's h11 protocol with a deadline on a request's
headers and on its body, and a cap on open connections.

Uvicorn waits forever for a request that never completes (no timer runs before the first
byte, nor while headers or a body trickle in), so 1,100 such connections exhausted the file
descriptors and `/healthz` timed out. Here a connection must send its headers within
RAGMON_HEADER_TIMEOUT_S (answered `408` and closed otherwise) and its body within
RAGMON_BODY_TIMEOUT_S of them. Past RAGMON_MAX_CONNECTIONS a new connection evicts the one
that has been waiting longest, for its headers or its body, so neither a flood of idle
connections nor one of slow bodies delays a request that arrives whole, and a health check
always gets through. (Evicting idle connections first closed a health check that had just
connected, its headers one turn of the loop away, whenever a slow-body flood reconnected.)

The cap is applied before the descriptors run out: each turn of the event loop accepts at most
`ACCEPT_BATCH` connections (asyncio accepts up to uvicorn's `backlog` at once, 2,048, before
any of them reaches the cap), while the kernel's queue of connections waiting to be accepted
stays `LISTEN_BACKLOG` long; `ragmon serve` keeps the cap `FD_RESERVE` below the open-files
limit (`ragmon.api.serve`). Should an accept fail anyway, out of descriptors, the log says so
once every 10 s, never with a traceback per connection (asyncio's default).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ragmon.api.logs import KindFilter, KindLimiter
from ragmon.settings import Settings

TIMEOUT_408 = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
ACCEPT_BATCH = 16  # connections accepted per turn of the event loop (uvicorn's `backlog`)
LISTEN_BACKLOG = 2048  # connections the kernel holds until they are accepted
OUT_OF_RESOURCES = "socket.accept() out of system resource"  # asyncio's message

log = logging.getLogger("ragmon.api")


class Gate:
    """What every connection of one server shares: the limits and who is waiting for
    headers (oldest first)."""

    def __init__(self, settings: Settings) -> None:
        self.header_timeout_s = settings.header_timeout_s
        self.body_timeout_s = settings.body_timeout_s
        self.max_connections = settings.max_connections
        self.open = 0
        self.waiting: OrderedDict[int, GuardedH11Protocol] = OrderedDict()  # for headers
        self.bodies: OrderedDict[int, GuardedH11Protocol] = OrderedDict()  # receiving a body
        self.evicted = 0
        self.timed_out = 0


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with the deadlines and the connection cap of its `gate`."""

    gate: Gate

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._phase = ""
        self._since = 0.0  # when the current wait (headers or body) began

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        gate = self.gate
        gate.open += 1
        if gate.open > gate.max_connections:
            gate.evicted += 1
            # the connection waiting longest makes room, for its headers or its body
            heads = [next(iter(q.values())) for q in (gate.waiting, gate.bodies) if q]
            if heads:
                min(heads, key=lambda p: p._since)._close()
            else:  # every connection is busy with a request: refuse this one
                transport.abort()
                return
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.open -= 1
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._phase == "headers":
            self._await_body()
        elif state is h11.DONE or state is h11.MUST_CLOSE or state is h11.CLOSED:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:  # keep-alive: the next request's headers are due in time
            self._await_headers()
        elif state is h11.SEND_BODY:  # a pipelined request, its body on the way
            self._await_body()

    def _await_headers(self) -> None:
        self._arm("headers", self.gate.header_timeout_s)
        self.gate.waiting[id(self)] = self

    def _await_body(self) -> None:
        self._arm("body", self.gate.body_timeout_s)
        self.gate.bodies[id(self)] = self

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._since = self.loop.time()
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = ""
        self.gate.waiting.pop(id(self), None)
        self.gate.bodies.pop(id(self), None)

    def _expired(self) -> None:
        self._timer = None
        self.gate.timed_out += 1
        idle = self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
        if self._phase == "headers" and idle and not self.transport.is_closing():
            self.transport.write(TIMEOUT_408)
        self._close()

    def _close(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(settings: Settings) -> type[GuardedH11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)`, with one gate per server."""
    return type("RagmonH11Protocol", (GuardedH11Protocol,), {"gate": Gate(settings)})


class GuardedServer(uvicorn.Server):
    """uvicorn's server with the kernel's queue `LISTEN_BACKLOG` long while the loop accepts
    `ACCEPT_BATCH` connections a turn (uvicorn's `backlog` sets both), and a failed accept
    logged a line per kind."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_loop_problem)
        await super().startup(sockets=sockets)
        for server in self.servers:
            for listening in server.sockets:
                sock = socket.socket(fileno=listening.fileno())  # the same socket, not closed
                try:
                    sock.listen(LISTEN_BACKLOG)
                finally:
                    sock.detach()


_accept_log = KindLimiter(log)


def _loop_problem(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Out of file descriptors on accept: a line every 10 s, not a traceback per connection
    (asyncio tries again in a second); anything else as asyncio says it."""
    if context.get("message") != OUT_OF_RESOURCES:
        loop.default_exception_handler(context)
        return
    _accept_log.warning(
        "accept",
        "cannot accept connections (%s): raise the open-files limit or lower "
        "RAGMON_MAX_CONNECTIONS",
        context.get("exception"),
    )


def uvicorn_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """The API's uvicorn configuration (for `GuardedServer`): the guarded protocol, at most
    `ACCEPT_BATCH` accepts a turn, no access log (a line per request), uvicorn's own warnings
    limited per kind (`KindFilter`)."""
    options.setdefault("backlog", ACCEPT_BATCH)
    config = uvicorn.Config(app, http=guarded_protocol(settings), access_log=False, **options)
    server_log = logging.getLogger("uvicorn.error")  # configured by Config: filter it after
    if not any(isinstance(f, KindFilter) for f in server_log.filters):
        server_log.addFilter(KindFilter())
    return config
