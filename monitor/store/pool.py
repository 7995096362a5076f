"""The pooled ideal: per app and normalized query, the best grade of every passage ragmon has
graded for it, across retrievers and time (TREC's pooling, kept online).

`Store.pool.merge` adds one event's grades and answers the query's pool in one round trip
(script `POOL`): what `ragmon.core.measures.compute` takes as `pool` for nDCG@K (pooled),
RA-nWG@K (pooled) and N-Recall4+@K (pooled). Bounded and expiring with the judgment cache: an
entry not seen again for RAGMON_CACHE_TTL_DAYS is dropped, and a pool keeps at most
`POOL_CAP` passages (the lowest grades leave first). Only grades that weigh in an ideal are
kept (0-3 grade 1 and up); the rarity weights of RA-nWG depend on the counts of grades 3-5
alone, so leaving out the rest changes no value.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ragmon.store import scripts
from ragmon.store.records import query_hash

if TYPE_CHECKING:
    import redis

    from ragmon.settings import Settings
    from ragmon.store.keys import Keys

POOL_CAP = 200  # passages per query (a pool holds the ones worth something to an ideal)


class QueryPool:
    """`Store.pool`: the pooled ideals of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.keys = keys
        self.settings = settings
        self._merge = client.register_script(scripts.POOL.source)

    def merge(
        self, app: str, model: str, prompt_version: str, query: str, grades: Mapping[str, int]
    ) -> dict[str, int] | None:
        """Add `grades` (passage text hash → grade on the judge's scale) to the query's pool
        and return the pool (those included); None when RAGMON_CACHE_TTL_DAYS is 0 (no pool is
        kept: the pooled measures then equal the per-event ones)."""
        ttl = int(self.settings.cache_ttl_days * 86400)
        if ttl <= 0:
            return None
        key = self.keys.pool(app, model, prompt_version, query_hash(query))
        call = scripts.POOL.call(
            keys={"pool": key},
            args={"ttl": ttl, "now": int(time.time()), "cap": POOL_CAP},
            more_args=[x for h, g in grades.items() for x in (h, int(g))],
        )
        raw = self._merge(keys=call.keys, args=call.args)
        return {
            (h.decode() if isinstance(h, bytes) else str(h)): int(g)
            for h, g in zip(raw[::2], raw[1::2], strict=True)
        }
