"""People's grades in Redis (`POST /v1/grades`): one record per (event, passage, reviewer).

They are kept apart from the event's result, which keeps the judge's grades and measures
untouched: agreement and the corrected estimates read both. A record is the JSON object
`ragmon.core.reviews.grade_record` builds. Grades outlive their events (they are the anchor set
and the human sample of past weeks): kept `HUMAN_TTL_S` after their last change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ragmon.store import scripts
from ragmon.store.keys import event_ref

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys

HUMAN_TTL_S = 400 * 86400  # as the per-day aggregates: a year of weekly estimates plus margin
STATES = ("unchanged", "created", "updated")  # HUMAN_GRADES' answers 0, 1, 2


def field_of(passage_id: str, reviewer: str) -> str:
    """A record's field in its event's hash: one per (passage, reviewer)."""
    return json.dumps([passage_id, reviewer], separators=(",", ":"))


class HumanGrades:
    """The people's grades of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._write = client.register_script(scripts.HUMAN_GRADES.source)

    def write(self, records: Sequence[dict[str, Any]], now: float | None = None) -> list[str]:
        """Store records atomically, in order: `created`, `updated` (another grade or note by
        the same reviewer replaces theirs) or `unchanged` (the same grade again) per record."""
        if not records:
            return []
        keys, args = [], []
        for r in records:
            ref = event_ref(r["app"], r["event_id"])
            keys += [self.keys.human_grades(ref), self.keys.human_refs(r["app"])]
            args += [
                field_of(r["passage_id"], r["reviewer"]),
                json.dumps(r, separators=(",", ":")),
                str(r["grade"]),
                r.get("note") or "",
                ref,
                r["app"],
            ]
        call = scripts.HUMAN_GRADES.call(
            keys={"generation": self.keys.human_generation, "apps": self.keys.human_apps},
            args={"ttl": HUMAN_TTL_S, "now": now if now is not None else time.time()},
            more_keys=keys,
            more_args=args,
        )
        return [STATES[int(s)] for s in self._write(keys=call.keys, args=call.args)]

    def of_event(self, app: str, event_id: str) -> list[dict[str, Any]]:
        """The records of one event, by passage then reviewer."""
        raw = cast(
            dict[str, Any], self.client.hgetall(self.keys.human_grades(event_ref(app, event_id)))
        )
        return [json.loads(raw[f]) for f in sorted(raw)]

    def of_app(self, app: str) -> list[dict[str, Any]]:
        """Every record of one app, oldest graded event first."""
        refs = cast(list[bytes], self.client.zrange(self.keys.human_refs(app), 0, -1))
        with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hgetall(self.keys.human_grades(ref.decode()))
            rows = pipe.execute()
        return [json.loads(row[f]) for row in rows for f in sorted(row)]

    def apps(self) -> list[str]:
        """The apps with people's grades."""
        return sorted(
            x.decode() for x in cast(set[bytes], self.client.smembers(self.keys.human_apps))
        )

    def generation(self) -> int:
        """Bumped by every change: what statistics of the grades are cached by."""
        return int(cast(bytes | None, self.client.get(self.keys.human_generation)) or 0)
