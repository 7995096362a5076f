"""The ingest write: new events, their apps' pending sets and the queue limit in one Lua call
(`scripts.INGEST`), for a micro-batch of requests.

Each request is refused whole when one of the apps it adds events to already holds
RAGMON_QUEUE_LIMIT pending events (`AppAtLimit`), so one app's backlog never refuses another
app's events. The call also says whether a drain job must be enqueued (none waits); the caller
does that after answering (`Store.ingest` at once, the API's writer after its 202s).
`AsyncIngest` runs the same call on redis.asyncio, so the API's event loop never waits for a
thread hop per batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import redis.asyncio

from ragmon.core.signals import SIGNALS
from ragmon.core.wire import SEP
from ragmon.store import scripts
from ragmon.store.failures import NotReplicated
from ragmon.store.fields import Slot
from ragmon.store.keys import DAY_TTL_S, OTHER, QUERIES_TTL_S, fold
from ragmon.store.ledger import Ledger, entry_bytes
from ragmon.store.records import result_ttl_s

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store.keys import Keys
    from ragmon.store.records import IngestItem

Answer = tuple[str, bool]
DRAIN_WANTED_TTL_S = 60  # a drain job enqueued but never started is enqueued again after this


@dataclass(frozen=True)
class AppAtLimit:
    """An event's request was refused: `app` holds `limit` pending events (RAGMON_QUEUE_LIMIT)."""

    app: str
    limit: int

    @property
    def message(self) -> str:
        return (
            f"app {self.app!r} has {self.limit:,} events waiting to be judged, its queue limit "
            f"(RAGMON_QUEUE_LIMIT={self.limit}); retry later"
        )


Outcome = Answer | AppAtLimit


@dataclass
class Written:
    """What one ingest call did: per item its answer or its refusal, and whether the caller
    must enqueue a drain job."""

    outcomes: list[Outcome]
    wake: bool

    def request(self, start: int, end: int) -> list[Answer] | AppAtLimit:
        """The answers of the request holding items `start:end`, or its refusal."""
        part = self.outcomes[start:end]
        refused = next((o for o in part if isinstance(o, AppAtLimit)), None)
        return (
            refused if refused is not None else [o for o in part if not isinstance(o, AppAtLimit)]
        )


@dataclass
class IngestPlan:
    """The script's keys and arguments for `items` (requests of `sizes` items each, in order),
    and how to read its reply back."""

    items: Sequence[IngestItem]
    limit: int
    order: list[int] = field(default_factory=list)  # item index of each event key
    dups: list[tuple[int, int]] = field(default_factory=list)  # (item, its first occurrence)
    keys: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)

    def settle(self, reply: Sequence[Any]) -> Written:
        out: list[Outcome | None] = [None] * len(self.items)
        for i, r in zip(self.order, reply, strict=False):
            if isinstance(r, bytes | str):
                out[i] = (r.decode() if isinstance(r, bytes) else r, False)
            elif isinstance(r, list):
                app = r[1].decode() if isinstance(r[1], bytes) else str(r[1])
                out[i] = AppAtLimit(app, self.limit)
            else:
                out[i] = (self.items[i].status, True)
        for i, first in self.dups:
            was = out[first]
            out[i] = was if isinstance(was, AppAtLimit) else (self.items[first].status, False)
        wake = bool(reply[len(self.order)]) if len(reply) > len(self.order) else False
        return Written([o for o in out if o is not None], wake)


