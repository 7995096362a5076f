"""People's grades in Redis (`POST /v1/grades`): one record per (event, passage, reviewer).

They are kept apart from the event's result, which keeps the judge's grades and measures
untouched: agreement and the corrected estimates read both. A record is the JSON object
`ragmon.core.reviews.grade_record` builds; the texts it was given on are kept once per event
(`Keys.human_texts`), not in each record, so a thousand people grading one passage store its
text once. Grades outlive their events (they are the anchor set and the human sample of past
weeks): kept `HUMAN_TTL_S` after their last change. What they take is charged to the app's
ledger (`grades`) in the write, as written (a change that shortens a record gives nothing
back), and a write past the room its caller gives an app is refused whole.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ragmon.core.wire import event_ref
from ragmon.store import scripts
from ragmon.store.fields import Kind
from ragmon.store.ledger import GRADES_KEPT_S

if TYPE_CHECKING:
    import redis

    from ragmon.store.keys import Keys
    from ragmon.store.ledger import Ledger

HUMAN_TTL_S = int(GRADES_KEPT_S)  # as the per-day aggregates: a year of weekly estimates
STATES = ("unchanged", "created", "updated")  # HUMAN_GRADES' answers 0, 1, 2
NO_LIMIT = 1 << 62  # the room of an app without a limit


def field_of(passage_id: str, reviewer: str) -> str:
    """A record's field in its event's hash: one per (passage, reviewer)."""
    return json.dumps([passage_id, reviewer], separators=(",", ":"))


OVERHEAD = 64  # bytes a hash field costs besides its name and value (counted per record, text)
QUERY_FIELD = "q"


def text_field(passage_id: str) -> str:
    """A passage's field in its event's texts hash."""
    return f"t:{passage_id}"


def same(held: bytes, record: Mapping[str, Any]) -> bool:
    """Whether a held record has `record`'s grade and note (a write of it changes nothing)."""
    old = json.loads(held)
    note = old.get("note") if isinstance(old.get("note"), str) else ""
    return bool(old.get("grade") == record["grade"] and note == (record.get("note") or ""))


class OverRoom(Exception):
    """A write of grades refused whole: `app`'s grades would add `adding` bytes, past the room
    it was given."""

    def __init__(self, app: str, adding: int) -> None:
        self.app, self.adding = app, adding
        super().__init__(app, adding)


