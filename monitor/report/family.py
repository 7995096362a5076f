"""The report's one family of comparisons: which (retriever, measure) changes it calls a
regression or an improvement, with the chance of any false call held at `ALPHA`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragmon.core import drift

if TYPE_CHECKING:
    from ragmon.report.compare import Row

ALPHA = 0.05  # family-wise error rate of one report (weighted Holm over every comparison)
# The measure a regression is most often seen in gets this share of ALPHA (split between the
# retrievers tested); the other measures share the rest, and a rejection passes its share on.
PRIMARY, PRIMARY_SHARE = "ndcg", 0.6
# Of each row's level, a change the bad way holds this share and one the good way the rest:
# the report is read for regressions, so an improvement needs the stronger evidence.
WORSE_SHARE = 0.75
MIN_EFFECT = 0.1  # smallest change, in standard deviations of one event, worth a person's time


def family_weights(rows: Sequence[Row]) -> list[float]:
    """Each tested row's weight in the report's Holm family: `PRIMARY_SHARE` of the level to
    the primary measure's rows, the rest to the others (all of it when only one kind is
    tested)."""
    primary = sum(r.measure == PRIMARY for r in rows)
    if not 0 < primary < len(rows):
        return [1.0] * len(rows)
    first, rest = PRIMARY_SHARE / primary, (1 - PRIMARY_SHARE) / (len(rows) - primary)
    return [first if r.measure == PRIMARY else rest for r in rows]


def directed(row: Row) -> float:
    """The row's p-value with its level split between the two directions: the one-sided p of
    the way it moved over that way's share (`WORSE_SHARE`). A valid p-value (Bonferroni over
    the two one-sided tests), so the family keeps its level; 0.5 would give the two-sided p."""
    share = WORSE_SHARE if row.worse else 1 - WORSE_SHARE
    return min(1.0, row.tested.pvalue / 2 / share)


def settle(tested: Sequence[Row]) -> None:
    """Each tested row's adjusted p-value and status: a regression or an improvement when the
    family rejects it and the change is at least `MIN_EFFECT`, else unchanged."""
    adjusted = drift.holm([directed(r) for r in tested], family_weights(tested))
    for r, p in zip(tested, adjusted, strict=True):
        r.p_adj = p
        if p < ALPHA and abs(r.tested.effect) >= MIN_EFFECT:
            r.status = "regression" if r.worse else "improvement"
        else:
            r.status = "unchanged"
