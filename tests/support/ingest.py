"""Ingest writes for tests that need the grouping window's side of it without an API."""

from __future__ import annotations

import asyncio

from ragmon.store import IngestItem, Store


def write_deferred(store: Store, items: list[IngestItem]) -> tuple[list, list[str]]:
    """`AsyncIngest.write(items, defer=True)`, as the API makes it: (answers, deferred refs)."""

    async def run() -> tuple[list, list[str]]:
        ingest = store.async_ingest()
        assert ingest is not None
        try:
            return await ingest.write(items, defer=True)
        finally:
            await ingest.aclose()

    return asyncio.run(run())
