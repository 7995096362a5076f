"""How much of each retriever's traffic the judge saw this week, and how precise its weekly
nDCG@K is: "bm25: 12 % judged, weekly nDCG +/- 0.021" (docs/sampling.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ragmon.core.weighted import hajek
from ragmon.report.compare import group_name
from ragmon.report.document import Doc
from ragmon.report.gather import Events, Group


@dataclass(frozen=True)
class Judged:
    """One retriever's judged events in the window, the share of its events they stand for
    (judged / sum of 1 / inclusion probability) and the half-width of its weighted weekly
    nDCG@K (None with fewer than two judged values)."""

    group: Group
    judged: int
    share: float
    half: float | None


def judged_shares(events: Mapping[Group, Events]) -> list[Judged]:
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
        out.append(Judged(group, len(probs), len(probs) / float((1 / probs).sum()), half))
    return out


def judged_line(j: Judged) -> str:
    precision = f"+/- {j.half:.3f}" if j.half is not None else "n/a (fewer than 2 judged)"
    return f"{group_name(j.group)}: {100 * j.share:.0f} % judged, weekly nDCG {precision}"


def coverage_section(doc: Doc, rows: list[Judged]) -> None:
    if not rows:
        return
    doc.h(2, "How much was judged", "judged")
    doc.p(
        "Per retriever: the share of its events this window that were judged (each judged event "
        "stands for 1 / its inclusion probability; events the budget stopped are not counted) "
        "and the 95 % half-width of its weighted mean nDCG@K."
    )
    doc.ul([judged_line(j) for j in rows])
