"""The anchor set, pure: passages with known grades that the judge grades again on a schedule
(`RAGMON_ANCHOR_EVERY_HOURS`). Its agreement with them over time shows a judge that drifts
while its identity stays the same (a provider serving another model under the same name, a
changed endpoint), which no change of `RAGMON_JUDGE_MODEL` would mark.

The set is a golden file (RAGMON_ANCHOR_FILE) or people's grades: it grows as people grade
(`grow`: every passage kept stays, new ones join in a seeded random order, up to
RAGMON_ANCHOR_SIZE), so a set that started on a few events does not stay too small for ever.
Each run's agreement is compared with the first run of the same judge identity that could
measure it (its baseline). A run that cannot measure it (too few passages or questions, no set,
a judge that failed part of the set) is *blind*, and says why (`blind_reason`): the watch is
then exported and alerted as blind, never only logged.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ragmon.core.agreement import MIN_EVENTS, MIN_PAIRS, paired_agreement
from ragmon.core.drift import Interval

SEED = "ragmon-anchor"  # the order new passages join the set in (and a file's sample)
# Why a run could not measure agreement (the `reason` label of ragmon_judge_anchor_blind).
BLIND = {
    "no_set": "no anchor set yet: RAGMON_ANCHOR_FILE, or passages people graded with text "
    "storage on",
    "too_few": f"the set needs {MIN_PAIRS} passages from {MIN_EVENTS} questions to measure "
    "agreement",
    "incomplete": "the judge did not grade every passage of the set",
}


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


def grow(kept: Sequence[AnchorItem], people: Sequence[AnchorItem], size: int) -> list[AnchorItem]:
    """The set after people graded more: every kept passage stays (with its latest grade),
    passages not in it join in a seeded random order until `size`; in key order."""
    latest = {i.key: i for i in people}
    out = {i.key: latest.get(i.key, i) for i in kept}
    new = sorted(k for k in latest if k not in out)
    random.Random(SEED).shuffle(new)
    for k in new[: max(0, size - len(out))]:
        out[k] = latest[k]
    return [out[k] for k in sorted(out)]


def questions(items: Sequence[AnchorItem]) -> int:
    """Distinct questions of the set (its pairs move together by question)."""
    return len({i.query for i in items})


def blind_reason(run: Mapping[str, Any]) -> str | None:
    """Why a run could not measure agreement (a `BLIND` key), or None when it could."""
    if not run.get("passages"):
        return "no_set"
    if run.get("graded") != run.get("passages"):
        return "incomplete"
    if not run.get("kappa"):
        return "too_few"
    return None


WATCH_REASONS = ("no_run", "no_set", "too_few", "incomplete", "late")
LATE_RUNS = 2  # the watch is late when its last run is older than this many periods


def watch_state(last: Mapping[str, Any] | None, every_s: float, now: float) -> str | None:
    """Why the drift watch is blind now (a `WATCH_REASONS` value), or None: from the latest
    run, blind or not, and the period runs are scheduled at."""
    if last is None:
        return "no_run"
    at = datetime.fromisoformat(str(last["at"]).replace("Z", "+00:00")).timestamp()
    if now - at > LATE_RUNS * every_s:
        return "late"
    return blind_reason(last)


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
        "questions": questions(items),
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
