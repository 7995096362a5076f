"""How much of each retriever's traffic the judge saw this week, what share of its events the
weighted means stand for, and how precise its weekly nDCG@K is: "bm25: 12 % judged, standing
for 100 % of its 8,120 events, weekly nDCG +/- 0.021" (docs/sampling.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ragmon.core.weighted import hajek
from ragmon.report.compare import group_hist, group_name
from ragmon.report.document import Doc
from ragmon.report.gather import Events, Group, WindowData


@dataclass(frozen=True)
class Judged:
    """One retriever's judged events in the window, the share of the events they stand for
    that was judged (judged / sum of 1 / inclusion probability), the half-width of its weighted
    weekly nDCG@K (None with fewer than two judged values), and the events it received
    (None: not known). The judged events stand for the sum of 1 / inclusion probability of
    them: of the received, fewer when events went unjudged (the budget ran out, the judge
    failed, records were trimmed), so the weighted means cover only that share."""

    group: Group
    judged: int
    share: float
    half: float | None
    received: int | None = None
    stands_for: float = 0.0


def judged_shares(
    events: Mapping[Group, Events], received: Mapping[Group, int] | None = None
) -> list[Judged]:
    """Per group: `received` its events in the window (the ingest's count), when known."""
    out = []
    for group, ev in sorted(events.items()):
        probs = np.array(ev.probs or [1.0] * len(ev), dtype=float)
        if not len(probs):
            continue
        values = np.array(ev.values.get("ndcg", [math.nan] * len(ev)), dtype=float)
        keep = ~np.isnan(values)
        half = None
        if keep.sum() >= 2:
            iv = hajek(values[keep], probs[keep])
            half = (iv.high - iv.low) / 2
        stands = float((1 / probs).sum())
        got = (received or {}).get(group)
        out.append(Judged(group, len(probs), len(probs) / stands, half, got, stands))
    return out


def received_events(w: WindowData) -> dict[Group, int]:
    """Each judged group's events received in the window: its ingest signals' count (every
    accepted event adds one, judged or not)."""
    out = {}
    for group in w.events:
        h = group_hist(w.hists, "results", group, prefix="signal_")
        if h is not None and h.count > 0:
            out[group] = int(h.count)
    return out


def judged_line(j: Judged) -> str:
    precision = f"+/- {j.half:.3f}" if j.half is not None else "n/a (fewer than 2 judged)"
    covers = ""
    if j.received:
        covers = (
            f", standing for {100 * j.stands_for / j.received:.0f} % of its {j.received:,} events"
        )
    return f"{group_name(j.group)}: {100 * j.share:.0f} % judged{covers}, weekly nDCG {precision}"


def coverage_section(doc: Doc, rows: list[Judged]) -> None:
    if not rows:
        return
    doc.h(2, "How much was judged", "judged")
    doc.p(
        "Per retriever: the share of its events this window that were judged (each judged event "
        "stands for 1 / its inclusion probability), the share of the events it received that "
        "the judged ones stand for (below 100 % when events went unjudged: the budget ran out, "
        "the judge failed; the weighted means then cover only that share) and the 95 % "
        "half-width of its weighted mean nDCG@K."
    )
    doc.ul([judged_line(j) for j in rows])
