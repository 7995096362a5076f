"""The anchor set and its daily re-judgings in Redis (`ragmon.core.anchor` says what they are)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from ragmon.core.anchor import AnchorItem, item_dict
from ragmon.core.wire import SEP
from ragmon.store.fields import Kind

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys
    from ragmon.store.ledger import Ledger

RUNS_KEPT = 400  # daily runs: more than a year of history for the report and the baseline


class Anchors:
    """The frozen anchor set (from people's grades) and the runs of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.ledger = ledger

    def frozen(self) -> list[AnchorItem] | None:
        raw = cast(bytes | None, self.client.get(self.keys.anchor_set))
        return None if raw is None else [AnchorItem(**x) for x in json.loads(raw)]

    def freeze(self, items: list[AnchorItem], now: float | None = None) -> list[AnchorItem]:
        """Keep `items` as the set unless one was frozen meanwhile; returns the set kept. Each
        item's bytes are charged to its app's ledger (`anchors`, kept until `reset`)."""
        text = json.dumps([item_dict(i) for i in items], separators=(",", ":"))
        if self.client.set(self.keys.anchor_set, text, nx=True):
            self._charge(items, 1, now)
        return self.frozen() or items

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
        """Forget the frozen set and every run (a new set gets a new baseline)."""
        items = self.frozen() or []
        if self.client.delete(self.keys.anchor_set, self.keys.anchor_runs):
            self._charge(items, -1, now)

    def _charge(self, items: list[AnchorItem], sign: int, now: float | None) -> None:
        """Each item's bytes to (or, `sign` -1, off) the ledger of the app it came from (an
        item of a file of golden grades has none: it is the operator's)."""
        held: Counter[str] = Counter()
        for i in items:
            app, sep, _ = i.key.partition(SEP)
            if sep:
                held[app] += len(json.dumps(item_dict(i))) + 1
        with self.client.pipeline(transaction=True) as pipe:
            for app, n in held.items():
                self.ledger.charge(pipe, app, Kind.ANCHORS, sign * n, now or time.time())
            pipe.execute()
