"""Retriever spans held for their parent span, across exports, and what becomes of them.

A retriever span whose ancestry leaves its export (`ragmon.api.nesting`) is held in Redis
(`ragmon.store.holds`, a share per app: at most `MAX_SPANS` spans and `MAX_BYTES`, charged to the
app's ledger) for RAGMON_OTLP_HOLD_S, already made into the item(s) to store. Each later export
of its app decides the held spans that wait for one of its spans: under a retriever span,
`nested` (skipped; `own` with RAGMON_OTLP_NESTED=own); no retriever above, `released`; and each
call also claims the app's spans past their hold (`expired`); the sweep here claims them for
apps that send nothing more. A released, own or expired span is stored, then leaves the hold;
a store that fails leaves it to be claimed again after its lease, and the event id (from the
trace and span ids) stores it once. Outcomes count in `ragmon_otlp_holds_total`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ragmon.api.batcher import cancel
from ragmon.api.logs import KindLimiter
from ragmon.api.nesting import Hold, items_of
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store

log = logging.getLogger("ragmon.api")

SWEEP_S = 1.0  # how often this process claims the spans past their hold, every app's
STORED = ("own", "released", "expired")  # a held span decided so is stored


class HeldSpans:
    """The hold of one API process: the store's, with the writes of what is decided."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        write: Callable[[list[IngestItem]], Awaitable[Any]],
        count: Callable[[Mapping[str, int]], None],
    ) -> None:
        self.settings = settings
        self.store = store
        self.write = write
        self.count = count
        self.log = KindLimiter(log)
        self._task: asyncio.Task | None = None

    async def admit(self, holds: Sequence[Hold]) -> None:
        """An export's part: its arrivals and orphans, app by app. Items of its own spans
        decided at once are stored before the answer (a failure is the export's 503)."""
        for hold in holds:
            decided = await asyncio.to_thread(
                self.store.holds.admit, hold.app, hold.arrivals, hold.spans
            )
            fresh = [  # its own spans decided at once: the item as the outcome says
                it
                for span, outcome, text in decided
                if not text and outcome in ("own", "full")
                for it in items_of(hold.blobs[span], "own" if outcome == "own" else "expired")
            ]
            if fresh:
                await self.write(fresh)
            leased = [d for d in decided if d[2]]
            await self.settle(hold.app, leased, Counter(o for _, o, _ in decided))

    async def settle(
        self, app: str, leased: list[tuple[str, str, str]], outcomes: Counter[str]
    ) -> None:
        """Store the items of the held spans leased to this process, then let them go; a
        failed write leaves them to their lease."""
        self.count(outcomes)
        items = [it for _, outcome, text in leased for it in items_of(text, outcome)]
        try:
            if items:
                await self.write(items)
            if leased:
                await asyncio.to_thread(self.store.holds.done, app, [s for s, _, _ in leased])
        except Exception as exc:  # noqa: BLE001 - claimed again once their lease ends
            why = " ".join(str(exc).split()) or type(exc).__name__
            self.log.warning("hold", "held spans of %r not stored yet (retried): %s", app, why)

    async def sweep(self) -> None:
        """Claim every app's spans past their hold, and store them."""
        for app in await asyncio.to_thread(self.store.holds.due_apps):
            decided = await asyncio.to_thread(self.store.holds.admit, app)
            leased = [d for d in decided if d[2]]
            await self.settle(app, leased, Counter(o for _, o, _ in decided))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ragmon-otlp-hold")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await self.sweep()
            except Exception as exc:  # noqa: BLE001 - Redis down: the next sweep
                why = " ".join(str(exc).split()) or type(exc).__name__
                self.log.warning("hold", "could not sweep the held spans: %s", why)
