"""Slow clients cannot take the API down: uvicorn's h11 protocol with a deadline on a request's
headers and on its body, and a cap on open connections.

Uvicorn waits forever for a request that never completes (no timer runs before the first
byte, nor while headers or a body trickle in), so 1,100 such connections exhausted the file
descriptors and `/healthz` timed out. Here a connection must send its headers within
RAGMON_HEADER_TIMEOUT_S (answered `408` and closed otherwise) and its body within
RAGMON_BODY_TIMEOUT_S of them; past RAGMON_MAX_CONNECTIONS a new connection evicts the one
that has waited longest for its headers, so a flood of idle connections delays nobody who
sends a request, and a health check always gets through.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ragmon.api.logs import KindFilter
from ragmon.settings import Settings

TIMEOUT_408 = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class Gate:
    """What every connection of one server shares: the limits and who is waiting for
    headers (oldest first)."""

    def __init__(self, settings: Settings) -> None:
        self.header_timeout_s = settings.header_timeout_s
        self.body_timeout_s = settings.body_timeout_s
        self.max_connections = settings.max_connections
        self.open = 0
        self.waiting: OrderedDict[int, GuardedH11Protocol] = OrderedDict()
        self.evicted = 0
        self.timed_out = 0


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with the deadlines and the connection cap of its `gate`."""

    gate: Gate

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._phase = ""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        gate = self.gate
        gate.open += 1
        if gate.open > gate.max_connections:
            if gate.waiting:  # the longest idle connection makes room
                _, oldest = gate.waiting.popitem(last=False)
                gate.evicted += 1
                oldest._close()
            else:  # every connection is busy with a request: refuse this one
                gate.evicted += 1
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
            self._arm("body", self.gate.body_timeout_s)
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
            self._arm("body", self.gate.body_timeout_s)

    def _await_headers(self) -> None:
        self._arm("headers", self.gate.header_timeout_s)
        self.gate.waiting[id(self)] = self

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = ""
        self.gate.waiting.pop(id(self), None)

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


def uvicorn_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """The API's uvicorn configuration: the guarded protocol, no access log (a line per
    request), uvicorn's own warnings limited per kind (`KindFilter`)."""
    config = uvicorn.Config(app, http=guarded_protocol(settings), access_log=False, **options)
    server_log = logging.getLogger("uvicorn.error")  # configured by Config: filter it after
    if not any(isinstance(f, KindFilter) for f in server_log.filters):
        server_log.addFilter(KindFilter())
    return config
