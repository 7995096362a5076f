"""Each app's share of Redis, and Redis' own limit: a `507` naming the app and the limit
before a write that would pass either, so one app's flood never fills the memory that every
other app's events need, and Redis never reaches `maxmemory` (where it refuses every write,
or, with an evicting policy, drops accepted events).

What counts: the bytes each app holds by class, from the ledger that every writer charges
(`ragmon.store.ledger`): an app is refused once it holds RAGMON_APP_STORAGE_MB. And when Redis'
`used_memory` reaches RAGMON_MEMORY_HIGH of its `maxmemory`, the apps holding most (the
fewest that hold half of what the ledger counts) are refused, the others still stored: the
workers keep finishing what was accepted, reads and /metrics keep working.

Cost on the write path: a request's check reads from memory; the ledger and `INFO memory` are
read from Redis at most every `REFRESH_S` (one pipeline for every app), and the bytes this
process wrote since are added in memory. So a limit can be passed by what arrives within
`REFRESH_S` (a few requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis.asyncio

from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from ragmon.store.address import async_client
from ragmon.store.fields import Kind
from ragmon.store.ledger import MIB, Ledger, Reading, entry_bytes, share_bytes

log = logging.getLogger("ragmon.api")

REFRESH_S = 1.0
RETRY_AFTER_S = 60
MOST_SHARE = 0.5  # near maxmemory: the apps refused hold at least this share of the ledger
RECORD_RESERVE = 8192  # bytes judging one waiting event may add (its record; the texts move)


class AppOverStorage(Exception):
    """A write refused for memory: the message names the app and the limit; `reason` the
    label it counts under (`app_storage`: its share, `memory_high`: Redis near maxmemory)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def over_share(app: str, held: float, limit_mb: float) -> AppOverStorage:
    return AppOverStorage(
        f"app {app!r} holds {held / MIB:.1f} MB in Redis, its limit "
        f"RAGMON_APP_STORAGE_MB={limit_mb:g} MB: nothing of this request was stored; "
        "what it holds leaves with its retention windows (docs/reliability.md)",
        "app_storage",
    )


def near_maxmemory(
    app: str, held: float, used: float, maxmemory: int, high: float
) -> AppOverStorage:
    return AppOverStorage(
        f"Redis holds {used / MIB:.1f} MB (with what judging the waiting events adds) of its "
        f"maxmemory {maxmemory / MIB:.0f} MB, past "
        f"RAGMON_MEMORY_HIGH={high:g}, and app {app!r} is among the apps holding most "
        f"({held / MIB:.1f} MB): its new events are refused until memory frees (raise "
        "maxmemory, or shorten the retention windows); nothing of this request was stored",
        "memory_high",
    )


def item_bytes(it: IngestItem) -> int:
    """About what INGEST charges for an item (the check's estimate before the write)."""
    return entry_bytes(it.ref, it.payload if not it.sampled_out else "", it.status)


