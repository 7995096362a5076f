"""The ingest fast path: new events and their RQ jobs in one round trip (`scripts.INGEST_JOBS`).

`Store.ingest` once read every status, then wrote events and jobs in a second transaction.
Here one Lua call decides per job which events are new and writes the events together with
the job's own commands (recorded from RQ's `enqueue_many`, so the job is exactly what RQ
writes). A job whose events are partly known already (a retried batch mixed with new events)
is left untouched by the script and goes through `Store.ingest_exact`, the two-step path.
`AsyncIngest` runs the same call on redis.asyncio, so the API's event loop never waits for a
thread hop per batch.

Grouping window (RAGMON_GROUP_WINDOW_S): with `defer`, a write's last, partial job is not
enqueued; its events are stored with their refs in `Keys.ungrouped` instead (same atomic
call), and the API process later turns them into one job with the events of later writes
(`scripts.GROUP`, all or nothing). Single events posted one by one then share jobs as batches
do, instead of costing a work horse each. A process that dies holding refs leaves them in the
zset, where `Grouping.sweep` (API writers and workers' maintenance) finds them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis.asyncio

from monitor.store import scripts

if TYPE_CHECKING:
    from monitor.store import IngestItem, Store

Answer = tuple[str, bool]
BUSY_WINDOW_S = 5.0  # how long a group may keep filling while RQ jobs wait for a worker
SWEEP_AGE_S = BUSY_WINDOW_S + 10.0  # ungrouped refs older than this belong to no live writer


@dataclass
class IngestPlan:
    """The script's keys and arguments for `items`, and how to read its reply back."""

    items: Sequence[IngestItem]
    order: list[int] = field(default_factory=list)  # item index of each event key
    dups: list[tuple[int, int]] = field(default_factory=list)  # (item, its first occurrence)
    keys: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)  # items left to the grouping window

    def created_deferred(self, out: Sequence[Answer | None]) -> list[str]:
        """Refs of the events this write created and left to the grouping window."""
        return [self.items[i].ref for i in self.deferred if (a := out[i]) is not None and a[1]]

    def settle(self, reply: Sequence[Any]) -> tuple[list[Answer | None], list[int]]:
        """Answers per item, and the items the exact path must take (None answers)."""
        out: list[Answer | None] = [None] * len(self.items)
        redo: list[int] = []
        for i, r in zip(self.order, reply, strict=True):
            if isinstance(r, bytes | str):
                out[i] = (r.decode() if isinstance(r, bytes) else r, False)
            elif r == 1:
                out[i] = (self.items[i].status, True)
            else:
                redo.append(i)
        for i, first in self.dups:
            out[i] = (self.items[first].status, False)
        return out, redo


def plan_ingest(
    store: Store, items: Sequence[IngestItem], deadline: float = 0.0, defer: bool = False
) -> IngestPlan:
    """Group the new ids into jobs of RAGMON_JOB_BATCH_SIZE; sampled-out ones get no job.
    Past `deadline` (unix seconds by Redis' clock; 0: none) the script writes nothing.
    With `defer`, the last job, when not full, is left to the grouping window."""
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
    now = time.time()
    chunks = [judged[j : j + size] for j in range(0, len(judged), size)]
    groups: list[tuple[list[int], list[tuple]]] = []
    for chunk in chunks:
        refs = [items[i].ref for i in chunk]
        if defer and len(chunk) < size:
            plan.deferred = chunk
            wait = [x for ref in refs for x in (now, ref)]
            groups.append((chunk, [("ZADD", store.keys.ungrouped, *wait)]))
        else:
            groups.append((chunk, store.jobs.commands(refs)))
    if sampled:
        groups.append((sampled, []))
    plan.args += [store.result_ttl_s, deadline]
    for chunk, _ in groups:
        for i in chunk:
            it = items[i]
            plan.order.append(i)
            plan.keys.append(store.keys.event(it.ref))
            plan.args += [it.payload, it.status, now]
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
        self._group = client.register_script(scripts.GROUP)
        self._expired_claims = client.register_script(scripts.EXPIRED_CLAIMS)

    async def __call__(self, items: Sequence[IngestItem], deadline: float = 0.0) -> list[Answer]:
        """Store items durably; `(status, created)` per item. Raises on Redis errors, and
        without writing anything when Redis runs the write past `deadline`."""
        return (await self.write(items, deadline))[0]

    async def write(
        self, items: Sequence[IngestItem], deadline: float = 0.0, defer: bool = False
    ) -> tuple[list[Answer], list[str]]:
        """`__call__`, and the refs left to the grouping window (only with `defer`)."""
        plan = plan_ingest(self.store, items, deadline, defer)
        reply = await self._script(keys=plan.keys, args=plan.args) if plan.keys else []
        out, redo = plan.settle(reply)
        if redo:  # rare: a job mixing known and new ids
            redone = [items[i] for i in redo]
            again = await asyncio.to_thread(self.store.ingest_exact, redone, deadline)
            for i, answer in zip(redo, again, strict=True):
                out[i] = answer
        return [o for o in out if o is not None], plan.created_deferred(out)

    async def group(self, refs: Sequence[str]) -> int:
        """`Grouping.group` on redis.asyncio (the same steps, `grouping_steps`)."""
        steps = grouping_steps(self.store, refs)
        try:
            args = next(steps)
            while True:
                reply = await self._group(keys=[self.store.keys.ungrouped], args=args)
                args = steps.send(reply)
        except StopIteration as end:
            return int(end.value)

    async def stale(self, age_s: float, limit: int = 1000) -> list[str]:
        """Refs waiting in the grouping window for more than `age_s` (their writer is gone), and
        claims whose lease ended (their work horse is gone)."""
        keys = self.store.keys
        await self._expired_claims(keys=[keys.claimed, keys.ungrouped], args=[time.time()])
        raw = await self.client.zrangebyscore(
            self.store.keys.ungrouped, "-inf", time.time() - age_s, start=0, num=limit
        )
        return texts(raw)

    async def aclose(self) -> None:
        await self.client.aclose()


def grouping_steps(store: Store, refs: Sequence[str]) -> Generator[list[Any], Any, int]:
    """How waiting events become RQ jobs, without I/O: yields the arguments of each GROUP call
    and is sent its reply; returns how many events this caller grouped. A job's worth at a time;
    refs another process grouped meanwhile are dropped and the rest tried again. The sync
    (`Grouping.group`) and async (`AsyncIngest.group`) callers only run the calls."""
    done = 0
    size = store.settings.job_batch_size
    for chunk in (list(refs[i : i + size]) for i in range(0, len(refs), size)):
        while chunk:
            reply = yield group_args(store, chunk)
            if reply == 1:
                done += len(chunk)
                break
            chunk = texts(reply)  # some were grouped by another process: the rest
    return done


def group_args(store: Store, refs: Sequence[str]) -> list[Any]:
    """`scripts.GROUP`'s arguments: the refs, then the commands of their one RQ job."""
    args: list[Any] = [len(refs), *refs]
    for command in store.jobs.commands(refs):
        args += [len(command), *command]
    return args


def texts(raw: Any) -> list[str]:
    """Redis replies (bytes) as strings."""
    return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]
