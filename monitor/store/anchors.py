"""The anchor set and its re-judgings in Redis (`ragmon.core.anchor` says what they are). The
set's bytes are charged to the apps whose people's grades its passages come from (the ledger's
`anchors` class, kept until `reset`)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ragmon.core.anchor import AnchorItem, item_dict
from ragmon.store.fields import Kind

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys
    from ragmon.store.ledger import Ledger

RUNS_KEPT = 400  # runs: more than a year of daily history (16 days of hourly) for the baseline


def _app(item: AnchorItem) -> str:
    return item.key.split("|", 1)[0]


def _bytes(items: Sequence[AnchorItem]) -> Counter[str]:
    """Per app, the bytes its passages take in the set (as a JSON list)."""
    out: Counter[str] = Counter()
    for i in items:
        out[_app(i)] += len(json.dumps(item_dict(i), separators=(",", ":")).encode()) + 1
    return out


class Anchors:
    """The anchor set grown from people's grades and the runs of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.ledger = ledger

    def current(self) -> list[AnchorItem] | None:
        """The set kept from people's grades (None: none yet)."""
        raw = cast(bytes | None, self.client.get(self.keys.anchor_set))
        return None if raw is None else [AnchorItem(**x) for x in json.loads(raw)]

    def save(self, items: list[AnchorItem], now: float | None = None) -> None:
        """Keep `items` as the set, charging each app the bytes its passages add."""
        now = time.time() if now is None else now
        before = _bytes(self.current() or [])
        text = json.dumps([item_dict(i) for i in items], separators=(",", ":"))
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.anchor_set, text)
            for app, n in (_bytes(items) - before).items():
                self.ledger.charge(pipe, app, Kind.ANCHORS, n, now)
            pipe.execute()

    def runs(self) -> list[dict[str, Any]]:
        """Every run kept, oldest first."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.anchor_runs))
        return [json.loads(raw[k]) for k in sorted(raw)]

    def add_run(self, record: dict[str, Any]) -> None:
        """Keep a run (by its time), and only the newest `RUNS_KEPT`."""
        self.client.hset(self.keys.anchor_runs, record["at"], json.dumps(record))
        fields = sorted(cast(list[bytes], self.client.hkeys(self.keys.anchor_runs)))
        if len(fields) > RUNS_KEPT:
            self.client.hdel(self.keys.anchor_runs, *fields[: len(fields) - RUNS_KEPT])

    def reset(self, now: float | None = None) -> None:
        """Forget the set and every run (a new set gets a new baseline), and its bytes."""
        now = time.time() if now is None else now
        held = _bytes(self.current() or [])
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.anchor_set, self.keys.anchor_runs)
            for app, n in held.items():
                self.ledger.charge(pipe, app, Kind.ANCHORS, -n, now)
            pipe.execute()
