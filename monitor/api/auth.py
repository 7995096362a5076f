"""API keys: kept only as SHA-256 hashes, compared in constant time, optionally bound to an app.

`RAGMON_API_KEYS="key1,key2:support-bot"`: key2 may only write events labelled
`app=support-bot`. `RAGMON_METRICS_API_KEYS` protects `/metrics` separately.

A browser signed in to `/ui` holds a session, not the key: an expiry, a random nonce and an
HMAC of both under the key's SHA-256 digest (which only the API holds). The session names no
key, proves the key was presented, ends at its expiry, and ends at once when its key leaves
the configuration. It needs no storage, so it holds across API replicas and restarts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

SESSION_CONTEXT = b"ragmon-ui-session|"


@dataclass(frozen=True)
class Principal:
    """Who called: `app` is the app label the key is restricted to (None: any app)."""

    app: str | None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class KeyRing:
    """Hashes of the configured keys; an empty ring means auth is off."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self._keys: list[tuple[bytes, str | None]] = []
        for entry in entries:
            secret, _, app = entry.partition(":")
            self._keys.append((_digest(secret), app or None))

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None) -> Principal | None:
        """The principal for an `Authorization: Bearer <key>` header, or None when refused."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = _digest(token.strip())
        found: Principal | None = None
        for key, app in self._keys:  # compare against every key: timing does not leak which
            if hmac.compare_digest(key, digest):
                found = Principal(app)
        return found

    def session(self, key: str, lifetime_s: float) -> str | None:
        """A session for a valid `key` (None when refused): `expiry.nonce.mac`."""
        digest = _digest(key.strip())
        if not any(hmac.compare_digest(k, digest) for k, _ in self._keys):
            return None
        expiry = str(int(time.time() + lifetime_s))
        nonce = secrets.token_urlsafe(12)
        return f"{expiry}.{nonce}.{_session_mac(digest, expiry, nonce)}"

    def from_session(self, token: str | None) -> Principal | None:
        """The principal of a live session made by `session`, or None."""
        if not token or not token.isascii():
            return None
        expiry, _, rest = token.partition(".")
        nonce, _, mac = rest.partition(".")
        if not (expiry.isdigit() and len(expiry) <= 12 and nonce and mac):
            return None
        if int(expiry) < time.time():
            return None
        found: Principal | None = None
        for key, app in self._keys:  # every key, as in `check`
            if hmac.compare_digest(_session_mac(key, expiry, nonce), mac):
                found = Principal(app)
        return found


def _session_mac(digest: bytes, expiry: str, nonce: str) -> str:
    mac = hmac.new(digest, SESSION_CONTEXT + f"{expiry}|{nonce}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")
