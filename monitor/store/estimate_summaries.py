"""Each app's corrected estimates as a worker last summarized them: the API, the review page and
`/metrics` read these summaries, in time independent of how many events and grades an app
holds; a worker recomputes an app's when people grade it, and every `ESTIMATE_REFRESH_S`
(`ragmon.oversight`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

import redis

from ragmon.store.keys import Keys
from ragmon.store.records import text_of
from ragmon.store.rq_jobs import DrainJobs

QUEUED_S = 600  # a summarizing job lost before it started is enqueued again after this


class EstimateSummaries:
    def __init__(self, client: redis.Redis, keys: Keys, jobs: DrainJobs) -> None:
        self.client = client
        self.keys = keys
        self.jobs = jobs

    def save(self, app: str, windows: Mapping[str, str], at: float, ttl_s: int) -> None:
        """Replace an app's summaries (window → JSON) whole."""
        key = self.keys.estimates(app)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            for window, text in windows.items():
                pipe.hset(key, window, text)
            pipe.expire(key, ttl_s)
            pipe.hset(self.keys.estimates_at, app, repr(at))
            pipe.execute()

    def load(self, app: str, window: str) -> str | None:
        raw = self.client.hget(self.keys.estimates(app), window)
        return None if raw is None else text_of(cast(bytes, raw))

    def summarized_at(self) -> dict[str, float]:
        """Per app, when its estimates were last summarized."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.estimates_at))
        return {text_of(k): float(v) for k, v in raw.items()}

    def forget(self, apps: Iterable[str]) -> None:
        """Apps with nothing left to summarize: their `summarized_at` entry goes."""
        names = list(apps)
        if names:
            self.client.hdel(self.keys.estimates_at, *names)

    def want(self, apps: Iterable[str]) -> None:
        """Have a worker summarize these apps' estimates soon: one job waits for the fleet at a
        time, and takes every app asked for before it starts (`due`)."""
        names = list(apps)
        if not names:
            return
        self.client.sadd(self.keys.estimates_due, *names)
        if self.client.set(self.keys.estimates_queued, 1, nx=True, ex=QUEUED_S):
            self.jobs.enqueue_summaries()

    def due(self) -> list[str]:
        """The apps to summarize now, taken (each once); an app asked for from now on gets a
        job of its own."""
        self.client.delete(self.keys.estimates_queued)
        raw = cast(list[bytes], self.client.spop(self.keys.estimates_due, 10_000) or [])
        return sorted(text_of(x) for x in raw)
