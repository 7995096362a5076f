"""The delivery path's Redis side: pending events per app, leases, the one way back.

An accepted event to judge waits in its app's pending set (`Keys.pending`, written by
`scripts.INGEST`); a drain job claims events from the apps in turn (`scripts.CLAIM`, stride
scheduling weighted by RAGMON_APP_SHARES) under a lease (`Keys.leased`), renews it while it
judges, and ends each with FINISH, FAIL or RETRY. A lease that ends (its work horse died) puts
its event back at the next claim. States and arrows: CONTRIBUTING.md ("The delivery path").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import redis

from ragmon.core.wire import split_ref
from ragmon.store import scripts
from ragmon.store.ingest import DRAIN_WANTED_TTL_S, texts
from ragmon.store.keys import Keys
from ragmon.store.records import failed_result
from ragmon.store.rq_jobs import DrainJobs

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store.apart import PassageRetries

LEASE_S = 30.0  # a claimed event comes back this long after its drain job stopped renewing
RETRY_DELAYS_S = (10, 30, 120, 600, 1800)  # after a passing judge failure, by attempt
MAX_ATTEMPTS = len(RETRY_DELAYS_S) + 1  # claims of one event before it is failed
# From this claim on (the first try and one retry, RETRY_DELAYS_S[0] later), a passage still
# failing for now no longer holds its event back from the hourly alert windows: the event is
# measured with it unjudged under its reason, once, and the passage is retried apart
# (`ragmon.store.apart`). One with nothing graded keeps its retries.
RELEASE_ATTEMPT = 2
DIED, UNAVAILABLE = "worker_died", "judge_unavailable"  # reasons of failed events (counters)


@dataclass(frozen=True)
class Claimed:
    """What one claim took: the refs, the end of their lease, and whether due events remain."""

    refs: list[str]
    lease_end: float
    left: bool


class Delivery:
    """`Store.delivery`: claim, renew, retry, requeue, and the drain jobs that do it."""

    def __init__(
        self, client: redis.Redis, keys: Keys, settings: Settings, apart: PassageRetries
    ) -> None:
        self.client = client
        self.apart = apart
        self.keys = keys
        self.jobs = DrainJobs(client, settings.queue_name)
        self._shares = [x for app, share in settings.app_shares.items() for x in (app, share)]
        self._claim = client.register_script(scripts.CLAIM.source)
        self._retry = client.register_script(scripts.RETRY.source)
        self._pending = client.register_script(scripts.PENDING.source)

    def claim(self, n: int, lease_s: float = LEASE_S) -> Claimed:
        """Take up to `n` due events, apps in turn, leased for `lease_s` (after putting back
        the events whose lease ended)."""
        k = self.keys
        call = scripts.CLAIM.call(
            keys={"leased": k.leased, "apps": k.pending_apps, "vt": k.virtual_time,
                  "counters": k.counters, "failed": k.failed},
            args={"limit": n, "lease_s": lease_s, "max_attempts": MAX_ATTEMPTS,
                  "event_key": k.event_template, "pending_key": k.pending_template, "died": DIED,
                  "died_result": failed_result(
                      f"{DIED}: its work horse died during each of its attempts")},
            lists={"shares": self._shares},
        )  # fmt: skip
        reply = cast(list[bytes], self._claim(keys=call.keys, args=call.args))
        return Claimed(texts(reply[2:]), float(reply[1]), bool(reply[0]))

    def renew(self, refs: Sequence[str], lease_s: float = LEASE_S) -> float:
        """Extend the lease of events still held; returns its new end."""
        end = time.time() + lease_s
        if refs:
            self.client.zadd(self.keys.leased, dict.fromkeys(refs, end), xx=True)
        return end

    def retry(self, ref: str, lease_end: float, error: str) -> int:
        """A passing judge failure: back to pending after the attempt's delay, or failed after
        the last; 1, 2, or 0 when the lease was no longer this caller's."""
        app = split_ref(ref)[0]
        k = self.keys
        call = scripts.RETRY.call(
            keys={"event": k.event(ref), "leased": k.leased, "pending": k.pending(app),
                  "apps": k.pending_apps, "vt": k.virtual_time, "counters": k.counters,
                  "failed": k.failed},
            args={"ref": ref, "app": app, "lease_end": lease_end, "error": error[:500],
                  "result": failed_result(f"{UNAVAILABLE}: {error}"), "reason": UNAVAILABLE},
            lists={"delays": RETRY_DELAYS_S},
        )  # fmt: skip
        return int(cast(int, self._retry(keys=call.keys, args=call.args)))

    def requeue(self, refs: Iterable[str]) -> int:
        """Failed events back to pending, queued again with their attempts reset (a thousand
        per call: one call blocks Redis while it runs)."""
        todo = list(refs)
        return sum(self._to_pending(todo[i : i + 1000]) for i in range(0, len(todo), 1000))

    def _to_pending(self, refs: list[str]) -> int:
        k = self.keys
        call = scripts.PENDING.call(
            keys={"apps": k.pending_apps, "vt": k.virtual_time, "leased": k.leased,
                  "failed": k.failed},
            args={"event_key": k.event_template, "pending_key": k.pending_template},
            more_args=refs,
        )  # fmt: skip
        return int(cast(int, self._pending(keys=call.keys, args=call.args)))

    # ---- waking drain jobs ------------------------------------------------------------------

    def started(self) -> None:
        """A drain job started: the next write with events to judge enqueues another."""
        self.client.delete(self.keys.drain_wanted)

    def wake(self) -> bool:
        """Enqueue a drain job unless one waits; True when this call enqueued it."""
        if not self.client.set(self.keys.drain_wanted, 1, nx=True, ex=DRAIN_WANTED_TTL_S):
            return False
        self.jobs.enqueue()
        return True

    def wake_if_idle(self) -> bool:
        """What a worker checks at each maintenance tick: enqueue a drain job when events are
        due (or leases ended) and RQ's queue holds no job at all. Moves no event."""
        if not self.due() or self.jobs.waiting():
            return False
        self.client.set(self.keys.drain_wanted, 1, ex=DRAIN_WANTED_TTL_S)
        self.jobs.enqueue()
        return True

    # ---- what waits ---------------------------------------------------------------------------

    def _apps(self) -> list[str]:
        return texts(self.client.zrange(self.keys.pending_apps, 0, -1))

    def due(self) -> bool:
        """Whether a claim now would find something: a due pending event, an ended lease, or
        a passage's retry apart."""
        now = time.time()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zcount(self.keys.leased, "-inf", now)
            for app in self._apps():
                pipe.zcount(self.keys.pending(app), "-inf", now)
            return any(int(n) for n in pipe.execute()) or self.apart.due()

    def counts(self) -> tuple[int, int]:
        """Events waiting to be judged (pending or leased, every app), and of those the ones
        waiting out a retry delay."""
        now = time.time()
        apps = self._apps()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zcard(self.keys.leased)
            for app in apps:
                pipe.zcard(self.keys.pending(app))
                pipe.zcount(self.keys.pending(app), f"({now}", "+inf")
            replies = [int(n) for n in pipe.execute()]
        return replies[0] + sum(replies[1::2]), sum(replies[2::2])

    def pending(self, app: str) -> int:
        """How many events of `app` wait in pending (what RAGMON_QUEUE_LIMIT counts)."""
        return int(self.client.zcard(self.keys.pending(app)))
