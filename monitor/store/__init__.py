"""All Redis access: events, results, aggregates, the RQ queue. Everything else calls this.

The façade, `Store`: `ragmon.store.store`. Layout of the keys: `ragmon.store.keys`, of an
event's hash: `ragmon.store.fields`; atomic multi-key changes: `ragmon.store.scripts` (their
arguments by name: `ragmon.store.protocol`; the finish step's: `ragmon.store.finish`); the
delivery path from ingest to a worker: `ragmon.store.ingest`, `ragmon.store.delivery` and its
drain jobs in RQ, `ragmon.store.rq_jobs`; the values it keeps and returns:
`ragmon.store.records` (re-exported here).
"""

from __future__ import annotations

from ragmon.store.keys import DAY_TTL_S
from ragmon.store.records import (
    QUERY_KEY_CHARS,
    Histogram,
    IngestItem,
    bucket_index,
    day_record,
    event_day,
    query_hash,
    ref_of,
    text_hash,
)
from ragmon.store.store import Store

__all__ = [
    "DAY_TTL_S", "QUERY_KEY_CHARS", "Histogram", "IngestItem", "Store", "bucket_index",
    "day_record", "event_day", "query_hash", "ref_of", "text_hash",
]  # fmt: skip
