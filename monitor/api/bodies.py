"""Request bodies read within their limits: every route that reads a body reads it here.

The size limit is checked on `Content-Length` before a byte is read and again as the body
streams in (a chunked body has no length); a client that stops sending is closed by the guard
after RAGMON_BODY_TIMEOUT_S (`ragmon.api.guard`) and answered here as a `408`, never a 500.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

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
