"""People's grades in (`POST /v1/grades`, and the explorer's grade buttons): checked against the
events they grade, scoped by the key's app, stored once per (event, passage, reviewer).

Like `IngestService` for events: the route only reads the body and the caller; everything the
write decides is here. A bad item rejects the whole request and nothing of it is stored. What
one request may cost is bounded before it is parsed (bytes, grades), before a byte of Redis is
read (events it grades) and when it is written (people per event; each app's room for grades,
`AppStorage.grade_rooms`, checked and charged in the write itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ragmon.api.auth import Principal
from ragmon.api.schemas import GradeBatch
from ragmon.api.service import Refused, more_items_than, validation_errors
from ragmon.api.storage import MIB, AppStorage
from ragmon.api.storage import RETRY_AFTER_S as STORAGE_RETRY_AFTER_S
from ragmon.core.reviews import grade_record, grade_texts, problem
from ragmon.core.wire import MAX_BATCH
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.human import OverRoom

log = logging.getLogger("ragmon.api")

# What one request may cost (`ragmon.api.costs` declares the route with these).
GRADES_MAX_BYTES = 4 << 20  # a full batch with every note at its longest fits
MAX_GRADE_EVENTS = 50  # distinct events per request: each is read whole to check its grades
MAX_REVIEWERS_PER_EVENT = 16  # distinct people grading one event


def _item_error(i: int, field: str, msg: str) -> dict[str, Any]:
    return {"loc": ["body", "grades", i, field], "msg": msg, "type": "value_error"}


class GradeService:
    """The write path of people's grades, from a body already read to the store."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        unavailable: Callable[[BaseException], Refused],
        storage: AppStorage | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.unavailable = unavailable  # the 503 of a store that failed (`IngestService`'s)
        self.storage = storage or AppStorage(settings, store)

    async def grades(self, principal: Principal | None, body: bytes) -> list[dict[str, Any]]:
        """A `GradeBatch` body stored: `{event_id, passage_id, reviewer, status}` per grade, in
        order; or `Refused` (401/403/404/422/503/507) naming the item at fault. A body of more
        than `MAX_BATCH` grades is refused from its commas, before any grade is built."""
        if more_items_than(body, MAX_BATCH):
            msg = f"at most {MAX_BATCH} grades per request: send smaller batches"
            raise Refused(422, "invalid", [{"loc": ["body", "grades"], "msg": msg,
                                            "type": "too_long"}])  # fmt: skip
        try:
            batch = GradeBatch.model_validate_json(body)
        except ValidationError as exc:
            raise Refused(422, "invalid", validation_errors(exc)) from None
        return await self.submit(principal, batch)

    async def submit(self, principal: Principal | None, batch: GradeBatch) -> list[dict[str, Any]]:
        """A valid batch (`POST /v1/grades`, or a page's button) checked and stored."""
        items = [g.model_dump() for g in batch.grades]
        bound = principal.app if principal is not None else None
        for i, item in enumerate(items):
            if bound is not None and item["app"] != bound:
                raise Refused(
                    403, "forbidden", f"grades[{i}].app: this API key may only grade app={bound}"
                )
        events = {(it["app"], it["event_id"]) for it in items}
        if len(events) > MAX_GRADE_EVENTS:
            msg = f"grades of at most {MAX_GRADE_EVENTS} events per request: send smaller batches"
            raise Refused(422, "invalid", [{"loc": ["body", "grades"], "msg": msg,
                                            "type": "too_long"}])  # fmt: skip
        try:
            rooms = await self.storage.grade_rooms({app for app, _ in events})
        except Exception as exc:
            raise self.unavailable(exc) from exc
        deadline = time.time() + self.settings.store_timeout_s  # later, Redis refuses it
        return await self.call(self.write, items, rooms, deadline)

    def write(
        self,
        items: list[dict],
        rooms: dict[str, tuple[int, str]] | None = None,
        deadline: float = 0.0,
    ) -> list[dict[str, Any]]:
        """Check every item against its event, then store them all (blocking: in a thread)."""
        events: dict[tuple[str, str], dict | None] = {}
        for item in items:
            key = (item["app"], item["event_id"])
            if key not in events:
                events[key] = self.store.result(*key)
        errors, status = [], 422
        for i, item in enumerate(items):
            wrong = problem(item, events[(item["app"], item["event_id"])])
            if wrong is not None:
                code, field, msg = wrong
                status = 404 if code == 404 else status
                kind = "not_found" if code == 404 else "value_error"
                errors.append({"loc": ["body", "grades", i, field], "msg": msg, "type": kind})
        errors += self._too_many_reviewers(items, events) if not errors else []
        if errors:  # 404 when an event is unknown, else 422; every item at fault is named
            raise Refused(status, "invalid", errors)
        now = time.time()
        records, texts, sent = [], [], set()
        for item in items:
            key = (item["app"], item["event_id"])
            event = events[key]
            assert event is not None
            records.append(grade_record(item, event, now))
            query, text = grade_texts(event, item["passage_id"])
            texts.append(("" if key in sent else query,
                          "" if (*key, item["passage_id"]) in sent else text))  # fmt: skip
            sent |= {key, (*key, item["passage_id"])}
        limits = {app: room for app, (room, _) in (rooms or {}).items()}
        try:
            states = self.store.human.write(records, now, texts, limits, deadline)
        except OverRoom as exc:
            room, limit = (rooms or {})[exc.app]
            raise Refused(
                507,
                "app_storage",
                f"app {exc.app!r}: these grades would add {exc.adding / MIB:.2f} MB, past "
                f"{limit} (room left: {room / MIB:.2f} MB): nothing of this request was stored",
                {"Retry-After": str(STORAGE_RETRY_AFTER_S)},
            ) from None
        changed = {r["app"] for r, st in zip(records, states, strict=True) if st != "unchanged"}
        try:  # a worker summarizes their estimates anew (else its tick, within minutes)
            self.store.estimates.want(sorted(changed))
        except Exception as exc:  # noqa: BLE001 - the grades are stored: answer them
            log.warning("could not ask for the estimates of %s: %r", sorted(changed), exc)
        return [
            {"event_id": r["event_id"], "passage_id": r["passage_id"], "reviewer": r["reviewer"],
             "status": st}
            for r, st in zip(records, states, strict=True)
        ]  # fmt: skip

    @staticmethod
    def _too_many_reviewers(
        items: list[dict], events: dict[tuple[str, str], dict | None]
    ) -> list[dict[str, Any]]:
        """The items that would give an event more than `MAX_REVIEWERS_PER_EVENT` people."""
        people: dict[tuple[str, str], set[str]] = {}
        for key, found in events.items():
            people[key] = {
                g["reviewer"]
                for p in (found or {}).get("passages") or ()
                for g in p.get("human_grades") or ()
            }
        errors = []
        for i, item in enumerate(items):
            held = people[(item["app"], item["event_id"])]
            if item["reviewer"] not in held and len(held) >= MAX_REVIEWERS_PER_EVENT:
                msg = f"event {item['event_id']!r} has grades of {MAX_REVIEWERS_PER_EVENT} people"
                errors.append(_item_error(i, "reviewer", f"{msg}, the limit"))
            else:
                held.add(item["reviewer"])
        return errors[:10]

    async def call(self, fn: Any, *args: Any) -> Any:
        """A blocking store call in a thread within RAGMON_STORE_TIMEOUT_S, else a 503."""
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(fn, *args), self.settings.store_timeout_s
            )
        except Refused:
            raise
        except Exception as exc:
            raise self.unavailable(exc) from exc
