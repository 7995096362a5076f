"""Passages retried apart from their event: a passing judge failure need not hold the event.

From the delivery's `RELEASE_ATTEMPT`-th try, an event with some passages graded is measured
with the ones still failing for now unjudged, once: the event's aggregates are written exactly
once and never revised. Each such passage is then retried on its own (`Store.apart`), on the
events' backoff (`RETRY_DELAYS_S`); a grade it gets goes to the judgment cache only, where
the next events holding the passage for the query find it.

Bounded: at most `APART_CAP` passages per app wait (the others are left to later events),
and none past `APART_TTL_S` after it first failed or past the ladder's last step. A retry
whose worker dies mid-call is dropped (a later event asks again). The payload (query and
passage text) is sealed as an event's is (`ragmon.store.sealing`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragmon.core.wire import SEP
from ragmon.store.ingest import texts

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys
    from ragmon.store.sealing import Sealer

APART_CAP = 1000  # passages of one app waiting for a retry apart
APART_TTL_S = 3600  # from a passage's first failure; longer than the retry ladder


@dataclass(frozen=True)
class Apart:
    """One passage to grade again: for `query` in `app`'s cache scope (`scope`, None: the
    shared cache) under one judge identity (`model`, `version`); `tries` so far."""

    app: str
    scope: str | None
    model: str
    version: str
    query: str
    passage_id: str
    text: str
    tries: int = 1
    first: float = 0.0

    @property
    def id(self) -> str:
        who = SEP.join([self.scope or "", self.model, self.version, self.query, self.text])
        return hashlib.sha256(who.encode()).hexdigest()[:32]

    def dump(self) -> str:
        return json.dumps([self.scope, self.model, self.version, self.query, self.passage_id,
                           self.text, self.tries, self.first])  # fmt: skip


class PassageRetries:
    """`Store.apart`: add, claim when due, and end (done, or once more after a delay)."""

    def __init__(self, client: redis.Redis, keys: Keys, sealer: Sealer) -> None:
        self.client = client
        self.keys = keys
        self.sealer = sealer

    def add(self, item: Apart, delays: tuple[int, ...]) -> bool:
        """Queue `item`'s first retry; False when its app holds `APART_CAP` or it waits
        already."""
        k, app = self.keys, item.app
        if self.client.hlen(k.apart_payloads(app)) >= APART_CAP:
            return False
        now = time.time()
        first = Apart(**{**item.__dict__, "tries": 1, "first": now})
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(k.apart_payloads(app), item.id, self.sealer.seal(first.dump()))
            pipe.zadd(k.apart(app), {item.id: now + delays[0]}, nx=True)
            pipe.sadd(k.apart_apps, app)
            for key in (k.apart_payloads(app), k.apart(app), k.apart_apps):
                pipe.expire(key, APART_TTL_S)
            return bool(pipe.execute()[0])

    def due(self) -> bool:
        """Whether a passage's retry is due now."""
        now = time.time()
        apps = texts(self.client.smembers(self.keys.apart_apps))
        return any(self.client.zcount(self.keys.apart(a), "-inf", now) for a in apps)

    def claim(self, n: int) -> list[Apart]:
        """Take up to `n` due retries (each is taken by one caller); expired ones are dropped."""
        k, now = self.keys, time.time()
        out: list[Apart] = []
        for app in texts(self.client.smembers(k.apart_apps)):
            for pid in texts(self.client.zrangebyscore(k.apart(app), "-inf", now, 0, n)):
                if len(out) >= n or not self.client.zrem(k.apart(app), pid):
                    continue
                raw = self.client.hget(k.apart_payloads(app), pid)
                if raw is None:
                    continue
                scope, model, version, query, passage, text, tries, first = json.loads(
                    self.sealer.open(raw)
                )
                if now - first > APART_TTL_S:
                    self.client.hdel(k.apart_payloads(app), pid)
                    continue
                out.append(Apart(app, scope, model, version, query, passage, text, tries, first))
        return out

    def done(self, item: Apart) -> None:
        """Graded, or failed for good: forget it."""
        self.client.hdel(self.keys.apart_payloads(item.app), item.id)

    def again(self, item: Apart, delays: tuple[int, ...]) -> bool:
        """A passing failure once more: due after the next delay, or dropped past the ladder
        or the TTL (False)."""
        now = time.time()
        if item.tries >= len(delays) or now + delays[item.tries] - item.first > APART_TTL_S:
            self.done(item)
            return False
        k, later = self.keys, Apart(**{**item.__dict__, "tries": item.tries + 1})
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(k.apart_payloads(item.app), item.id, self.sealer.seal(later.dump()))
            pipe.zadd(k.apart(item.app), {item.id: now + delays[item.tries]})
            pipe.execute()
        return True

    def waiting(self, app: str) -> int:
        """How many passages of `app` wait for a retry apart (or are being retried)."""
        return int(self.client.hlen(self.keys.apart_payloads(app)))
