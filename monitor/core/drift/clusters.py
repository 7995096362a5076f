"""Which events are one question: the clusters of the report's cluster-robust inference.

A question asked in other words is still one question: paraphrases of a trending topic have
different query hashes but retrieve the same passages and get the same grades, so counting them
as independent questions understates every standard error. Two events are one question when

- their query keys are equal (the hash of the normalized query: case and runs of white space do
  not matter), or
- one's top-K passage ids overlap strongly with a question's *leading* list: at least `OVERLAP`
  of the smaller list's distinct ids, and at least two ids unless a list has only one (what the
  retriever saw, not how the question was worded).

Leading lists are taken in order of how many events retrieved them; a list that overlaps no
leading list leads its own question. A list joins its leader, never a chain of lists each
overlapping the next: on a small knowledge base neighbouring questions share some passages, and
chaining them (single linkage) made a whole knowledge base one question, every interval of zero
width. Query keys still join whatever lists they retrieved.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

OVERLAP = 0.5  # shared share of the smaller top-K list that makes two events one question
HUB = 256  # a passage in more distinct top-K lists than this proposes no pairs by itself


class _Forest:
    """Union-find with path halving and union by size."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]


def _needed(a: int, b: int, overlap: float) -> int:
    """Shared ids two lists of `a` and `b` distinct ids need to be joined."""
    small = min(a, b)
    return small if small <= 1 else max(2, math.ceil(overlap * small))


def retrieval_clusters(
    keys: Sequence[Hashable],
    passages: Sequence[Sequence[Hashable]],
    overlap: float = OVERLAP,
    hub: int = HUB,
) -> np.ndarray:
    """Cluster codes 0..G-1 for events with these query keys and top-K passage ids (an empty
    list: the event joins by its key only).

    A list is compared with the leading lists it shares a passage with that is in at most `hub`
    distinct lists (a passage every answer cites proposes no pair), and then on all their ids;
    it joins the first leader (in leading order) it overlaps enough.
    """
    n = len(keys)
    if len(passages) != n:
        raise ValueError("keys and passages must have one entry per event")
    key_ids: dict[Hashable, int] = {}
    sets: dict[frozenset, int] = {}
    node_of_key = [key_ids.setdefault(k, len(key_ids)) for k in keys]
    event_set = []
    for p in passages:
        ids = frozenset(p)
        event_set.append(sets.setdefault(ids, len(sets)) if ids else -1)
    # nodes: one per distinct key, then one per distinct passage set
    forest = _Forest(len(key_ids) + len(sets))
    base = len(key_ids)
    for k, code in zip(node_of_key, event_set, strict=True):
        if code >= 0:
            forest.union(k, base + code)
    # leaders first by how many events retrieved them, then by first appearance
    uses = Counter(c for c in event_set if c >= 0)
    members = list(sets)
    df: Counter[Hashable] = Counter(pid for m in members for pid in m)
    rank: dict[int, int] = {}  # leading list -> its place in the leading order
    leaders: dict[Hashable, list[int]] = {}  # passage -> the leading lists holding it, in order
    for i in sorted(range(len(members)), key=lambda i: (-uses[i], i)):
        ids = members[i]
        shared: Counter[int] = Counter()  # insertion order: leading order of first mention
        for pid in ids:
            if 1 < df[pid] <= hub:
                shared.update(leaders.get(pid, ()))
        enough = [j for j in shared if shared[j] >= _needed(len(ids), len(members[j]), overlap)]
        if enough:
            forest.union(base + min(enough, key=rank.__getitem__), base + i)
        else:
            rank[i] = len(rank)
            for pid in ids:
                leaders.setdefault(pid, []).append(i)
    roots = [forest.find(k) for k in node_of_key]
    _, codes = np.unique(np.array(roots), return_inverse=True)
    return codes.astype(np.int64)
