"""The anchor set, pure: fixed passages with known grades that the judge grades again once a day.
Its agreement with them over time shows a judge that drifts while its identity stays the same
(a provider serving another model under the same name, a changed endpoint), which no change of
`RAGMON_JUDGE_MODEL` would mark.

The set is people's grades (frozen once: the same passages every day) or a golden file
(RAGMON_ANCHOR_FILE); each run's agreement is compared with the first run of the same judge
identity on the same set (its baseline).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ragmon.core.agreement import paired_agreement
from ragmon.core.drift import Interval

SEED = "ragmon-anchor"  # the sample of a set larger than RAGMON_ANCHOR_SIZE: the same every day


@dataclass(frozen=True)
class AnchorItem:
    """One passage of the anchor set: the query and text the judge sees, the known grade."""

    key: str  # where it comes from (`app|event|passage`, or `file:line:rank`): sorts the set
    query: str
    text: str
    grade: int


def from_people(records: Iterable[Mapping[str, Any]]) -> list[AnchorItem]:
    """Anchor items from people's grades that kept their texts: one per passage, the latest
    grade given (several people may have graded it)."""
    latest: dict[str, tuple[str, AnchorItem]] = {}
    for r in records:
        if not isinstance(r.get("query"), str) or not isinstance(r.get("text"), str):
            continue
        key = f"{r['app']}|{r['event_id']}|{r['passage_id']}"
        at = str(r.get("at") or "")
        if key not in latest or at >= latest[key][0]:
            latest[key] = (at, AnchorItem(key, r["query"], r["text"], int(r["grade"])))
    return [item for _, item in latest.values()]


def choose(items: Sequence[AnchorItem], size: int) -> list[AnchorItem]:
    """At most `size` items, the same ones for the same items: all of them, else a seeded
    random sample (no part of the traffic favoured), in key order."""
    ordered = sorted(items, key=lambda i: i.key)
    if len(ordered) > size:
        ordered = sorted(random.Random(SEED).sample(ordered, size), key=lambda i: i.key)
    return ordered


def _interval(i: Interval | None) -> dict[str, float] | None:
    return None if i is None else {"estimate": i.estimate, "low": i.low, "high": i.high}


def run_record(
    judge: str, items: Sequence[AnchorItem], grades: Sequence[int | None], at: str
) -> dict[str, Any]:
    """What one re-judging of the set found: the judge's agreement with the known grades on
    the passages it graded (pairs of one query move together), each with its interval."""
    pairs = [(i, g) for i, g in zip(items, grades, strict=True) if g is not None]
    a = paired_agreement(
        [i.grade for i, _ in pairs], [g for _, g in pairs], [i.query for i, _ in pairs]
    )
    return {
        "at": at,
        "judge": judge,
        "passages": len(items),
        "graded": len(pairs),
        "kappa": _interval(a.kappa),
        "exact": _interval(a.exact),
        "difference": _interval(a.difference),
        "reason": next(iter(a.reasons.values()), None),
    }


def drift(runs: Sequence[Mapping[str, Any]]) -> tuple[dict, dict] | None:
    """The latest complete run and its judge identity's first (the baseline), or None before
    any complete run. A run is complete when the judge graded every passage of the set."""
    done = sorted(
        (dict(r) for r in runs if r.get("graded") == r.get("passages") and r.get("kappa")),
        key=lambda r: r["at"],
    )
    if not done:
        return None
    latest = done[-1]
    baseline = next(r for r in done if r["judge"] == latest["judge"])
    return latest, baseline


def item_dict(item: AnchorItem) -> dict[str, Any]:
    return asdict(item)
