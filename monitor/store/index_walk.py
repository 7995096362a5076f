"""Reading the explorer's index in order: a page of results, and the merge of the matching
series' index sets from the cursor on (`ExploreIndex.search`)."""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from functools import total_ordering
from typing import TYPE_CHECKING, Any

from ragmon.core.index_members import member_ref, row
from ragmon.core.search import Search, encode_cursor

if TYPE_CHECKING:
    from ragmon.store.event_index import ExploreIndex


@dataclass
class Page:
    """One page of a search: its events, the cursor to the next page (None at the end), how
    many records it read, and whether it stopped at the scan budget before filling up."""

    events: list[dict[str, Any]] = field(default_factory=list)
    cursor: str | None = None
    scanned: int = 0
    partial: bool = False

    def answer(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "next_cursor": self.cursor,
            "scanned": self.scanned,
            "partial": self.partial,
        }


@total_ordering
class _Desc:
    """A member that sorts backwards (heapq pops the greatest first)."""

    __slots__ = ("m",)

    def __init__(self, m: str) -> None:
        self.m = m

    def __lt__(self, other: _Desc) -> bool:
        return self.m > other.m

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.m == other.m


class Walk:
    """Merge the series' index sets in order from the cursor on, checking records in batches."""

    def __init__(
        self, ix: ExploreIndex, search: Search, series: list[str], now: float, budget: int
    ) -> None:
        self.ix, self.search, self.now, self.budget = ix, search, now, budget
        keys = ix.keys
        self.key = {
            s: keys.explore_time(s)
            if search.sort == "time"
            else keys.explore_measure(search.sort, s)
            for s in series
        }
        lo, hi = search.lex_range()
        self.bound = {s: (lo, hi) for s in series}
        self.pending: dict[str, list[str]] = {s: [] for s in series}
        self.done: set[str] = set()
        self.heap: list[tuple[Any, str]] = []
        self.chunk = min(500, max(64, 2 * search.limit))

    def _wrap(self, member: str) -> Any:
        return _Desc(member) if self.search.descending else member

    def _fill(self, series: list[str]) -> None:
        """Read the next chunk of each series' set (one round trip for all)."""
        if not series:
            return
        with self.ix.client.pipeline(transaction=False) as pipe:
            for s in series:
                lo, hi = self.bound[s]
                if self.search.descending:
                    pipe.zrevrangebylex(self.key[s], hi, lo, start=0, num=self.chunk)
                else:
                    pipe.zrangebylex(self.key[s], lo, hi, start=0, num=self.chunk)
            replies = pipe.execute()
        for s, got in zip(series, replies, strict=True):
            members = [m.decode() for m in got]
            if len(members) < self.chunk:
                self.done.add(s)
            if members:
                lo, hi = self.bound[s]
                last = "(" + members[-1]
                self.bound[s] = (lo, last) if self.search.descending else (last, hi)
                members.reverse()  # pop() takes the next in order
                self.pending[s] = members
                heapq.heappush(self.heap, (self._wrap(members[-1]), s))

    def run(self) -> Page:
        search, page = self.search, Page()
        self._fill(list(self.pending))
        last = None
        while self.heap and len(page.events) < search.limit:
            batch: list[tuple[str, str]] = []
            want = min(
                self.chunk,
                max(64, 2 * (search.limit - len(page.events))),
                self.budget - page.scanned,
            )
            refill: list[str] = []
            while self.heap and len(batch) < want and not refill:
                _, s = heapq.heappop(self.heap)
                member = self.pending[s].pop()
                batch.append((s, member))
                if self.pending[s]:
                    heapq.heappush(self.heap, (self._wrap(self.pending[s][-1]), s))
                elif s not in self.done:
                    refill.append(s)  # its next chunk may hold the next member in order
            with self.ix.client.pipeline(transaction=False) as pipe:
                for s, member in batch:
                    pipe.hget(self.ix.keys.explore_records(s), member_ref(member, search.sort))
                records = pipe.execute()
            for (s, member), raw in zip(batch, records, strict=True):
                page.scanned += 1
                last = member
                if raw is None:
                    continue
                rec = json.loads(raw)
                if search.record_matches(rec, self.now):
                    page.events.append(row(s, member_ref(member, search.sort), rec))
                    if len(page.events) == search.limit:
                        break
            if page.scanned >= self.budget and len(page.events) < search.limit:
                page.partial = True
                break
            self._fill(refill)
        if last is not None and (self.heap or page.partial or len(page.events) == search.limit):
            page.cursor = encode_cursor(search, last)
        return page
