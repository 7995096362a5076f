"""Which events are one question: the clusters of the report's cluster-robust inference.

A question asked in other words is still one question: paraphrases of a trending topic have
different query hashes but retrieve the same passages and get the same grades, so counting them
as independent questions understates every standard error. Two events are joined when

- their query keys are equal (the hash of the normalized query: case and runs of white space do
  not matter), or
- their top-K passage ids overlap strongly: at least `OVERLAP` of the smaller list's distinct
  ids, and at least two ids unless a list has only one (what the retriever saw, not how the
  question was worded),

and clusters are the connected components of these links (single linkage: a chain of
paraphrases is one cluster). Joining too much only widens intervals (fewer, larger clusters);
joining too little is what raises false alarms, so the rule errs toward joining.
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

    Distinct passage lists are compared only when they share a passage that is in at most
    `hub` lists (a passage every answer cites proposes no pair), and then on all their ids.
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
    members = list(sets)
    lists: dict[Hashable, list[int]] = {}
    for i, s in enumerate(members):
        for pid in s:
            lists.setdefault(pid, []).append(i)
    for i, s in enumerate(members):
        shared: Counter[int] = Counter()
        for pid in s:
            near = lists[pid]
            if 1 < len(near) <= hub:
                shared.update(near)
        shared.pop(i, None)
        for j in shared:
            if j < i:
                continue
            other = members[j]
            if len(s & other) >= _needed(len(s), len(other), overlap):
                forest.union(base + i, base + j)
    roots = [forest.find(k) for k in node_of_key]
    _, codes = np.unique(np.array(roots), return_inverse=True)
    return codes.astype(np.int64)