class AppStorage:
    """The memory checks of one API process (any number of processes share the ledger)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.ledger = Ledger(None, store.keys, settings)
        self._client: redis.asyncio.Redis | None = None
        self._read_at = -1e18
        self._reading = Reading()
        self._used, self._max, self._waiting, self._queued_since = 0, 0, 0, 0
        self._since: Counter[str] = Counter()  # app -> bytes written since the last read

    def limit_mb(self, app: str) -> float:
        return share_bytes(self.settings, app) / MIB

    async def check(
        self, items: Sequence[IngestItem], extra: Mapping[str, int] | None = None
    ) -> None:
        """Raise `AppOverStorage` when an app of `items` (and `extra` bytes per app: spans to
        hold) would pass its share with them, or is among those holding most while Redis is
        near its maxmemory."""
        wanted: Counter[str] = Counter(extra or {})
        for it in items:
            wanted[it.app] += item_bytes(it)
        await self.refresh()
        most = self.most() if self.near() else set()
        for app, n in wanted.items():
            held = self.held(app)
            limit = self.limit_mb(app)
            if limit > 0 and held + n > limit * MIB:
                raise over_share(app, held, limit)
            if self.near() and (app in most or not most):
                raise near_maxmemory(app, held, self.used(), self._max, self.settings.memory_high)

    def used(self) -> float:
        """Redis' memory as the check counts it: its last read, plus what this process wrote
        since, plus what judging the waiting events will add (their records,
        `RECORD_RESERVE` each), so the workers can always finish what was accepted."""
        waiting = self._waiting + self._queued_since
        return self._used + sum(self._since.values()) + waiting * RECORD_RESERVE

    def near(self) -> bool:
        """Whether Redis is past RAGMON_MEMORY_HIGH of its maxmemory (`used`)."""
        return self._max > 0 and self.used() >= self.settings.memory_high * self._max

    def most(self) -> set[str]:
        """The fewest apps that hold `MOST_SHARE` of what the ledger counts (none when it
        counts nothing: then every app is refused, the memory not being the apps')."""
        held = {a: self.held(a) for a in {*self._reading.held, *self._since}}
        total = sum(held.values())
        out: set[str] = set()
        if total <= 0:
            return out
        acc = 0.0
        for app in sorted(held, key=lambda a: -held[a]):
            out.add(app)
            acc += held[app]
            if acc >= MOST_SHARE * total:
                break
        return out

    def held(self, app: str) -> float:
        """Bytes `app` holds (the ledger at most REFRESH_S old, plus this process' writes)."""
        return self._reading.held_by(app) + self._since[app]

    async def grade_rooms(self, apps: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Per app, the bytes of people's grades a write may add now, and the limit that says
        so: what RAGMON_APP_GRADES_MB leaves of its grades, or RAGMON_APP_STORAGE_MB of all it
        holds, or nothing near maxmemory for the apps holding most (apps without a limit are
        not named). The write itself checks and charges them (`HumanGrades.write`)."""
        await self.refresh()
        most = self.most() if self.near() else set()
        rooms: dict[str, tuple[int, str]] = {}
        for app in apps:
            options = []
            own = self.settings.app_grades_mb.get(app, self.settings.app_grades_mb.get("*", 0))
            if own > 0:
                grades = self._reading.held.get(app, {}).get(Kind.GRADES, 0.0)
                options.append((own * MIB - grades, f"RAGMON_APP_GRADES_MB={own:g} MB"))
            if (share := self.limit_mb(app)) > 0:
                options.append(
                    (share * MIB - self.held(app), f"RAGMON_APP_STORAGE_MB={share:g} MB")
                )
            if self.near() and (app in most or not most):
                high = self.settings.memory_high
                options.append((0, f"RAGMON_MEMORY_HIGH={high:g} of Redis' maxmemory"))
            if options:
                room, limit = min(options)
                rooms[app] = (max(0, int(room)), limit)
        return rooms

    def count(self, items: Sequence[IngestItem], created: Sequence[bool]) -> None:
        """Add the bytes of the events a write created until the next read of the ledger."""
        for it, new in zip(items, created, strict=True):
            if new:
                self._since[it.app] += item_bytes(it)
                self._queued_since += not it.sampled_out

    async def refresh(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._read_at < REFRESH_S:
            return
        reads = self.ledger.reads(now)
        async with self._redis().pipeline(transaction=False) as pipe:
            for key in reads:
                pipe.hgetall(key)
            pipe.info("memory")
            rows = await pipe.execute()
        memory = cast(dict[str, Any], rows[-1])
        self._reading = self.ledger.reading(rows[:-1], now)
        self._used = int(memory.get("used_memory", 0))
        self._max = int(memory.get("maxmemory", 0))
        if self._max:
            self._waiting = await asyncio.to_thread(self.store.queue_depth)
        self._since.clear()
        self._queued_since = 0
        self._read_at = now

    def _redis(self) -> redis.asyncio.Redis:
        if self._client is None:
            url = self.settings.redis_url or "redis://localhost:6379/0"
            self._client = async_client(url, health_check_interval=30)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None
