"""Text at rest: with RAGMON_STORE_TEXT=false an event's payload is sealed (Fernet: AES-128-CBC
and HMAC-SHA256, from `cryptography`) before it reaches Redis, and opened only by the API and
the workers, which share RAGMON_TEXT_KEYS. So neither Redis' memory nor its AOF or RDB files
ever hold query or passage text in clear; once judged, the payload is replaced by hashes.

Rotation: put a new key first in RAGMON_TEXT_KEYS (it seals from then on), keep the old ones
after it (they still open what they sealed) until every event sealed with them is judged or
expired (RAGMON_RESULT_TTL_DAYS), then drop them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ragmon.setting_values import SettingsError
from ragmon.settings import Settings

SEALED = "fernet:"
NEED_KEY = (
    "RAGMON_STORE_TEXT=false needs RAGMON_TEXT_KEYS or RAGMON_TEXT_KEYS_FILE (the same key for "
    "the API and the workers; make one with `ragmon text-key`): the text that waits in Redis "
    "for the judge is encrypted with it"
)


class SealingKeyMissing(SettingsError):
    """A sealed payload that no key of RAGMON_TEXT_KEYS opens (a key dropped too early)."""


class Sealer:
    """Seals payloads when text storage is off; opens sealed ones (and passes others as is)."""

    def __init__(self, settings: Settings) -> None:
        self.keys = settings.text_keys
        self.on = not settings.store_text
        if self.on and not self.keys:
            raise SettingsError(NEED_KEY)

    @cached_property
    def _fernet(self) -> Any:
        from cryptography.fernet import Fernet, MultiFernet

        return MultiFernet([Fernet(k.encode()) for k in self.keys])

    def seal(self, payload: str) -> str:
        if not self.on:
            return payload
        return SEALED + str(self._fernet.encrypt(payload.encode()).decode())

    def open(self, raw: bytes | str) -> str:
        text = raw.decode() if isinstance(raw, bytes) else raw
        if not text.startswith(SEALED):
            return text
        if not self.keys:
            raise SealingKeyMissing(
                "an event is sealed but RAGMON_TEXT_KEYS is empty: set the keys that sealed "
                "it (RAGMON_STORE_TEXT was false when it arrived)"
            )
        from cryptography.fernet import InvalidToken

        try:
            return str(self._fernet.decrypt(text[len(SEALED) :].encode()).decode())
        except InvalidToken:
            raise SealingKeyMissing(
                "an event was sealed with a key not in RAGMON_TEXT_KEYS: the API and the "
                "workers need the same keys (after a rotation keep the old key listed until "
                "RAGMON_RESULT_TTL_DAYS have passed)"
            ) from None


def new_key() -> str:
    """A fresh Fernet key for RAGMON_TEXT_KEYS."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()
