"""The API's batched writer (`ragmon.api.batcher.IngestWriter`) on a real Redis."""

from __future__ import annotations

import asyncio
import contextlib

from ragmon.api.batcher import IngestWriter, cancel
from ragmon.settings import Settings
from ragmon.store import Store


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


def test_cancel_repeats_a_cancellation_the_task_swallowed() -> None:
    """A task that loses its first cancellation (as one landing on a finished write does) still
    ends; an error it ends with reaches the caller."""

    async def swallows_once() -> str:
        with contextlib.suppress(asyncio.CancelledError):  # lost, as one racing a finished await
            await asyncio.sleep(60)
        await asyncio.sleep(60)
        return "not cancelled"

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    async def go() -> None:
        task = asyncio.ensure_future(swallows_once())
        await asyncio.sleep(0)
        stopping = asyncio.ensure_future(cancel(task))
        done, _ = await asyncio.wait({stopping}, timeout=30)  # a guard against a hang
        assert done and task.cancelled()
        failing = asyncio.ensure_future(fails_on_cancel())
        await asyncio.sleep(0)
        try:
            await cancel(failing)
        except RuntimeError as exc:
            assert str(exc) == "cleanup failed"
        else:
            raise AssertionError("the task's error was not raised")

    asyncio.run(go())
