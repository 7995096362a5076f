"""Without API keys, only requests addressed to ragmon by a name it knows.

A keyless ragmon listens on loopback and trusts whoever reaches it. A web page of another site
reaches it too, by DNS rebinding: its name resolves to 127.0.0.1, so the browser sends the
page's requests (and reads the answers) with `Host: attacker.example`. A page's cross-site
request carries its `Origin`. So, while RAGMON_API_KEYS is unset, a request is answered only
when its `Host` is `localhost`, an IP address or a name of RAGMON_ALLOWED_HOSTS, and its
`Origin`, when it has one, names the same host, a loopback one or an allowed name; anything
else is a `403` that says which setting admits it.
"""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost",)


def host_of(value: str) -> str:
    """The host of a `Host` header (`name:port`, `[::1]:port`, `1.2.3.4`), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    return is_ip(host) and ipaddress.ip_address(host).is_loopback


class HostCheck:
    """ASGI middleware: the `403` of a foreign `Host` or `Origin` (installed without keys)."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.names = frozenset(n.rstrip(".") for n in allowed if not n.startswith("."))
        self.domains = tuple(n.rstrip(".") for n in allowed if n.startswith("."))

    def named(self, host: str) -> bool:
        host = host.rstrip(".")
        return (
            self.any
            or host in self.names
            or any(host == d[1:] or host.endswith(d) for d in self.domains)
        )

    def problem(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """Why the request is refused, or None."""
        host_header = origin = None
        for name, value in headers:
            if name == b"host":
                host_header = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        host = host_of(host_header) if host_header is not None else ""
        if host and not (is_loopback(host) or is_ip(host) or self.named(host)):
            return f"Host {host!r}"
        if origin is not None and not self.any:
            seen = (urlsplit(origin).hostname or "") if origin != "null" else ""
            if not seen or not (seen == host or is_loopback(seen) or self.named(seen)):
                return f"Origin {origin[:200]!r}"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (why := self.problem(scope["headers"])) is not None:
            detail = (
                f"{why} is not allowed: without RAGMON_API_KEYS ragmon answers requests for "
                "localhost, IP addresses and the names of RAGMON_ALLOWED_HOSTS only (a web page "
                "of another site must not reach it by DNS rebinding): add the name there, or "
                "set RAGMON_API_KEYS"
            )
            body = json.dumps({"detail": detail}).encode()
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]  # fmt: skip
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
