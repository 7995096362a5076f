"""The grouping window's Redis side: events posted one at a time wait in `Keys.ungrouped` until
one RQ job takes them (`group`), or a running job claims them under a lease (`claim`); `sweep`
turns what a dead API process or work horse left behind into RQ jobs. Why and how it holds:
docs/performance.md ("Trickle traffic").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragmon.store import scripts
from ragmon.store.ingest import expired_claims_call, grouping_steps, texts

if TYPE_CHECKING:
    from ragmon.store import Store


class Grouping:
    """`Store.grouping`: the ungrouped and claimed zsets of one deployment."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys
        self._group = store.client.register_script(scripts.GROUP.source)
        self._claim = store.client.register_script(scripts.CLAIM.source)
        self._expired_claims = store.client.register_script(scripts.EXPIRED_CLAIMS.source)

    def group(self, refs: Sequence[str]) -> int:
        """Enqueue the RQ jobs of events waiting in the grouping window, each event once: refs
        another process grouped meanwhile are left out. Returns how many this call grouped."""
        steps = grouping_steps(self.store, refs)
        try:
            call = next(steps)
            while True:
                call = steps.send(self._group(keys=call.keys, args=call.args))
        except StopIteration as end:
            return int(end.value)

    def claim(self, n: int, lease_s: float) -> list[str]:
        """Take up to `n` events waiting in the grouping window into the running job, leased for
        `lease_s` (renew with `renew`, end with `release`)."""
        call = scripts.CLAIM.call(
            keys={"ungrouped": self.keys.ungrouped, "claimed": self.keys.claimed},
            args={"limit": n, "lease_end": time.time() + lease_s},
        )
        return texts(self._claim(keys=call.keys, args=call.args))

    def renew(self, refs: Sequence[str], lease_s: float) -> None:
        if refs:
            end = time.time() + lease_s
            self.client.zadd(self.keys.claimed, dict.fromkeys(refs, end), xx=True)

    def release(self, refs: Sequence[str], retry: bool = False) -> None:
        """The job is done with these claims; `retry`: give them back, to be grouped into an
        RQ job at the next sweep (RQ's retries then apply)."""
        if not refs:
            return
        if retry:
            self.client.zadd(self.keys.claimed, dict.fromkeys(refs, 0), xx=True)
        else:
            self.client.zrem(self.keys.claimed, *refs)

    def sweep(self, age_s: float, limit: int = 10_000) -> int:
        """Group the events that waited more than `age_s` in the window (their API process
        died between the write and the grouping) or whose claim's lease ended (their work
        horse died); returns how many."""
        self.expire_claims()
        raw = self.client.zrangebyscore(
            self.keys.ungrouped, "-inf", time.time() - age_s, start=0, num=limit
        )
        return self.group(texts(raw)) if raw else 0

    def expire_claims(self) -> int:
        """Claims whose lease ended go back to the window, first in line for the sweep."""
        call = expired_claims_call(self.store, time.time())
        return int(self._expired_claims(keys=call.keys, args=call.args))
