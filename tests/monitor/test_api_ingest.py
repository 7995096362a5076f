"""The API's batched writer (`monitor.api.ingest.IngestWriter`) on a real Redis."""

from __future__ import annotations

import asyncio

from monitor.api.ingest import IngestWriter
from monitor.settings import Settings
from monitor.store import Store


def test_stop_right_after_a_count_returns(settings: Settings) -> None:
    """A count wakes the writer as `stop()` cancels it: both reach its task together, and
    `asyncio.wait_for` on Python 3.11 dropped the cancellation, so `stop()` waited forever."""
    store = Store.connect(settings)

    async def go() -> None:
        writer = IngestWriter(store)
        await writer.start()
        await asyncio.sleep(0)  # the writer's task is waiting for work
        writer.reject("invalid", 2)
        stopping = asyncio.ensure_future(writer.stop())
        done, _ = await asyncio.wait({stopping}, timeout=30)  # a guard against a hang
        assert done, "IngestWriter.stop() did not return"

    try:
        asyncio.run(go())
    finally:
        store.close()
