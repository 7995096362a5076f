"""Each app's share of Redis (RAGMON_APP_STORAGE_MB): the bytes its events and its people's
grades take, and a `507` naming the app and the limit once it holds its share, so one app's
flood never fills the memory that every other app's events need. Grades have a room of their
own within it (RAGMON_APP_GRADES_MB: `grade_rooms`), checked where they are written.

What counts: the bytes of each event an app sent (its stored payload, sealed or not, plus
`EVENT_OVERHEAD` for the hash's keys and fields), by UTC day of receipt, for as long as
events are kept (RAGMON_RESULT_TTL_DAYS): `Keys.app_bytes(day)`, a hash app → bytes; and the
bytes of its people's grades (`Keys.human_bytes`, counted by the write that stores them). What
judging adds (the result) or strips (the text, RAGMON_STORE_TEXT=false) is not counted: the
figure is what the app sent, not Redis' exact memory.

Cost on the write path: a request's check reads its app's figure from memory (read from
Redis at most every `REFRESH_S` per app, off the request path once known); the bytes of
created events are added in memory and written by one pipeline at a time (`_flush`), not per
request. So the limit can be passed by what arrives within `REFRESH_S` (a few requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence

import redis.asyncio

from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.keys import utc_today

log = logging.getLogger("ragmon.api")

MIB = 1024 * 1024
EVENT_OVERHEAD = 200  # bytes of an event hash besides its payload (key, fields, status, times)
REFRESH_S = 1.0
DAY_S = 86400
RETRY_AFTER_S = 60


class AppOverStorage(Exception):
    """An app holds its RAGMON_APP_STORAGE_MB: the message names the app and the limit."""

    def __init__(self, app: str, held: int, limit_mb: float) -> None:
        self.app, self.held, self.limit_mb = app, held, limit_mb
        super().__init__(
            f"app {app!r} holds {held / MIB:.1f} MB of events and grades, its limit "
            f"RAGMON_APP_STORAGE_MB={limit_mb:g} MB: nothing of this request was stored; "
            "older events leave after RAGMON_RESULT_TTL_DAYS"
        )


def event_bytes(item: IngestItem) -> int:
    return len(item.payload) + EVENT_OVERHEAD


class AppStorage:
    """The per-app byte counts of one API process (any number of processes share them)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._client: redis.asyncio.Redis | None = None
        self._held: dict[str, tuple[float, int, int]] = {}  # app -> (read at, events, grades)
        self._pending: Counter[tuple[str, str]] = Counter()  # (day, app) -> bytes not written
        self._flush_task: asyncio.Task | None = None
        self._days = math.ceil(settings.result_ttl_days) + 1

    def limit_mb(self, app: str) -> float:
        limits = self.settings.app_storage_mb
        return limits.get(app, limits.get("*", 0.0))

    async def check(self, items: Sequence[IngestItem]) -> None:
        """Raise `AppOverStorage` when an app of `items` would pass its limit with them."""
        if not self.settings.app_storage_mb:
            return
        wanted: Counter[str] = Counter()
        for it in items:
            wanted[it.app] += event_bytes(it)
        for app, n in wanted.items():
            limit = self.limit_mb(app)
            if limit <= 0:
                continue
            held = await self.held(app)
            if held + n > limit * MIB:
                raise AppOverStorage(app, held, limit)

    async def held(self, app: str) -> int:
        """Bytes `app`'s retained events and people's grades take (Redis' figure at most
        REFRESH_S old, plus this process' counts not yet written)."""
        events, grades = await self._read(app)
        return events + grades + sum(n for (_, a), n in self._pending.items() if a == app)

    async def _read(self, app: str) -> tuple[int, int]:
        """Bytes of `app`'s events and of its people's grades in Redis (at most REFRESH_S
        old)."""
        now = time.monotonic()
        known = self._held.get(app)
        if known is None or now - known[0] > REFRESH_S:
            days = self._window()
            client = self._redis()
            async with client.pipeline(transaction=False) as pipe:
                for day in days:
                    pipe.hget(self.store.keys.app_bytes(day), app)
                pipe.hget(self.store.keys.human_bytes, app)
                *raw, grades = await pipe.execute()
            known = (now, sum(int(x) for x in raw if x is not None), int(grades or 0))
            self._held[app] = known
            if len(self._held) > 10_000:  # many apps: forget the oldest reads
                for old in sorted(self._held, key=lambda a: self._held[a][0])[:5_000]:
                    del self._held[old]
        return known[1], known[2]

    async def grade_rooms(self, apps: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Per app, the bytes its people's grades may take in all and the setting that says
        so: RAGMON_APP_GRADES_MB, or what RAGMON_APP_STORAGE_MB leaves beside its events."""
        rooms = {}
        for app in apps:
            grades_mb = self.settings.app_grades_mb
            own = grades_mb.get(app, grades_mb.get("*", 0.0))
            room = (int(own * MIB), f"RAGMON_APP_GRADES_MB={own:g}") if own > 0 else None
            share = self.limit_mb(app)
            if share > 0:
                events, _ = await self._read(app)
                events += sum(n for (_, a), n in self._pending.items() if a == app)
                left = int(share * MIB) - events
                if room is None or left < room[0]:
                    room = (max(0, left), f"RAGMON_APP_STORAGE_MB={share:g}")
            if room is not None:
                rooms[app] = room
        return rooms

    def count(self, items: Sequence[IngestItem], created: Sequence[bool]) -> None:
        """Add the bytes of the events a write created (written soon, in one pipeline)."""
        day = utc_today()
        for it, new in zip(items, created, strict=True):
            if new:
                self._pending[day, it.app] += event_bytes(it)
        if self._pending and (self._flush_task is None or self._flush_task.done()):
            self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, Counter()
            ttl = int((self.settings.result_ttl_days + 2) * DAY_S)
            try:
                async with self._redis().pipeline(transaction=False) as pipe:
                    for (day, app), n in pending.items():
                        pipe.hincrby(self.store.keys.app_bytes(day), app, n)
                        pipe.expire(self.store.keys.app_bytes(day), ttl)
                    await pipe.execute()
            except Exception as exc:  # counted again with the next write
                self._pending.update(pending)
                log.warning("could not count the apps' stored bytes: %s", exc)
                await asyncio.sleep(REFRESH_S)
            for _, app in pending:  # read again next time, with these in Redis
                self._held.pop(app, None)

    def _window(self) -> list[str]:
        today = time.time()
        return [
            time.strftime("%Y-%m-%d", time.gmtime(today - d * DAY_S)) for d in range(self._days)
        ]

    def _redis(self) -> redis.asyncio.Redis:
        if self._client is None:
            url = self.settings.redis_url or "redis://localhost:6379/0"
            self._client = redis.asyncio.Redis.from_url(url, health_check_interval=30)
        return self._client

    async def aclose(self) -> None:
        if self._flush_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._flush_task, 2.0)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
