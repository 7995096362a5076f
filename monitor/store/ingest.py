"""The ingest fast path: new events and their RQ jobs in one round trip (`scripts.INGEST_JOBS`).

`Store.ingest` once read every status, then wrote events and jobs in a second transaction.
Here one Lua call decides per job which events are new and writes the events together with
the job's own commands (recorded from RQ's `enqueue_many`, so the job is exactly what RQ
writes). A job whose events are partly known already (a retried batch mixed with new events)
is left untouched by the script and goes through `Store.ingest_exact`, the two-step path.
`AsyncIngest` runs the same call on redis.asyncio, so the API's event loop never waits for a
thread hop per batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis.asyncio

from monitor.store import scripts

if TYPE_CHECKING:
    from monitor.store import IngestItem, Store

Answer = tuple[str, bool]


def status_of(item: IngestItem) -> str:
    return "sampled_out" if item.sampled_out else "queued"


@dataclass
class IngestPlan:
    """The script's keys and arguments for `items`, and how to read its reply back."""

    items: Sequence[IngestItem]
    order: list[int] = field(default_factory=list)  # item index of each event key
    dups: list[tuple[int, int]] = field(default_factory=list)  # (item, its first occurrence)
    keys: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)

    def settle(self, reply: Sequence[Any]) -> tuple[list[Answer | None], list[int]]:
        """Answers per item, and the items the exact path must take (None answers)."""
        out: list[Answer | None] = [None] * len(self.items)
        redo: list[int] = []
        for i, r in zip(self.order, reply, strict=True):
            if isinstance(r, bytes | str):
                out[i] = (r.decode() if isinstance(r, bytes) else r, False)
            elif r == 1:
                out[i] = (status_of(self.items[i]), True)
            else:
                redo.append(i)
        for i, first in self.dups:
            out[i] = (status_of(self.items[first]), False)
        return out, redo


def plan_ingest(store: Store, items: Sequence[IngestItem], deadline: float = 0.0) -> IngestPlan:
    """Group the new ids into jobs of RAGMON_JOB_BATCH_SIZE; sampled-out ones get no job.
    Past `deadline` (unix seconds by Redis' clock; 0: none) the script writes nothing."""
    plan = IngestPlan(items)
    first: dict[str, int] = {}
    judged: list[int] = []
    sampled: list[int] = []
    for i, it in enumerate(items):
        if it.ref in first:
            plan.dups.append((i, first[it.ref]))
            continue
        first[it.ref] = i
        (sampled if it.sampled_out else judged).append(i)
    size = store.settings.job_batch_size
    groups: list[tuple[list[int], list[tuple]]] = [
        (chunk, store.jobs.commands([items[i].ref for i in chunk]))
        for chunk in (judged[j : j + size] for j in range(0, len(judged), size))
    ]
    if sampled:
        groups.append((sampled, []))
    now = time.time()
    plan.args += [store.result_ttl_s, deadline]
    for chunk, _ in groups:
        for i in chunk:
            it = items[i]
            plan.order.append(i)
            plan.keys.append(store.keys.event(it.ref))
            plan.args += [it.payload, status_of(it), now]
    for chunk, commands in groups:
        plan.args += [len(chunk), len(commands)]
        for command in commands:
            plan.args.append(len(command))
            plan.args += command
    if plan.keys:
        plan.keys.append(store.keys.counters)
    return plan


class AsyncIngest:
    """`Store.ingest` on redis.asyncio, bound to the event loop that created it."""

    def __init__(self, store: Store, client: redis.asyncio.Redis) -> None:
        self.store = store
        self.client = client
        self._script = client.register_script(scripts.INGEST_JOBS)

    async def __call__(self, items: Sequence[IngestItem], deadline: float = 0.0) -> list[Answer]:
        """Store items durably; `(status, created)` per item. Raises on Redis errors, and
        without writing anything when Redis runs the write past `deadline`."""
        plan = plan_ingest(self.store, items, deadline)
        reply = await self._script(keys=plan.keys, args=plan.args) if plan.keys else []
        out, redo = plan.settle(reply)
        if redo:  # rare: a job mixing known and new ids
            redone = [items[i] for i in redo]
            again = await asyncio.to_thread(self.store.ingest_exact, redone, deadline)
            for i, answer in zip(redo, again, strict=True):
                out[i] = answer
        return [o for o in out if o is not None]

    async def aclose(self) -> None:
        await self.client.aclose()
