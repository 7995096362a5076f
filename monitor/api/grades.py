"""People's grades in (`POST /v1/grades`, and the explorer's grade buttons): checked against the
events they grade, scoped by the key's app, stored once per (event, passage, reviewer).

Like `IngestService` for events: the route only reads the body and the caller; everything the
write decides is here. A bad item rejects the whole request and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ragmon.api.auth import Principal
from ragmon.api.schemas import GradeBatch
from ragmon.api.service import Refused, validation_errors
from ragmon.core.reviews import grade_record, problem
from ragmon.settings import Settings
from ragmon.store import Store


class GradeService:
    """The write path of people's grades, from a body already read to the store."""

    def __init__(
        self, settings: Settings, store: Store, unavailable: Callable[[BaseException], Refused]
    ) -> None:
        self.settings = settings
        self.store = store
        self.unavailable = unavailable  # the 503 of a store that failed (`IngestService`'s)

    async def grades(self, principal: Principal | None, body: bytes) -> list[dict[str, Any]]:
        """A `GradeBatch` body stored: `{event_id, passage_id, reviewer, status}` per grade, in
        order; or `Refused` (401/403/404/422/503) naming the item at fault."""
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
        return await self.call(self.write, items)

    def write(self, items: list[dict]) -> list[dict[str, Any]]:
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
        if errors:  # 404 when an event is unknown, else 422; every item at fault is named
            raise Refused(status, "invalid", errors)
        now = time.time()
        records = []
        for item in items:
            event = events[(item["app"], item["event_id"])]
            assert event is not None
            records.append(grade_record(item, event, now))
        states = self.store.human.write(records, now)
        return [
            {"event_id": r["event_id"], "passage_id": r["passage_id"], "reviewer": r["reviewer"],
             "status": st}
            for r, st in zip(records, states, strict=True)
        ]  # fmt: skip

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
