"""Request bodies read within their limits: every route that reads a body reads it here.

The size limit is checked on `Content-Length` before a byte is read and again as the body
streams in (a chunked body has no length); a client that stops sending is closed by the guard
after RAGMON_BODY_TIMEOUT_S (`ragmon.api.guard`) and answered here as a `408`, never a 500.
A request reaches the app only once its body has begun to arrive (`BodyGate`).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragmon.api.service import Refused


async def read_body(request: Request, limit: int, counted: bool = True) -> bytes:
    """The whole body, at most `limit` bytes (else `413`). `counted`: a refusal counts in
    `ragmon_events_rejected_total` (an ingest route), not for a page's form."""
    too_large = Refused(
        413, "too_large" if counted else None, f"body over the limit of {limit} bytes"
    )
    length = request.headers.get("content-length") or ""
    if length.isdigit() and (len(length) > 18 or int(length) > limit):
        raise too_large
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_large
    except ClientDisconnect:  # gone, or closed past RAGMON_BODY_TIMEOUT_S (ragmon.api.guard)
        raise Refused(
            408, "timeout" if counted else None, "request body not received in time"
        ) from None
    return bytes(body)


COUNTED_PREFIX = "/v1/"  # the ingest routes: a body lost there counts as `timeout`


class BodyGate:
    """ASGI middleware: a request with a body reaches the app once its first bytes arrive.

    Past RAGMON_MAX_CONNECTIONS each new connection closes the one waiting longest
    (`ragmon.api.guard`); against a flood of slow bodies that is thousands a second, each a
    request whose headers had started the whole app (routing, dependencies, the `408`
    refusal). A request closed before any of its body arrived now ends here: counted as
    `ragmon_events_rejected_total{reason="timeout"}` on an ingest route (`/v1/`), as
    `read_body` would, and nothing more. A client that waits for `100 Continue` gets it
    from the app, as before (it sends no body until then)."""

    def __init__(self, app: ASGIApp, reject: Callable[[str], None]) -> None:
        self.app = app
        self.reject = reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _body_expected(scope["headers"]):
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first["type"] == "http.disconnect":
            if scope["path"].startswith(COUNTED_PREFIX):
                self.reject("timeout")
            return
        pending: list[Message] = [first]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


def _body_expected(headers: list[tuple[bytes, bytes]]) -> bool:
    """A body follows the headers, and the client sends it without waiting for a go-ahead."""
    body = False
    for name, value in headers:
        if name == b"content-length":
            body = value.strip() not in (b"", b"0")
        elif name == b"transfer-encoding":
            body = True
        elif name == b"expect":
            return False
    return body
