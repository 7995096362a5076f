"""API keys: kept only as SHA-256 hashes, compared in constant time, optionally bound to an app.

`RAGMON_API_KEYS="key1,key2:support-bot"`: key2 may only write events labelled
`app=support-bot`. `RAGMON_METRICS_API_KEYS` protects `/metrics` separately.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass


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
