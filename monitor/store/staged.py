"""A large request written in short calls, so that no other app's write waits in Redis for one
long script: its new events are staged a chunk at a time (`scripts.STAGE`: each event into a key
of its own that expires, its signals summed), then one `scripts.COMMIT` makes them all events at
once, or none. So "a 503 stores nothing" holds as for a single INGEST: a write that fails or
times out between chunks, or whose commit Redis runs past the deadline, leaves only staged keys,
which expire; a retry stages again.

What the commit refuses: an app at RAGMON_QUEUE_LIMIT (`AppAtLimit`, nothing written), and an
event of the request stored by another write between its staging and the commit (a `STAGED`
error: the request is answered 503, nothing written; its retry finds the event and answers its
status). Staging admits the groups' series into the series budget, as if seen: the only trace
a refused write leaves.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragmon.store import scripts
from ragmon.store.ingest import (
    DRAIN_WANTED_TTL_S,
    AppAtLimit,
    Outcome,
    Written,
    kept,
    replicated,
    texts,
)
from ragmon.store.ledger import Ledger, entry_bytes
from ragmon.store.records import result_ttl_s

if TYPE_CHECKING:
    import redis

    from ragmon.settings import Settings
    from ragmon.store.ingest import SignalSetup
    from ragmon.store.keys import Keys
    from ragmon.store.records import IngestItem

CHUNK_EVENTS = 100  # events per STAGE call: each is a short script


class StagedWrite:
    """STAGE and COMMIT for one large request, on the sync client (the API runs a write in a
    thread: building and reading its calls never holds the event loop for long)."""

    def __init__(
        self, client: redis.Redis, keys: Keys, settings: Settings, setup: SignalSetup
    ) -> None:
        self.client, self.keys, self.settings, self._setup = client, keys, settings, setup
        self._stage = client.register_script(scripts.STAGE.source)
        self._commit = client.register_script(scripts.COMMIT.source)

    def write(self, items: Sequence[IngestItem], deadline: float) -> Written:
        """Store one request's items: per item its answer as `Store.ingest`'s, or its refusal.
        Raises on Redis errors, past `deadline` (unix seconds by Redis' clock; 0: none) and when
        an event was stored by another write meanwhile, with nothing of the request stored."""
        s, write, received = self.settings, uuid.uuid4().hex, time.time()
        first: dict[str, int] = {}
        for i, it in enumerate(items):
            first.setdefault(it.ref, i)
        unique = sorted(first.values())
        stored: dict[int, str] = {}
        staged: list[int] = []
        sums: list[Any] = []
        for start in range(0, len(unique), CHUNK_EVENTS):
            if deadline and time.time() > deadline:
                raise TimeoutError("the write's deadline passed while staging it")
            part = unique[start : start + CHUNK_EVENTS]
            reply = self._stage(*self._stage_call(write, items, part, received))
            for i, r in zip(part, reply, strict=False):
                if isinstance(r, int):
                    staged.append(i)
                else:
                    stored[i] = texts([r])[0]
            sums += reply[len(part) :]
        wake = False
        if staged:
            call = self._commit_call(write, items, staged, sums, received, deadline)
            reply = self._commit(*call)
            if reply[0] == -2:
                refused = AppAtLimit(texts(reply[1:])[0], s.queue_limit)
                return Written([refused] * len(items), False)
            wake = bool(reply[1])
            if s.wait_replicas:
                replicated(self.client.wait(s.wait_replicas, s.wait_timeout_ms), s)
        created = set(staged)
        out: list[Outcome] = []
        for i, it in enumerate(items):
            if i in created:
                out.append((it.status, True))
            elif i in stored:
                out.append((stored[i], False))
            else:  # a repeat of an earlier item of the request
                out.append((items[first[it.ref]].status, False))
        return Written(out, wake)

    def _stage_call(
        self, write: str, items: Sequence[IngestItem], part: list[int], received: float
    ) -> tuple[list[str], list[Any]]:
        k = self.keys
        groups: dict[tuple[str, str], int] = {}
        events: list[str] = []
        tail: list[Any] = []
        for i in part:
            it = items[i]
            group = groups.setdefault((it.series, it.day), len(groups) + 1) if it.signals else 0
            events += [k.event(it.ref), k.staged(write, i)]
            tail += [kept(it), it.status, received, group, it.signals]
        call = scripts.STAGE.call(
            keys={"series": k.series, "series_per_app": k.series_per_app,
                  "counters": k.counters},
            args={"stage_ttl": math.ceil(2 * self.settings.store_timeout_s) + 1,
                  "n_events": len(part), "n_groups": len(groups),
                  **{a: self._setup.args[a] for a in scripts.SUM_ARGS}},
            more_keys=events,
            more_args=[*tail, *(x for g in groups for x in g)],
        )  # fmt: skip
        return call.keys, call.args

    def _commit_call(
        self,
        write: str,
        items: Sequence[IngestItem],
        staged: list[int],
        sums: list[Any],
        received: float,
        deadline: float,
    ) -> tuple[list[str], list[Any]]:
        k, s = self.keys, self.settings
        slots: dict[str, int] = {}
        events: list[str] = []
        tail: list[Any] = []
        for i in staged:
            it = items[i]
            slot = 0 if it.sampled_out else slots.setdefault(it.app, len(slots) + 1)
            events += [k.event(it.ref), k.staged(write, i)]
            nbytes = entry_bytes(k.event(it.ref), kept(it), it.status, str(received))
            tail += [it.ref, slot, nbytes]
        ledger_keys, ledger_args = Ledger(None, k, s).slots(scripts.INGEST_KINDS, received)
        call = scripts.COMMIT.call(
            keys={"counters": k.counters, "apps": k.pending_apps, "vt": k.virtual_time,
                  "wake": k.drain_wanted, "hist": k.hist, **ledger_keys},
            args={"ttl": result_ttl_s(s), "idem_ttl": s.idempotency_s,
                  "deadline": deadline, "limit": s.queue_limit,
                  "wake_ttl": DRAIN_WANTED_TTL_S, "n_events": len(staged),
                  **{a: self._setup.args[a] for a in scripts.WRITE_ARGS}, **ledger_args},
            lists=self._setup.lists,
            more_keys=[*events, *(k.pending(app) for app in slots)],
            more_args=[*tail, *slots, *sums],
        )  # fmt: skip
        return call.keys, call.args
