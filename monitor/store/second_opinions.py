"""The second judge's grades beside the first's (`ragmon.workers.second`), per app in Redis."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, cast

from ragmon.store.fields import Kind
from ragmon.store.ledger import GRADES_KEPT_S, KEY_OVERHEAD, entry_bytes

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys
    from ragmon.store.ledger import Ledger

KEEP_S = int(GRADES_KEPT_S)  # as people's grades: agreement over the whole history kept


class SecondOpinions:
    """Per app, event id → the pairs (first judge's grade, second judge's) of its passages."""

    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.ledger = ledger

    def add(self, record: dict[str, Any], now: float | None = None) -> None:
        """Keep one event's pairs (once per event: its finish is), charged to its app's
        ledger with people's grades (`grades`: kept as long)."""
        key = self.keys.second_opinions(record["app"])
        text = json.dumps(record, separators=(",", ":"))
        nbytes = entry_bytes(record["event_id"], text) - KEY_OVERHEAD  # a field of the hash
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, record["event_id"], text)
            self.ledger.charge(pipe, record["app"], Kind.GRADES, nbytes, now or time.time())
            pipe.expire(key, KEEP_S)
            pipe.sadd(self.keys.second_opinion_apps, record["app"])
            pipe.execute()

    def records(self, app: str | None = None) -> list[dict[str, Any]]:
        """Every app's records, or one app's (no other app's key is read)."""
        apps = [app] if app is not None else sorted(x.decode() for x in cast(
            set[bytes], self.client.smembers(self.keys.second_opinion_apps)))  # fmt: skip
        out = []
        for app in apps:
            rows = cast(dict[str, Any], self.client.hgetall(self.keys.second_opinions(app)))
            out += [json.loads(rows[k]) for k in sorted(rows)]
        return out