def plan_ingest(
    keys: Keys,
    settings: Settings,
    items: Sequence[IngestItem],
    deadline: float = 0.0,
    sizes: Sequence[int] | None = None,
    setup: SignalSetup | None = None,
) -> IngestPlan:
    """INGEST's call for `items`, sent as requests of `sizes` items (default: one request).
    Past `deadline` (unix seconds by Redis' clock; 0: none) the script writes nothing. Items
    with signals are grouped by series and day: the script sums a group's and writes it once.
    `setup`: `signal_setup(keys, settings)`, which a caller that writes often builds once."""
    s, k = settings, keys
    limit = s.queue_limit
    plan = IngestPlan(items, limit)
    setup = setup or signal_setup(k, s)
    first: dict[str, int] = {}
    slots: dict[str, int] = {}
    groups: dict[tuple[str, str], int] = {}
    per_request: list[int] = []
    events: list[str] = []
    tail: list[Any] = []
    start = 0
    received = time.time()
    for size in sizes if sizes is not None else [len(items)]:
        n = 0
        for i in range(start, start + size):
            it = items[i]
            if it.ref in first:
                plan.dups.append((i, first[it.ref]))
                continue
            first[it.ref] = i
            plan.order.append(i)
            slot = 0 if it.sampled_out else slots.setdefault(it.app, len(slots) + 1)
            group = groups.setdefault((it.series, it.day), len(groups) + 1) if it.signals else 0
            events.append(k.event(it.ref))
            body = kept(it)
            nbytes = entry_bytes(events[-1], body, it.status, str(received))
            tail += [it.ref, body, it.status, received, slot, group, it.signals, nbytes]
            n += 1
        per_request.append(n)
        start += size
    if not events:
        return plan
    apps = list(slots)
    ledger_keys, ledger_args = Ledger(None, k, s).slots(scripts.INGEST_KINDS, received)
    call = scripts.INGEST.call(
        keys={"counters": k.counters, "apps": k.pending_apps, "vt": k.virtual_time,
              "wake": k.drain_wanted, "series": k.series, "series_per_app": k.series_per_app,
              "hist": k.hist, **ledger_keys},
        args={"ttl": result_ttl_s(settings), "idem_ttl": s.idempotency_s, "deadline": deadline,
              "limit": limit, "n_events": len(events), "wake_ttl": DRAIN_WANTED_TTL_S,
              "n_groups": len(groups), **setup.args, **ledger_args},
        lists=setup.lists,
        more_keys=[*events, *(k.pending(app) for app in apps)],
        more_args=[*tail, *apps, *(x for g in groups for x in g), *per_request],
    )  # fmt: skip
    plan.keys, plan.args = call
    return plan


class SignalSetup(NamedTuple):
    """INGEST's named arguments and lists for the signals, the same for every call of a
    deployment (the store builds them once)."""

    args: dict[str, Any]
    lists: dict[str, list[Any]]


def signal_setup(keys: Keys, settings: Settings) -> SignalSetup:
    """Each signal's histogram (its `Metric.key`) and 1 when it keeps a sum of squares, the
    per-day keys and their TTLs, the series budget, and how a series past it is folded (as
    `keys.fold`)."""
    return SignalSetup(
        {
            "day_hist": keys.day_hist(Slot.DAY),
            "day_counters": keys.day_counters(Slot.DAY),
            "queries": keys.day_queries(Slot.DAY, Slot.SERIES),
            "day_ttl": DAY_TTL_S,
            "queries_ttl": QUERIES_TTL_S,
            "results": [s.key for s in SIGNALS].index("results") + 1,
            "empty_queries": keys.day_empty_queries(Slot.DAY, Slot.SERIES),
            "max_series": settings.max_series,
            "max_series_per_app": settings.max_series_per_app,
            "fold_tail": fold("")[0].removeprefix(SEP),
            "orphan": fold(OTHER)[0],
        },
        {
            "hists": [f"signal_{s.key}" for s in SIGNALS],
            "squares": [int(s.sum_squares) for s in SIGNALS],
        },
    )


def kept(item: IngestItem) -> str:
    """What an event's key keeps: its payload, or a sampled-out event's `sampled_result`."""
    return sampled_result(item.probability) if item.sampled_out else item.payload


def sampled_result(probability: float) -> str:
    """What a sampled-out event keeps in place of its payload: the probability with which it
    was chosen for judging (GET shows it; every weighted mean counts the event through it)."""
    return json.dumps({"inclusion_probability": probability})


class AsyncIngest:
    """`Store.ingest` on redis.asyncio, bound to the event loop that created it."""

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, settings: Settings) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self._script = client.register_script(scripts.INGEST.source)
        self._setup = signal_setup(keys, settings)

    async def write(
        self, items: Sequence[IngestItem], deadline: float = 0.0, sizes: Sequence[int] | None = None
    ) -> Written:
        """Store items durably (requests of `sizes` items). Raises on Redis errors, and
        without writing anything when Redis runs the write past `deadline`."""
        plan = plan_ingest(self.keys, self.settings, items, deadline, sizes, self._setup)
        reply = await self._script(keys=plan.keys, args=plan.args) if plan.keys else []
        written = plan.settle(reply)
        if plan.keys and self.settings.wait_replicas:
            s = self.settings
            replicated(int(await self.client.wait(s.wait_replicas, s.wait_timeout_ms)), s)
        return written

    async def aclose(self) -> None:
        await self.client.aclose()


def replicated(acked: int, settings: Settings) -> None:
    """Raise `NotReplicated` when fewer replicas than RAGMON_WAIT_REPLICAS acknowledged a
    write (`WAIT`'s answer: `acked`)."""
    if acked < settings.wait_replicas:
        raise NotReplicated(acked, settings.wait_replicas, settings.wait_timeout_ms)


def texts(raw: Any) -> list[str]:
    """Redis replies (bytes) as strings."""
    return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]
