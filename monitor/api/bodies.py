"""Request bodies read within their limits: every route that reads a body reads it here.

The size limit is checked on `Content-Length` before a byte is read and again as the body
streams in (a chunked body has no length); a client that stops sending is closed by the guard
after RAGMON_BODY_TIMEOUT_S (`ragmon.api.guard`) and answered here as a `408`, never a 500.

`WholeBodies` runs the app for a request only once its body has arrived, or its first
`RELEASE_BYTES` of it: a slow body, closed by the guard for its timeout or to make room, never
started the app, which for 4,096 slow ingest bodies reconnecting as they were closed had been
most of the event loop's time (routing, the read, its `408` to a closed connection). A body it
holds whole is handed to `read_body` in the scope (`WHOLE_BODY`), not streamed a second time.
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
    whole = request.scope.get(WHOLE_BODY)
    if whole is not None:
        if len(whole) > limit:
            raise too_large
        return whole
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


RELEASE_BYTES = 65_536  # uvicorn's flow-control mark: a body this far along is not trickling
WHOLE_BODY = "ragmon.whole_body"  # the scope's key for a body `WholeBodies` holds whole


class WholeBodies:
    """ASGI middleware: the app starts once the request's body is whole or `RELEASE_BYTES`
    long; at once for a request without a body, or whose `Content-Length` is over `limit`
    (refused before a byte is read, and a client expecting `100 Continue` never sends it). A
    client gone before its body arrived is passed to `gone(scope)`, for counting, and the app
    never runs for it."""

    def __init__(self, app: ASGIApp, gone: Callable[[Scope], None], limit: int) -> None:
        self.app = app
        self.gone = gone
        self.limit = limit  # a body declared longer goes to the app at once, for its `413`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._holds(scope["headers"]):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more and size < RELEASE_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                self.gone(scope)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if not more:  # whole: read from the scope (`read_body`), or once from `receive`
            scope[WHOLE_BODY] = body
        first: Message | None = {"type": "http.request", "body": body, "more_body": more}

        async def replay() -> Message:
            nonlocal first
            if first is None:
                return await receive()
            message, first = first, None
            return message

        await self.app(scope, replay, send)

    def _holds(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """A body follows the headers (chunked, or a length from 1 to `limit`)."""
        length = b""
        for name, value in headers:
            if name == b"transfer-encoding":
                return True
            if name == b"content-length":
                length = value
        if not length.isdigit():
            return False  # none (no body), or one the app refuses
        return len(length) <= 18 and 0 < int(length) <= self.limit
