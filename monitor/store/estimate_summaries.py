"""Each app's corrected estimates as a worker last summarized them: the API, the review page and
`/metrics` read these summaries, in time independent of how many events and grades an app
holds; a worker recomputes an app's when people grade it, when its first judged event finishes
or its summary is `FRESH_S` old as events finish (`freshen`), and every `ESTIMATE_REFRESH_S`
(`ragmon.oversight`).

A summary's bytes are charged to its app (the ledger's `estimates`, kept until deleted): a
replacement charges the difference from the bytes it replaces (its `CHARGED` field keeps
them), and `forget` credits them back. So a summary has no TTL: it leaves with its charge."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

import redis

from ragmon.store.fields import Kind
from ragmon.store.keys import Keys
from ragmon.store.ledger import FIELD_OVERHEAD, KEY_OVERHEAD, allocated
from ragmon.store.records import text_of
from ragmon.store.rq_jobs import DrainJobs

if TYPE_CHECKING:
    from ragmon.store.ledger import Ledger

QUEUED_S = 600  # a summarizing job lost before it started is enqueued again after this
FRESH_S = 60.0  # as events finish, a summary this old is asked for again
NUMBER_BYTES = 24  # a number's text (`CHARGED`, `Keys.estimates_at`)
CHARGED = "charged"  # the summary's field of the bytes charged for it (never a window's name)


def summary_bytes(key: str, app: str, windows: Mapping[str, str]) -> int:
    """What an app's summary takes: its hash with `CHARGED`, and its field in
    `Keys.estimates_at`."""
    fields = sum(FIELD_OVERHEAD + allocated(len(w)) + allocated(len(t)) for w, t in windows.items())
    index = 2 * FIELD_OVERHEAD + len(CHARGED) + len(app) + 2 * NUMBER_BYTES
    return KEY_OVERHEAD + allocated(len(key)) + fields + index


class EstimateSummaries:
    def __init__(self, client: redis.Redis, keys: Keys, jobs: DrainJobs, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.jobs = jobs
        self.ledger = ledger
        self._looked: dict[str, float] = {}  # app → when this process last asked (`freshen`)

    def save(self, app: str, windows: Mapping[str, str], at: float, room: float = math.inf) -> bool:
        """Replace an app's summaries (window → JSON) whole, charging its ledger the
        difference; False, nothing written, when that difference is more than `room` (the
        bytes its share leaves it)."""
        key = self.keys.estimates(app)
        nbytes = summary_bytes(key, app, windows)
        saved = False

        def write(pipe: redis.client.Pipeline) -> None:
            nonlocal saved
            before = int(cast(bytes | None, pipe.hget(key, CHARGED)) or 0)
            saved = nbytes - before <= max(0.0, room)
            if not saved:
                return
            pipe.multi()
            pipe.delete(key)
            for window, text in windows.items():
                pipe.hset(key, window, text)
            pipe.hset(key, CHARGED, nbytes)
            pipe.hset(self.keys.estimates_at, app, repr(at))
            self.ledger.charge(pipe, app, Kind.ESTIMATES, nbytes - before, time.time())

        self.client.transaction(write, key)
        return saved

    def load(self, app: str, window: str) -> str | None:
        raw = self.client.hget(self.keys.estimates(app), window)
        return None if raw is None else text_of(cast(bytes, raw))

    def summarized_at(self) -> dict[str, float]:
        """Per app, when its estimates were last summarized."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.estimates_at))
        return {text_of(k): float(v) for k, v in raw.items()}

    def forget(self, apps: Iterable[str]) -> None:
        """Apps with nothing left to summarize: their summary and its entry go, and their
        ledger is credited what it was charged."""
        names = list(apps)
        if not names:
            return
        keys = [self.keys.estimates(a) for a in names]

        def drop(pipe: redis.client.Pipeline) -> None:
            held = [cast(bytes | None, pipe.hget(k, CHARGED)) for k in keys]
            pipe.multi()
            pipe.delete(*keys)
            pipe.hdel(self.keys.estimates_at, *names)
            for app, n in zip(names, held, strict=True):
                self.ledger.charge(pipe, app, Kind.ESTIMATES, -int(n or 0), time.time())

        self.client.transaction(drop, *keys)

    def want(self, apps: Iterable[str]) -> None:
        """Have a worker summarize these apps' estimates soon: one job waits for the fleet at a
        time, and takes every app asked for before it starts (`due`)."""
        names = list(apps)
        if not names:
            return
        self.client.sadd(self.keys.estimates_due, *names)
        if self.client.set(self.keys.estimates_queued, 1, nx=True, ex=QUEUED_S):
            self.jobs.enqueue_summaries()

    def freshen(self, app: str, now: float) -> None:
        """An event of `app` finished: ask for its summary when it has none or one `FRESH_S`
        old. Per event a lookup in this process' memory (when it next looks); Redis is read at
        most once per app and `FRESH_S` (one HGET), and asked (`want`) only when it is due."""
        if now < self._looked.get(app, -math.inf) + FRESH_S:
            return
        self._looked[app] = now
        with contextlib.suppress(redis.RedisError):  # the maintenance tick asks later
            at = cast(bytes | None, self.client.hget(self.keys.estimates_at, app))
            if at is not None and now - float(at) < FRESH_S:
                self._looked[app] = float(at)  # fresh: look again once it is `FRESH_S` old
            else:
                self.want([app])

    def due(self) -> list[str]:
        """The apps to summarize now, taken (each once); an app asked for from now on gets a
        job of its own."""
        self.client.delete(self.keys.estimates_queued)
        raw = cast(list[bytes], self.client.spop(self.keys.estimates_due, 10_000) or [])
        return sorted(text_of(x) for x in raw)
