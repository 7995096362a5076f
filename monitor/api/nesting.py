"""Where a span stands among retriever spans, from the parent links of its export; no I/O.

A retriever span is an event when no retriever span is among its ancestors. Its export may not
hold them all: `SimpleSpanProcessor` sends each span alone, a `BatchSpanProcessor` batch can be
cut between a span and its parent, a Collector can reorder. And the outer span ends (so is
exported) after its inner ones. So the walk up the parent links ends in one of three ways: a
retriever span (nested), the root (outermost), or a span not in the export: then the retriever
span is an orphan, held until that span arrives (`ragmon.api.holds`), and every span of an
export tells the held spans that wait for it what it knows (`arrival`).
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass, field

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ragmon.api.schemas import RetrievalEvent
from ragmon.store import IngestItem
from ragmon.store.holds import NESTED, ROOT

MAX_DEPTH = 256  # parent links followed up from a span (a loop in a bad export ends there)
Tree = dict[tuple[bytes, bytes], tuple[bytes, bool]]  # (trace, span) → (parent, retriever)


def key(trace_id: bytes, span_id: bytes) -> str:
    """A span's id in the hold: its trace and span ids in hex (48 characters)."""
    return trace_id.hex() + span_id.hex()


def ancestry(span: Span, tree: Tree) -> bool | bytes:
    """True when a retriever span of the export is an ancestor of `span`, False when its root
    is reached without one, else the id of its first ancestor missing from the export."""
    parent = span.parent_span_id
    for _ in range(MAX_DEPTH):
        if not parent:
            return False
        found = tree.get((span.trace_id, parent))
        if found is None:
            return parent
        parent, retriever = found
        if retriever:
            return True
    return False


def arrival(span: Span, tree: Tree, retriever: bool) -> str:
    """What `span` tells a held span that waits for it: NESTED (it is a retriever span, or
    inside one), ROOT (no retriever above it), or the span it waits for in turn."""
    if retriever:
        return NESTED
    found = ancestry(span, tree)
    if isinstance(found, bytes):
        return key(span.trace_id, found)
    return NESTED if found else ROOT


@dataclass
class Orphan:
    """A retriever span whose parent is in another export: its event as the outermost one, and
    (`RAGMON_OTLP_NESTED=own`) as a nested one under its own name."""

    event: RetrievalEvent
    own: RetrievalEvent | None
    key: str
    awaits: str


@dataclass
class Hold:
    """One app's part of an export for the hold: its spans' arrivals `(span, code)`, and its
    orphans `(span, awaited, blob)` with their items to store if decided at once."""

    app: str
    arrivals: list[tuple[str, str]] = field(default_factory=list)
    spans: list[tuple[str, str, str]] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs.values())


def blob(outer: IngestItem, own: IngestItem | None) -> str:
    """What the hold keeps of an orphan: its items, ready to store (payload sealed)."""
    return json.dumps([astuple(outer), astuple(own) if own else None], separators=(",", ":"))


def items_of(text: str, outcome: str) -> list[IngestItem]:
    """The item to store for a held span decided `outcome`: none when it is nested and
    skipped, its own-name item when `own`, else its item as the outermost span."""
    outer, own = json.loads(text)
    if outcome == "nested" or (outcome == "own" and own is None):
        return []
    return [IngestItem(*(own if outcome == "own" else outer))]
