"""One keep-alive HTTP/1.1 connection to the sidecar, on the standard library only.

Why not httpx here: a batch post through `http.client` costs a fraction of httpx's CPU
(tests/bench/bench_record.py), and it sends `memoryview` slices as they are,
so a multi-megabyte body is never copied while holding the GIL. The SDK needs no third-party
package for it. Proxies from the environment are not used: the sidecar is reached directly.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Sequence
from urllib.parse import urlsplit

# The socket's send buffer: each send() syscall copies at most about this much (Linux doubles
# it). With the default autotuned buffer, one send() took a whole batch over loopback and kept
# the app's CPU in the kernel, where on a kernel without preemption (PREEMPT_NONE, common on
# servers and VMs) the app's thread cannot take it back, and the app's p99 rose
# (docs/integration.md, "what the hook costs"); this one still carries a remote sidecar's
# traffic.
SEND_BUFFER = 64 * 1024
# A request on a reused connection that fails like this found it closed by the server while
# idle (its keep-alive timeout): it is sent again at once on a new connection.
STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class Response:
    """What the sender needs from an answer: status, headers (lower-case names) and body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Connection:
    """POSTs to one URL over a kept-alive connection, reconnecting when needed."""

    def __init__(
        self, url: str, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"ragmon URL must be http(s)://host[:port][/path], got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        # Built now, at app start-up: a TLS context holds the GIL for a while.
        self.tls = ssl.create_default_context() if parts.scheme == "https" else None
        self.headers = headers
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: Sequence[bytes | memoryview]) -> Response:
        """Send `body` (pieces, in order, never joined); raises OSError or HTTPException."""
        length = str(sum(len(piece) for piece in body))
        while True:
            reused = self.conn is not None
            conn = self.conn or self._connect()
            try:
                conn.putrequest("POST", self.prefix + path, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    conn.putheader(name, value)
                conn.putheader("Content-Length", length)
                conn.endheaders()
                for piece in body:
                    conn.send(piece)
                resp = conn.getresponse()
                data = resp.read()
            except STALE:
                self.close()
                if reused:
                    continue
                raise
            except BaseException:
                self.close()
                raise
            if resp.will_close:
                self.close()
            headers = {name.lower(): value for name, value in resp.getheaders()}
            return Response(resp.status, headers, data)

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.tls is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        else:
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout, context=self.tls
            )
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.conn = conn
        return conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