class HumanGrades:
    """The people's grades of one deployment."""

    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.ledger = ledger
        self._write = client.register_script(scripts.HUMAN_GRADES.source)

    def write(
        self,
        records: Sequence[dict[str, Any]],
        now: float | None = None,
        texts: Sequence[tuple[str, str]] | None = None,
        rooms: Mapping[str, int] | None = None,
        deadline: float = 0.0,
    ) -> list[str]:
        """Store records atomically, in order: `created`, `updated` (another grade or note by
        the same reviewer replaces theirs) or `unchanged` (the same grade again) per record.

        `texts`: per record the query and passage text it was given on ('' for a text already
        sent with another record), kept once per event. `rooms`: bytes each app's grades may
        take (none: no limit); past it nothing is stored (`OverRoom`). `deadline`: unix
        seconds after which Redis refuses the write (the caller has stopped waiting)."""
        if not records:
            return []
        now = now if now is not None else time.time()
        # Again when another write changed one of its fields after it was read: each round lost
        # to a write that landed, and past `deadline` Redis refuses, which ends the loop.
        while True:
            states = self.write_read(records, self.read(records), now, texts, rooms, deadline)
            if states is not None:
                return states

    def read(self, records: Sequence[dict[str, Any]]) -> list[bytes | None]:
        """What the fields `records` would take hold now."""
        with self.client.pipeline(transaction=False) as pipe:
            for r in records:
                ref = event_ref(r["app"], r["event_id"])
                pipe.hget(self.keys.human_grades(ref), field_of(r["passage_id"], r["reviewer"]))
            return cast(list[bytes | None], pipe.execute())

    def write_read(
        self,
        records: Sequence[dict[str, Any]],
        held: Sequence[bytes | None],
        now: float,
        texts: Sequence[tuple[str, str]] | None = None,
        rooms: Mapping[str, int] | None = None,
        deadline: float = 0.0,
    ) -> list[str] | None:
        """`write`, given what its fields held when read (`read`), compared here with the
        records: None, and nothing stored, when a field no longer holds what was read."""
        texts = texts or [("", "")] * len(records)
        keys, args = [], []
        for r, old, (query, text) in zip(records, held, texts, strict=True):
            ref = event_ref(r["app"], r["event_id"])
            keys += [
                self.keys.human_grades(ref),
                self.keys.human_refs(r["app"]),
                self.keys.human_texts(ref),
            ]
            room = (rooms or {}).get(r["app"])
            args += [
                field_of(r["passage_id"], r["reviewer"]), json.dumps(r, separators=(",", ":")),
                old.decode() if old is not None else "", int(old is not None and same(old, r)),
                ref, r["app"], str(room if room is not None else NO_LIMIT),
                QUERY_FIELD, query, text_field(r["passage_id"]), text,
            ]  # fmt: skip
        ledger_keys, ledger_args = self.ledger.slots(scripts.HUMAN_GRADES_KINDS, now)
        call = scripts.HUMAN_GRADES.call(
            keys={"generation": self.keys.human_generation, "apps": self.keys.human_apps,
                  **ledger_keys},
            args={"ttl": HUMAN_TTL_S, "now": now, "overhead": OVERHEAD,
                  "deadline": int(deadline), **ledger_args},
            more_keys=keys,
            more_args=args,
        )  # fmt: skip
        reply = self._write(keys=call.keys, args=call.args)
        if reply and int(reply[0]) == -2:
            return None
        if reply and int(reply[0]) == -1:
            raise OverRoom(reply[1].decode(), int(reply[2]))
        return [STATES[int(s)] for s in reply]

    def held(self, apps: Sequence[str], now: float | None = None) -> dict[str, float]:
        """Bytes each app's grades and their texts take (the ledger's `grades` class)."""
        reading = self.ledger.read(now if now is not None else time.time())
        return {app: reading.held.get(app, {}).get(Kind.GRADES, 0.0) for app in apps}

    def of_event(self, app: str, event_id: str) -> list[dict[str, Any]]:
        """The records of one event, by passage then reviewer."""
        raw = cast(
            dict[str, Any], self.client.hgetall(self.keys.human_grades(event_ref(app, event_id)))
        )
        return [json.loads(raw[f]) for f in sorted(raw)]

    def of_app(self, app: str) -> list[dict[str, Any]]:
        """Every record of one app, oldest graded event first, with the `query` and `text` it
        was given on where they were kept."""
        refs = cast(list[bytes], self.client.zrange(self.keys.human_refs(app), 0, -1))
        with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hgetall(self.keys.human_grades(ref.decode()))
                pipe.hgetall(self.keys.human_texts(ref.decode()))
            rows = pipe.execute()
        out = []
        for row, texts in zip(rows[::2], rows[1::2], strict=True):
            query = texts.get(QUERY_FIELD.encode())
            for f in sorted(row):
                record = json.loads(row[f])
                text = texts.get(text_field(record["passage_id"]).encode())
                if query is not None and text is not None and "query" not in record:
                    record["query"], record["text"] = query.decode(), text.decode()
                out.append(record)
        return out

    def apps(self) -> list[str]:
        """The apps with people's grades."""
        return sorted(
            x.decode() for x in cast(set[bytes], self.client.smembers(self.keys.human_apps))
        )

    def generation(self) -> int:
        """Bumped by every change: what statistics of the grades are cached by."""
        return int(cast(bytes | None, self.client.get(self.keys.human_generation)) or 0)
