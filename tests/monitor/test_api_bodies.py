"""`WholeBodies`: the app runs for a request only once its body is whole (or far along), so a
slow body closed by the guard never starts it; and the app reads the body it would have."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from starlette.types import Message, Receive, Scope, Send

from ragmon.api.bodies import RELEASE_BYTES, WHOLE_BODY, WholeBodies


class Client:
    """The server side of one request: its messages, handed out as the middleware asks."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)
        self.asked = 0

    async def receive(self) -> Message:
        self.asked += 1
        if self.messages:
            return self.messages.pop(0)
        await asyncio.Event().wait()  # nothing more arrives
        raise AssertionError("unreachable")


class App:
    """Records when it started (after how many receives) and the body it read."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.started_after: int | None = None
        self.body = b""
        self.held: bytes | None = None  # what the scope hands `read_body`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.started_after = self.client.asked
        self.held = scope.get(WHOLE_BODY)
        more = True
        while more:
            message = await receive()
            self.body += message.get("body", b"")
            more = message.get("more_body", False)


LIMIT = 1_000_000


def run(
    messages: Sequence[Message], method: str = "POST", length: int | None = None
) -> tuple[App, list[Scope]]:
    client = Client(messages)
    app = App(client)
    gone: list[Scope] = []
    if length is not None:
        headers = [(b"content-length", str(length).encode())]
    else:  # a POST's body in parts, of no stated length
        headers = [(b"transfer-encoding", b"chunked")] if method == "POST" else []
    scope: Scope = {"type": "http", "method": method, "path": "/v1/retrievals", "headers": headers}

    async def send(message: Message) -> None:
        pass

    async def main() -> None:
        await asyncio.wait_for(WholeBodies(app, gone.append, LIMIT)(scope, client.receive, send), 5)

    asyncio.run(main())
    return app, gone


def chunk(body: bytes, more: bool = True) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


def test_the_app_starts_once_the_body_is_whole_and_reads_all_of_it() -> None:
    app, gone = run([chunk(b'{"qu'), chunk(b'ery": '), chunk(b'"x"}', more=False)])
    assert app.started_after == 3  # every part had arrived before the app ran
    assert app.body == app.held == b'{"query": "x"}'
    assert gone == []


def test_a_client_gone_before_its_body_arrived_never_starts_the_app() -> None:
    app, gone = run([chunk(b"{"), chunk(b'"'), {"type": "http.disconnect"}])
    assert app.started_after is None
    assert [s["path"] for s in gone] == ["/v1/retrievals"]


def test_a_large_body_streams_to_the_app_once_it_is_far_along() -> None:
    part = b"x" * (RELEASE_BYTES // 2)
    app, gone = run([chunk(part), chunk(part), chunk(part), chunk(b"end", more=False)])
    assert app.started_after == 2  # not held back past RELEASE_BYTES
    assert app.body == part * 3 + b"end"
    assert app.held is None  # not whole when the app started: read_body streams it


def test_a_request_without_a_body_goes_straight_through() -> None:
    app, gone = run([chunk(b"", more=False)], method="GET")
    assert app.started_after == 0  # nothing asked of the client before the app ran
    assert app.body == b"" and app.held is None and gone == []
    app, gone = run([chunk(b"", more=False)], length=0)  # a POST stating an empty body
    assert app.started_after == 0 and app.body == b"" and gone == []


def test_a_body_declared_over_the_limit_goes_to_the_app_before_a_byte_is_read() -> None:
    """The app answers its 413 on the header; the body is never asked for (a client waiting
    for `100 Continue` never sends it)."""
    app, gone = run([chunk(b"x"), chunk(b"", more=False)], length=LIMIT + 1)
    assert app.started_after == 0
    app, gone = run([chunk(b"x"), chunk(b"", more=False)], length=LIMIT)  # within: held
    assert app.started_after == 2
