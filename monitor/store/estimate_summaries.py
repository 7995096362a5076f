"""Each app's corrected estimates as a worker last summarized them: the API, the review page and
`/metrics` read these summaries, in time independent of how many events and grades an app
holds; a worker recomputes an app's when people grade it, when its first judged event finishes,
and every `ESTIMATE_REFRESH_S` (`ragmon.oversight`); as its events finish, the windows new
events fall in (the last 7 days, this ISO week) once they are `FRESH_S` old (`freshen`).

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

from ragmon.core.wire import SEP
from ragmon.store.fields import Kind
from ragmon.store.keys import Keys
from ragmon.store.ledger import FIELD_OVERHEAD, KEY_OVERHEAD, allocated
from ragmon.store.records import text_of
from ragmon.store.rq_jobs import DrainJobs

if TYPE_CHECKING:
    from ragmon.store.ledger import Ledger

QUEUED_S = 600  # a summarizing job lost before it started is enqueued again after this
FRESH_S = 60.0  # as events finish, a summary this old is asked for again
NUMBER_BYTES = 24  # a number's text (`CHARGED`, `FRESH`, `Keys.estimates_at`)
# The summary's own fields beside its windows' (never a window's name): the bytes charged for
# it, and when its windows of new events were last summarized.
CHARGED, FRESH = "charged", "fresh"
RECENT = SEP + "recent"  # a member of `Keys.estimates_due`: app + this, its new events' windows


def summary_bytes(key: str, app: str, windows: Mapping[str, str]) -> int:
    """What an app's summary takes: its hash with `CHARGED` and `FRESH`, and its field in
    `Keys.estimates_at`."""
    fields = sum(FIELD_OVERHEAD + allocated(len(w)) + allocated(len(t)) for w, t in windows.items())
    index = 3 * FIELD_OVERHEAD + len(CHARGED) + len(FRESH) + len(app) + 3 * NUMBER_BYTES
    return KEY_OVERHEAD + allocated(len(key)) + fields + index


class EstimateSummaries:
    def __init__(self, client: redis.Redis, keys: Keys, jobs: DrainJobs, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.jobs = jobs
        self.ledger = ledger
        self._looked: dict[str, float] = {}  # app → when this process last asked (`freshen`)

    def save(
        self,
        app: str,
        windows: Mapping[str, str],
        at: float,
        room: float = math.inf,
        recent: bool = False,
    ) -> bool:
        """Replace an app's summaries (window → JSON) whole, or only those of `windows`
        (`recent`: its new events'), charging its ledger the difference; False, nothing
        written, when that difference is more than `room` (the bytes its share leaves it)."""
        key = self.keys.estimates(app)
        saved = False

        def write(pipe: redis.client.Pipeline) -> None:
            nonlocal saved
            old = {text_of(k): text_of(v) for k, v in
                   cast(dict[bytes, bytes], pipe.hgetall(key)).items()}  # fmt: skip
            before = int(old.pop(CHARGED, 0))
            old.pop(FRESH, None)
            kept = {**old, **windows} if recent else dict(windows)
            nbytes = summary_bytes(key, app, kept)
            saved = nbytes - before <= max(0.0, room)
            if not saved:
                return
            pipe.multi()
            pipe.delete(key)
            for window, text in kept.items():
                pipe.hset(key, window, text)
            pipe.hset(key, CHARGED, nbytes)
            pipe.hset(key, FRESH, repr(at))
            if not recent:
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

    def want(self, apps: Iterable[str], recent: bool = False) -> None:
        """Have a worker summarize these apps' estimates soon (`recent`: only the windows new
        events fall in): one job waits for the fleet at a time, and takes every app asked
        for before it starts (`due`)."""
        names = [a + RECENT if recent else a for a in apps]
        if not names:
            return
        self.client.sadd(self.keys.estimates_due, *names)
        if self.client.set(self.keys.estimates_queued, 1, nx=True, ex=QUEUED_S):
            self.jobs.enqueue_summaries()

    def freshen(self, app: str, now: float) -> None:
        """An event of `app` finished: ask for its summary when it has none, or for its new
        events' windows when they are `FRESH_S` old. Per event a lookup in this process'
        memory (when it next looks); Redis is read at most once per app and `FRESH_S` (one
        HGET), and asked (`want`) only when it is due."""
        if now < self._looked.get(app, -math.inf) + FRESH_S:
            return
        self._looked[app] = now
        with contextlib.suppress(redis.RedisError):  # the maintenance tick asks later
            at = cast(bytes | None, self.client.hget(self.keys.estimates(app), FRESH))
            if at is not None and now - float(at) < FRESH_S:
                self._looked[app] = float(at)  # fresh: look again once it is `FRESH_S` old
            else:
                self.want([app], recent=at is not None)

    def due(self) -> dict[str, bool]:
        """The apps to summarize now, taken (each once): app → only its new events' windows
        (asked for nothing more). An app asked for from now on gets a job of its own."""
        self.client.delete(self.keys.estimates_queued)
        raw = cast(list[bytes], self.client.spop(self.keys.estimates_due, 10_000) or [])
        out: dict[str, bool] = {}
        for name in sorted(text_of(x) for x in raw):
            app, recent = name.removesuffix(RECENT), name.endswith(RECENT)
            out[app] = out.get(app, True) and recent
        return out
