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

from ragmon.store import scripts
from ragmon.store.protocol import Call, Script

if TYPE_CHECKING:
    from ragmon.store import IngestItem, Store

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
    events: list[str] = []
    tail: list[Any] = []
    for chunk, _ in groups:
        for i in chunk:
            it = items[i]
            plan.order.append(i)
            events.append(store.keys.event(it.ref))
            tail += [it.payload, it.status, now]
    for chunk, commands in groups:
        tail += [len(chunk), len(commands)]
        for command in commands:
            tail += [len(command), *command]
    if events:
        plan.keys, plan.args = create_call(scripts.INGEST_JOBS, store, deadline, events, tail)
    return plan


def create_call(
    script: Script, store: Store, deadline: float, events: list[str], tail: list[Any]
) -> Call:
    """The arguments of INGEST or INGEST_JOBS: `events` are the event keys, `tail` their
    (payload, status, received_at) triples, then INGEST_JOBS's groups."""
    return script.call(
        keys={"counters": store.keys.counters},
        args={"ttl": store.result_ttl_s, "deadline": deadline},
        more_keys=events,
        more_args=tail,
    )


def ingest_exact(
    store: Store, script: redis.commands.core.Script, items: Sequence[IngestItem], deadline: float
) -> list[Answer]:
    """`Store.ingest_exact`, run with its registered INGEST `script`."""
    existing = store.statuses([it.ref for it in items])
    out: list[Answer | None] = [None] * len(items)
    new: dict[str, int] = {}
    for i, (it, st) in enumerate(zip(items, existing, strict=True)):
        if st is not None:
            out[i] = (st, False)
        elif it.ref in new:
            first = items[new[it.ref]]
            out[i] = (first.status, False)
        else:
            new[it.ref] = i
    if new:
        fresh = [items[i] for i in new.values()]
        events = [store.keys.event(it.ref) for it in fresh]
        tail = [x for it in fresh for x in (it.payload, it.status, time.time())]
        call = create_call(scripts.INGEST, store, deadline, events, tail)
        to_judge = [it.ref for it in fresh if not it.sampled_out]
        with store.client.pipeline(transaction=True) as pipe:
            script(keys=call.keys, args=call.args, client=pipe)
            if to_judge:
                store.jobs.enqueue(to_judge, pipe)
            created = pipe.execute()[0]
        for it, c in zip(fresh, created, strict=True):
            out[new[it.ref]] = (it.status, bool(c))
    return [o for o in out if o is not None]


class AsyncIngest:
    """`Store.ingest` on redis.asyncio, bound to the event loop that created it."""

    def __init__(self, store: Store, client: redis.asyncio.Redis) -> None:
        self.store = store
        self.client = client
        self._script = client.register_script(scripts.INGEST_JOBS.source)
        self._group = client.register_script(scripts.GROUP.source)
        self._expired_claims = client.register_script(scripts.EXPIRED_CLAIMS.source)

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
            call = next(steps)
            while True:
                call = steps.send(await self._group(keys=call.keys, args=call.args))
        except StopIteration as end:
            return int(end.value)

    async def waiting(self, refs: Sequence[str]) -> list[tuple[str, float]]:
        """Those of `refs` still in the grouping window, with when each arrived (epoch s): a
        running job may have claimed the others."""
        scores = await self.client.zmscore(self.store.keys.ungrouped, list(refs))
        return [(ref, s) for ref, s in zip(refs, scores, strict=True) if s is not None]

    async def stale(self, age_s: float, limit: int = 1000) -> list[str]:
        """Refs waiting in the grouping window for more than `age_s` (their writer is gone), and
        claims whose lease ended (their work horse is gone)."""
        call = expired_claims_call(self.store, time.time())
        await self._expired_claims(keys=call.keys, args=call.args)
        raw = await self.client.zrangebyscore(
            self.store.keys.ungrouped, "-inf", time.time() - age_s, start=0, num=limit
        )
        return texts(raw)

    async def aclose(self) -> None:
        await self.client.aclose()


def grouping_steps(store: Store, refs: Sequence[str]) -> Generator[Call, Any, int]:
    """How waiting events become RQ jobs, without I/O: yields each GROUP call
    and is sent its reply; returns how many events this caller grouped. A job's worth at a time;
    refs another process grouped meanwhile are dropped and the rest tried again. The sync
    (`Grouping.group`) and async (`AsyncIngest.group`) callers only run the calls."""
    done = 0
    size = store.settings.job_batch_size
    for chunk in (list(refs[i : i + size]) for i in range(0, len(refs), size)):
        while chunk:
            reply = yield group_call(store, chunk)
            if reply == 1:
                done += len(chunk)
                break
            chunk = texts(reply)  # some were grouped by another process: the rest
    return done


def group_call(store: Store, refs: Sequence[str]) -> Call:
    """`scripts.GROUP` for the refs and the commands of their one RQ job."""
    commands: list[Any] = []
    for command in store.jobs.commands(refs):
        commands += [len(command), *command]
    return scripts.GROUP.call(
        keys={"ungrouped": store.keys.ungrouped},
        args={"n_refs": len(refs)},
        more_args=[*refs, *commands],
    )


def expired_claims_call(store: Store, now: float) -> Call:
    """`scripts.EXPIRED_CLAIMS`: the claims whose lease ended by `now` go back to the window."""
    return scripts.EXPIRED_CLAIMS.call(
        keys={"claimed": store.keys.claimed, "ungrouped": store.keys.ungrouped},
        args={"now": now},
    )


def texts(raw: Any) -> list[str]:
    """Redis replies (bytes) as strings."""
    return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]
