"""Log lines limited per kind: a Redis outage or a flood of bad clients writes a line per kind
every few seconds with the count it stands for, never one per request."""

from __future__ import annotations

import logging
import time

EVERY_S = 10.0


class KindLimiter:
    """At most one line per kind every `every_s` seconds; the next says how many were held."""

    def __init__(self, logger: logging.Logger, every_s: float = EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(
        self, kind: str, message: str, *args: object, exc_info: BaseException | None = None
    ) -> None:
        """`exc_info`: an exception whose traceback the line carries (an internal error)."""
        now = time.monotonic()
        if now - self._last.get(kind, -self.every_s) < self.every_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        suffix = f" (and {held} more like it in the last {self.every_s:.0f} s)" if held else ""
        self.logger.warning(message + suffix, *args, exc_info=exc_info)


class KindFilter(logging.Filter):
    """For a logger we do not write ourselves (uvicorn's): each message template passes at most
    once every `every_s` seconds, the next one saying how many were held back. A flood of
    malformed requests then costs a line per kind, not one per request."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = str(record.msg)
        now = time.monotonic()
        if now - self._last.get(kind, -self.every_s) < self.every_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held and isinstance(record.msg, str):
            record.msg += f" (and {held} more like it in the last {self.every_s:.0f} s)"
        return True
